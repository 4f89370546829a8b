package controller

import (
	"context"
	"fmt"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/plan"
)

// hyperparameter's feedback in plan order, and moves on to the next window:
// window 0 of the main pass when every explorer has settled (Commit). The
// main pass asks the explorers nothing: they learn no more. level is the
// workload's own learning rate at the window's end (hparam.Observation's
// Level; 0 where it has none).
func (c *Controller) Observe(ctx context.Context, losses, probes []float64, level float64) ([]ParamFeedback, []Event, error) {
	pl := c.plan
	if pl == nil {
		return nil, nil, fmt.Errorf("%w: window %d has not been planned", hparam.ErrOrder, c.next)
	}
	n := c.shape.Ranks
	if len(losses) != n {
		return nil, nil, fmt.Errorf("%w: %d losses for %d ranks", hparam.ErrInvalid, len(losses), n)
	}
	if probes != nil && len(probes) != n {
		return nil, nil, fmt.Errorf("%w: %d probe losses for %d ranks", hparam.ErrInvalid, len(probes), n)
	}
	out := make([]ParamFeedback, len(c.params))
	var events []Event
	if c.pass == plan.PassSearch {
		events = c.observeSearch(ctx, pl, out, hparam.Observation{Losses: losses, Probe: probes, Level: level})
	}
	for i, p := range c.params {
		out[i].Name = p.name
		if p.frozen || c.pass == plan.PassMain {
			out[i].Base, out[i].Frozen = p.base, p.frozen
		}
	}
	c.plan, c.genBefore = nil, nil
	c.next++
	if c.pass == plan.PassSearch && c.searchOver() {
		events = append(events, c.commit(ctx, pl.Start+pl.Steps)...)
	}
	return out, events, nil
}

// observeSearch hands a search window to the explorers, filling out.
// o carries what every explorer sees alike (the losses, probes and level).
func (c *Controller) observeSearch(ctx context.Context, pl *plan.Plan, out []ParamFeedback, o hparam.Observation) []Event {
	n := len(o.Losses)
	errs := c.each(func(i int, p *param) error {
		o := o
		o.Window, o.Values = pl.Window, p.lastValues(&pl.Params[i])
		fb, err := p.ex.Observe(ctx, o)
		if err == nil && len(fb.Weights) != 0 && len(fb.Weights) != n {
			err = fmt.Errorf("%w: %d weights for %d ranks", hparam.ErrInvalid, len(fb.Weights), n)
		}
		out[i].Feedback = fb
		return err
	}, c.drawer(c.next+1))
	var events []Event
	for i, p := range c.params {
		p.search = out[i].Search
		if errs[i] != nil {
			out[i].Feedback = hparam.Feedback{}
			events = append(events, c.freeze(p, "observe", errs[i]))
		}
	}
	return events
}

// searchOver reports whether the search pass is over with windows left
// to train: some live explorer's search is done and none is searching. A
// search that lasts the whole run keeps its model (one pass).
func (c *Controller) searchOver() bool {
	return c.liveSearchDone(func(i int) hparam.SearchState { return c.params[i].search }) && c.next < c.windows
}

// liveSearchDone reports whether, by the states state gives each explorer,
// some live explorer's search is done and none is searching.
func (c *Controller) liveSearchDone(state func(i int) hparam.SearchState) bool {
	done := false
	for i, p := range c.params {
		if p.frozen {
			continue
		}
		switch state(i) {
		case hparam.Searching:
			return false
		case hparam.SearchDone:
			done = true
		}
	}
	return done
}

// commit ends the search pass at step end: every live explorer commits
// (one that fails is frozen at its base, which it then commits), and the
// next plan is window 0 of the main pass.
func (c *Controller) commit(ctx context.Context, end int) []Event {
	commits := make([]hparam.Commitment, len(c.params))
	errs := c.each(func(i int, p *param) error {
		var err error
		commits[i], err = p.ex.Commit(ctx)
		return err
	}, nil)
	var events []Event
	for i, p := range c.params {
		if errs[i] != nil {
			events = append(events, c.freeze(p, "commit", errs[i]))
		}
		p.commit = commits[i]
		if p.frozen {
			p.commit = hparam.Commitment{Value: p.base}
		}
	}
	if c.next < minSearchWindows {
		c.notices = append(c.notices, fmt.Sprintf("the search pass ended after %d windows of %d steps: so few controller updates move a guess that is far off only part of the way (on the GPT 1.1-2x per update); a shorter window gives the search more (train.window, or window= in hdet.attach), which on the GPT helped with a probe and drifted to small rates on training losses alone (docs/benchmarks.md, the GPT study)",
			c.next, c.shape.WindowSteps))
	}
	c.pass, c.searchEnd, c.next, c.ahead = plan.PassMain, end, 0, nil
	return events
}

// minSearchWindows: a search pass of fewer windows gets a notice. The GPT
// study (300 steps, docs/benchmarks.md) committed x0.2 of the best max_lr
// from 10x below after 3 windows of 50 steps, x0.4-0.5 after 6 of 20 with
// a probe (training losses alone: x0.26-0.39 from every start).
const minSearchWindows = 4

// to the base, in one pass over the ranks (not a pass over the slots, then
// one looking each rank's slot up: N values written and read once more).
func (p *param) lastValues(pp *plan.ParamPlan) []float64 {
	n := len(pp.Slots)
	if len(p.values) != n {
		p.values, p.coef = make([]float64, n), nil
	}
	if p.coef == nil || p.coefFor != pp.Spread {
		p.coef, p.coefFor = grow(p.coef, n), pp.Spread
		pp.Spread.Coefs(p.coef)
	}
	base, add, b, coef := pp.Base[len(pp.Base)-1], pp.Spread.Kind == hparam.Additive, pp.Bounds, p.coef
	for r, s := range pp.Slots {
		p.values[r] = b.Clamp(withCoef(add, base, coef[s]))
	}
	return p.values
}

// grow returns s resized to n elements, reusing its array when it has the
// capacity (the contents are to be overwritten).
func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}

// withCoef is the value, before clamping, of a slot with coefficient c
// (hparam.Spread.Coefs) for base, add telling an additive spread.
func withCoef(add bool, base, c float64) float64 {
	if add {
		return base + c
	}
	return base * c
}
