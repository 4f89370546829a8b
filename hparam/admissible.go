package hparam

import (
	"fmt"
	"math"
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

// Admissible is the range hyperparameter name admits (Builtins); for a
// name hdet does not know, any finite value.
func Admissible(name string) Range {
	if b, ok := BuiltinOf(name); ok {
		return b.Admits
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

// Describe says what r admits in words, as a config error's "want": "a
// finite number > 0", "a number in [0, 1)".
func (r Range) Describe() string {
	lower, upper := ">=", "<="
	if r.LowerOpen {
		lower = ">"
	}
	if r.UpperOpen {
		upper = "<"
	}
	switch lo, hi := math.IsInf(r.Lower, 0), math.IsInf(r.Upper, 0); {
	case lo && hi:
		return "a finite number"
	case hi:
		return fmt.Sprintf("a finite number %s %g", lower, r.Lower)
	case lo:
		return fmt.Sprintf("a finite number %s %g", upper, r.Upper)
	}
	return "a number in " + r.String()
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
