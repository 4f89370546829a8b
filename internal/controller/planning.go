package controller

import (
	"context"
	"fmt"
	"math"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/plan"
)

func checkWindowPlan(wp hparam.WindowPlan, steps int) error {
	if len(wp.Base) != steps {
		return fmt.Errorf("%w: %d base values for a window of %d steps", hparam.ErrInvalid, len(wp.Base), steps)
	}
	for i, b := range wp.Base {
		if !healthy(b) {
			return fmt.Errorf("%w: base value %v at the window's step %d", hparam.ErrInvalid, b, i)
		}
	}
	if err := wp.Spread.Validate(); err != nil {
		return err
	}
	return wp.Bounds.Validate()
}

// Plan returns the plan of window Next() of pass Pass(), asking every
// live explorer, with the permutations the Observe before drew (drawing
// them itself for the first window); asked again before Observe, it
// returns the same plan. A main-pass plan has no spread and no probe, and

// every rank in its own slot; since it depends on no observation, the
// explorers are asked for the next one while this window trains. Events
// report explorers frozen on the way.
func (c *Controller) Plan(ctx context.Context) (*plan.Plan, []Event, error) {
	if c.plan != nil {
		return c.plan, nil, nil
	}
	if c.next >= c.passWindows() {
		return nil, nil, fmt.Errorf("%w: all %d windows have been planned", hparam.ErrOrder, c.passWindows())
	}
	for _, p := range c.params {
		if p.frozen && !p.hasBase {
			return nil, nil, fmt.Errorf("%w: %s was frozen before it planned a window, so it has no base", ErrExplorer, p.name)
		}
	}
	req := c.request(c.next)
	a := c.prefetched()
	if a == nil || a.req != req {
		var draw func()
		if c.pass == plan.PassSearch {
			draw = c.drawer(c.next)
		}
		a = c.ask(ctx, req, draw)
	}
	pl := &plan.Plan{Window: req.Window, Start: req.Start, Steps: req.Steps, Pass: c.pass, Params: make([]plan.ParamPlan, len(c.params))}
	events, err := c.assemble(pl, a.wps, a.errs)
	if err != nil {
		return nil, events, err
	}
	// With a probe the replicas keep their own batches: common batches made
	// the probe's walks overshoot and turn (docs/history/issue51-noharm.md).
	pl.Search = c.pass == plan.PassSearch && !c.shape.Probe && c.expectsRestart(a.wps)
	c.genBefore = nil
	if c.pass == plan.PassSearch {
		c.genBefore = c.ahead.gen
	}
	c.plan, c.ahead = pl, nil
	if c.pass == plan.PassMain && c.next+1 < c.passWindows() {
		c.prefetch(ctx, c.request(c.next+1))
	}
	return pl, events, nil
}

// expectsRestart reports whether the live explorers' answers expect the
// search pass to end in a commit before the last window (Plan.Search), as
// searchOver asks at each boundary.
func (c *Controller) expectsRestart(wps []hparam.WindowPlan) bool {
	return c.liveSearchDone(func(i int) hparam.SearchState { return wps[i].SearchAtEnd })
}

// keep puts back a prefetched plan that a call had to wait for.
func (c *Controller) keep(a *answers) {
	ch := make(chan *answers, 1)
	ch <- a
	c.fetching = ch
}

// request is the request for window k of the pass in force.
func (c *Controller) request(k int) hparam.WindowRequest {
	t, s := c.windowSteps(), c.shape.TotalSteps
	return hparam.WindowRequest{Window: k, Start: k * t, Steps: min(t, s-k*t)}
}

// parts are the explorers' requests for the T-step windows that req
// spans: req itself, except in a main pass with a longer window.
func (c *Controller) parts(req hparam.WindowRequest) []hparam.WindowRequest {
	t, s := c.shape.WindowSteps, c.shape.TotalSteps
	var out []hparam.WindowRequest
	for start := req.Start; start < req.Start+req.Steps; start += t {
		out = append(out, hparam.WindowRequest{Window: start / t, Start: start, Steps: min(t, s-start)})
	}
	return out
}

// answers are the live explorers' plans for one request (errs[i] the
// failure of explorer i).
type answers struct {
	req  hparam.WindowRequest
	wps  []hparam.WindowPlan
	errs []error
}

// ask asks every live explorer for req's plan; meanwhile as in each.
func (c *Controller) ask(ctx context.Context, req hparam.WindowRequest, meanwhile func()) *answers {
	a := &answers{req: req, wps: make([]hparam.WindowPlan, len(c.params))}
	parts := c.parts(req)
	a.errs = c.each(func(i int, p *param) error {
		var base []float64
		for _, r := range parts {
			wp, err := p.ex.Plan(ctx, r)
			if err == nil {
				err = checkWindowPlan(wp, r.Steps)
			}
			if err != nil {
				return err
			}
			// The last part's spread, bounds and probe stand for the
			// window: a main pass has neither spread nor probe.
			base, a.wps[i] = append(base, wp.Base...), wp
		}
		a.wps[i].Base = base
		return nil
	}, meanwhile)
	return a
}

// prefetch asks the explorers for req's plan in the background. It
// touches no controller state: whatever calls an explorer or freezes one
// first waits for it (prefetched).
func (c *Controller) prefetch(ctx context.Context, req hparam.WindowRequest) {
	ch := make(chan *answers, 1)
	go func() { ch <- c.ask(ctx, req, nil) }()
	c.fetching = ch
}

// prefetched waits for the background plan, if one was asked for.
func (c *Controller) prefetched() *answers {
	if c.fetching == nil {
		return nil
	}
	a := <-c.fetching
	c.fetching = nil
	return a
}

// assemble fills plan with each explorer's answer (errs[i] its failure):
// a failing explorer with a base is frozen, one without fails the plan.
func (c *Controller) assemble(pl *plan.Plan, wps []hparam.WindowPlan, errs []error) ([]Event, error) {
	var events []Event
	for i, p := range c.params {
		if err := errs[i]; err != nil {
			if !p.hasBase {
				return events, fmt.Errorf("%w: %s: plan of window %d: %w", ErrExplorer, p.name, pl.Window, err)
			}
			events = append(events, c.freeze(p, "plan", err))
		} else if !p.frozen {
			events = append(events, c.admit(p, &wps[i])...)
		}
		wp := wps[i]
		if p.frozen {
			wp = hparam.WindowPlan{Base: make([]float64, pl.Steps), Spread: p.spread, Bounds: p.bounds}
			for j := range wp.Base {
				wp.Base[j] = p.base
			}
		}
		if c.pass == plan.PassMain { // plain training at the committed values
			wp.Spread.Alpha, wp.Probe = 0, false
		}
		p.base, p.spread, p.bounds, p.hasBase = wp.Base[len(wp.Base)-1], wp.Spread, wp.Bounds, true
		pl.Params[i] = plan.ParamPlan{Name: p.name, Base: wp.Base, Spread: wp.Spread, Bounds: wp.Bounds, Slots: c.slots(i), Frozen: p.frozen}
		c.askProbe(pl, p, wp.Probe && !p.frozen)
	}
	return events, nil
}

// slots is hyperparameter i's slot per rank in the plan being made: the
// drawn permutation in the search pass, rank r in slot r in the main pass
// (no spread, so nothing to draw).
func (c *Controller) slots(i int) []uint32 {
	if c.pass == plan.PassSearch {
		return c.ahead.slots[i]
	}
	out := make([]uint32, c.shape.Ranks)
	for r := range out {
		out[r] = uint32(r)
	}
	return out
}

// draws is a window's permutations, one per hyperparameter in plan order,
// and the generator's state before them.
type draws struct {
	gen   []byte
	slots [][]uint32
}

// drawer returns what draws the permutations of window k, the next to
// plan, into ahead; nil when they are drawn or the run has no window k.
// Observe draws them while the explorers observe the window before, as
// they depend on nothing a window returns: with a core to spare they cost
// no time (Plan draws them for window 0 and after LoadState, while the
// explorers plan).
func (c *Controller) drawer(k int) func() {
	if c.ahead != nil || k >= c.windows {
		return nil
	}
	return func() {
		gen, _ := c.perm.MarshalBinary() // a PCG state always marshals
		d := &draws{gen: gen, slots: make([][]uint32, len(c.params))}
		for i := range d.slots {
			d.slots[i] = make([]uint32, c.shape.Ranks)
			c.perm.Perm(d.slots[i])
		}
		c.ahead = d
	}
}

// askProbe records that p asked for probe losses this window: the plan
// probes when the workload can, otherwise it anneals (the ranks are
// compared by the training losses of the annealed window's end) and a
// notice says so once.
func (c *Controller) askProbe(pl *plan.Plan, p *param, asked bool) {
	switch {
	case !asked:
	case c.shape.Probe:
		pl.Probe = true
	default:
		pl.Anneal = true
		if !c.noticed[p.name] {
			c.noticed[p.name] = true
			c.notices = append(c.notices, fmt.Sprintf("explorer %q asked for the probe signal, but the workload cannot evaluate probe losses: the search compares the ranks by their training losses at the end of windows whose learning rates anneal to zero, which is less exact than a probe; a PyTorch script gives hdet a probe with hdet.probe_dataset(model, dataset)", p.name))
		}
	}
}

// Observe feeds the planned window's results to the explorers: losses[r]
// is rank r's mean training loss over the window (NaN or Inf when the rank
// was unhealthy), probes[r] its probe loss (nil when the window did not
// probe). Each explorer gets the values every rank used at the
// window's last step, computed from the plan. It returns each

// healthy reports whether v is finite.
func healthy(v float64) bool { return math.Abs(v) <= math.MaxFloat64 }
