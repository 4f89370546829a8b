package hparam

import (
	"fmt"
	"math"
	"strings"
)

// Range is what a hyperparameter admits: the values between Lower and
// Upper, each end included unless it is open. An infinite end is open, so
// every admitted value is finite.
type Range struct {
	Lower, Upper         float64
	LowerOpen, UpperOpen bool
}

var (
	positive    = Range{Lower: 0, Upper: math.Inf(1), LowerOpen: true, UpperOpen: true}
	nonNegative = Range{Lower: 0, Upper: math.Inf(1), UpperOpen: true}
	fraction    = Range{Lower: 0, Upper: 1, UpperOpen: true}
	finite      = Range{Lower: math.Inf(-1), Upper: math.Inf(1), LowerOpen: true, UpperOpen: true}
)

// admissibleRanges are the ranges of the hyperparameters hdet knows, by
// group: the name before any "/", so "lr/hidden" is an lr.
var admissibleRanges = map[string]Range{
	"lr":              positive,
	"weight_decay":    nonNegative,
	"dropout":         fraction,
	"momentum":        fraction,
	"label_smoothing": fraction,
	"beta1":           fraction,
	"beta2":           fraction,
	"eps":             positive,
}

// Admissible is the range hyperparameter name admits; for a name hdet does
// not know, any finite value.
func Admissible(name string) Range {
	group, _, _ := strings.Cut(name, "/")
	if r, ok := admissibleRanges[group]; ok {
		return r
	}
	return finite
}

// Contains reports whether r admits v (never NaN).
func (r Range) Contains(v float64) bool {
	return (v > r.Lower || !r.LowerOpen && v == r.Lower) && (v < r.Upper || !r.UpperOpen && v == r.Upper)
}

// Closure is r with its finite ends included: where a plan's base may lie,
// since every rank's value is clamped to bounds inside r (a cosine lr
// schedule may start at 0).
func (r Range) Closure() Range {
	return Range{Lower: r.Lower, Upper: r.Upper, LowerOpen: math.IsInf(r.Lower, 0), UpperOpen: math.IsInf(r.Upper, 0)}
}

// Clamp is the admitted value nearest v: an open end is replaced by the
// nearest float inside it.
func (r Range) Clamp(v float64) float64 {
	lo, hi := r.Lower, r.Upper
	if r.LowerOpen {
		lo = math.Nextafter(lo, hi)
	}
	if r.UpperOpen {
		hi = math.Nextafter(hi, lo)
	}
	if math.IsNaN(v) {
		return lo
	}
	return math.Min(math.Max(v, lo), hi)
}

func (r Range) String() string {
	open, closed := "[", "]"
	if r.LowerOpen {
		open = "("
	}
	if r.UpperOpen {
		closed = ")"
	}
	return fmt.Sprintf("%s%g, %g%s", open, r.Lower, r.Upper, closed)
}

// AdmitBounds names the end of b that hyperparameter name does not admit,
// as a FieldError ("bounds.upper"); nil when both are admitted.
func AdmitBounds(name string, b Bounds) error {
	r := Admissible(name)
	for _, end := range []struct {
		field string
		v     float64
	}{{"bounds.lower", b.Lower}, {"bounds.upper", b.Upper}} {
		if !r.Contains(end.v) {
			return FieldErrorf(end.field, "%g is outside what %s admits, %s", end.v, name, r)
		}
	}
	return nil
}
