package hparam

import (
	"context"
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

// closure is r with its finite ends included: where a base may lie, since
// every rank's value is clamped to bounds inside r (a cosine lr schedule
// may start at 0).
func (r Range) closure() Range {
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
			return fieldErr(end.field, "%g is outside what %s admits, %s", end.v, name, r)
		}
	}
	return nil
}

// admitPlan is AdmitBounds for a window plan's bounds, then its base values
// against the closure of the range (field "schedule").
func admitPlan(name string, wp WindowPlan) error {
	if err := AdmitBounds(name, wp.Bounds); err != nil {
		return err
	}
	r := Admissible(name)
	for i, b := range wp.Base {
		if !r.closure().Contains(b) {
			return fieldErr("schedule", "the base %g at the window's step %d is outside what %s admits, %s", b, i, name, r)
		}
	}
	return nil
}

// admitSchedule refuses a built-in explorer's config whose bounds, or whose
// schedule at any of its extremes (the first step, the end of the warm-up,
// the last step), leave what hyperparameter name admits.
func admitSchedule(name string, s Schedule, b Bounds) error {
	if err := AdmitBounds(name, b); err != nil {
		return err
	}
	r := Admissible(name)
	for _, step := range []int{0, min(warmupEnd(s), s.Steps()-1), s.Steps() - 1} {
		v, err := s.At(step)
		if err != nil {
			return err
		}
		if !r.closure().Contains(v) {
			return fieldErr("schedule", "gives %g at step %d, outside what %s admits, %s", v, step, name, r)
		}
	}
	return nil
}

// admitSetup refuses, before any training, an explorer whose declared
// bounds leave what its hyperparameter admits, or whose plan of window 0
// (its config's schedule and bounds) leaves what the instance admits. It
// asks for window 0's plan once more than the run will; an explorer must
// answer a window's Plan the same way until it observes that window.
func admitSetup(ctx context.Context, ne NamedExplorer, d Descriptor, shape RunShape) error {
	who := fmt.Sprintf("%s (explorer %s %s)", ne.Name, d.Name, d.Version)
	if err := AdmitBounds(d.Hyperparameter, d.Bounds); err != nil {
		return fmt.Errorf("%s declares %w", who, err)
	}
	steps := min(shape.WindowSteps, shape.TotalSteps)
	wp, err := ne.Explorer.Plan(ctx, WindowRequest{Window: 0, Start: 0, Steps: steps})
	if err == nil {
		err = checkWindowPlan(wp, steps)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: plan of window 0: %w", ErrExplorer, who, err)
	}
	if err := admitPlan(ne.Name, wp); err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	return nil
}

// maxViolations is how many windows an explorer may plan what its
// hyperparameter does not admit, each clamped, before it is frozen.
const maxViolations = 3

// admit checks p's plan wp against what p admits. Outside it, the plan is
// clamped into the bounds p was last admitted with (an EventClamped); the
// maxViolations-th such window freezes p instead, at its last admitted
// plan. Either way no rank sees a value its hyperparameter does not admit.
func (c *Controller) admit(p *param, wp *WindowPlan) []Event {
	bad := admitPlan(p.name, *wp)
	if bad == nil {
		return nil
	}
	p.violations++
	if p.violations >= maxViolations && p.hasBase {
		return []Event{c.freeze(p, "plan", fmt.Errorf("%w, in %d windows", bad, p.violations))}
	}
	r := Admissible(p.name)
	safe := Bounds{Lower: r.Clamp(p.bounds.Lower), Upper: r.Clamp(p.bounds.Upper)}
	if !r.Contains(wp.Bounds.Lower) {
		wp.Bounds.Lower = safe.Clamp(wp.Bounds.Lower)
	}
	if !r.Contains(wp.Bounds.Upper) {
		wp.Bounds.Upper = safe.Clamp(wp.Bounds.Upper)
	}
	if wp.Bounds.Lower > wp.Bounds.Upper {
		wp.Bounds = safe
	}
	for i, b := range wp.Base {
		if !r.closure().Contains(b) {
			wp.Base[i] = wp.Bounds.Clamp(b)
		}
	}
	err := fmt.Errorf("%w; clamped to bounds [%g, %g] (%d of %d such windows before the explorer is frozen)",
		bad, wp.Bounds.Lower, wp.Bounds.Upper, p.violations, maxViolations)
	return []Event{{Kind: EventClamped, Window: c.next, Param: p.name, Op: "plan", Err: err, Base: wp.Base[len(wp.Base)-1], Spread: wp.Spread}}
}
