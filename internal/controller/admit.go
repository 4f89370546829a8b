package controller

import (
	"context"
	"fmt"

	"github.com/hdet-dev/hdet/hparam"
)

// admitPlan is AdmitBounds for a window plan's bounds, then its base values
// against the closure of the range (field "schedule").
func admitPlan(name string, wp hparam.WindowPlan) error {
	if err := hparam.AdmitBounds(name, wp.Bounds); err != nil {
		return err
	}
	r := hparam.Admissible(name)
	for i, b := range wp.Base {
		if !r.Closure().Contains(b) {
			return &hparam.FieldError{Field: "schedule", Msg: fmt.Sprintf("the base %g at the window's step %d is outside what %s admits, %s", b, i, name, r)}
		}
	}
	return nil
}

// admitSetup refuses, before any training, an explorer whose declared
// bounds leave what its hyperparameter admits, or whose plan of window 0
// (its config's schedule and bounds) leaves what the instance admits. It
// asks for window 0's plan once more than the run will; an explorer must
// answer a window's Plan the same way until it observes that window.
func admitSetup(ctx context.Context, ne NamedExplorer, d hparam.Descriptor, shape RunShape) error {
	who := fmt.Sprintf("%s (explorer %s %s)", ne.Name, d.Name, d.Version)
	if err := hparam.AdmitBounds(d.Hyperparameter, d.Bounds); err != nil {
		return fmt.Errorf("%s declares %w", who, err)
	}
	steps := min(shape.WindowSteps, shape.TotalSteps)
	wp, err := ne.Explorer.Plan(ctx, hparam.WindowRequest{Window: 0, Start: 0, Steps: steps})
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
func (c *Controller) admit(p *param, wp *hparam.WindowPlan) []Event {
	bad := admitPlan(p.name, *wp)
	if bad == nil {
		return nil
	}
	p.violations++
	if p.violations >= maxViolations && p.hasBase {
		return []Event{c.freeze(p, "plan", fmt.Errorf("%w, in %d windows", bad, p.violations))}
	}
	r := hparam.Admissible(p.name)
	safe := hparam.Bounds{Lower: r.Clamp(p.bounds.Lower), Upper: r.Clamp(p.bounds.Upper)}
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
		if !r.Closure().Contains(b) {
			wp.Base[i] = wp.Bounds.Clamp(b)
		}
	}
	err := fmt.Errorf("%w; clamped to bounds [%g, %g] (%d of %d such windows before the explorer is frozen)",
		bad, wp.Bounds.Lower, wp.Bounds.Upper, p.violations, maxViolations)
	return []Event{{Kind: EventClamped, Window: c.next, Param: p.name, Op: "plan", Err: err, Base: wp.Base[len(wp.Base)-1], Spread: wp.Spread}}
}
