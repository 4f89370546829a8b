// Package controller is rank 0's meta-controller (docs/design.md §1 and
// §3): it asks every explorer (package hparam's Explorer, in process or a
// plugin) for its window plan, draws the slot permutations, feeds the
// window's losses back, commits the explorers when the search pass ends,
// freezes one that fails, and saves and restores all of it for
// checkpoints. The plan it hands out is package plan's.
package controller

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/plan"
)

// ErrExplorer marks an explorer failure the controller cannot absorb by
// freezing: failing to describe or initialise itself, or to plan window 0
// (when there is no base yet to freeze at).
var ErrExplorer = errors.New("explorer failed")

// RunShape is what the controller needs to know about the run.
type RunShape struct {
	Ranks       int    // N
	TotalSteps  int    // S
	WindowSteps int    // T
	Seed        uint64 // seeds the permutations and, derived, each explorer
	Probe       bool   // the workload can evaluate the probe signal (hparam.Setup.Probe)
}

// NamedExplorer is one explored hyperparameter: the instance name the
// workload receives ("lr", "lr/hidden"), its explorer and its config block
// as JSON (nil means "{}").
type NamedExplorer struct {
	Name     string
	Explorer hparam.Explorer
	Config   []byte
}

// Event kinds.
const (
	EventFrozen  = "frozen"  // the explorer failed; its hyperparameter is frozen
	EventClamped = "clamped" // its plan left what the hyperparameter admits and was clamped (admit.go)
)

// Event reports that an explorer failed during window Window's call Op and
// was frozen: hyperparameter Param keeps base Base with spread Spread (and
// its bounds) for the rest of the run. Kind EventClamped reports a plan
// clamped into what the hyperparameter admits instead (Err says how).
type Event struct {
	Kind   string // EventFrozen or EventClamped
	Window int
	Param  string
	Op     string // the failed call: "plan", "observe", "save_state", "load_state"
	Err    error
	Base   float64
	Spread hparam.Spread
}

func (e Event) String() string {
	if e.Kind == EventClamped {
		return fmt.Sprintf("window %d: explorer %q: %v", e.Window, e.Param, e.Err)
	}
	return fmt.Sprintf("window %d: explorer %q: %s failed: %v; frozen at %g with spread %s for the rest of the run",
		e.Window, e.Param, e.Op, e.Err, e.Base, e.Spread)
}

// ParamCommit is one hyperparameter's committed value, for metrics and the
// report. A frozen explorer commits its frozen base.
type ParamCommit struct {
	Name string
	hparam.Commitment
	Frozen bool
}

// ParamFeedback is one hyperparameter's answer to a window, for metrics.
type ParamFeedback struct {
	Name string
	hparam.Feedback
	Frozen bool
}

type param struct {
	name    string
	ex      hparam.Explorer
	desc    hparam.Descriptor
	frozen  bool
	hasBase bool
	base    float64 // the current base: the last plan's base at its last step
	spread  hparam.Spread
	bounds  hparam.Bounds
	search  hparam.SearchState // what its last feedback said of the search
	commit  hparam.Commitment  // what it committed (main pass)
	// violations counts the windows whose plan was clamped (admit.go);
	// not checkpointed.
	violations int

	// Scratch for Observe, reused every window: the value of each rank
	// (explorers must not keep Observation.Values), and the slots' spread
	// coefficients for spread coefFor, kept while the spread holds (only
	// narrowing changes it).
	values, coef []float64
	coefFor      hparam.Spread
}

// Controller is rank 0's meta-controller: it asks each explorer for its
// window plan, draws one permutation per hyperparameter per window, and
// feeds the window's values and losses back. An explorer that errs or
// answers nonsense is frozen (Event) and never called again; training goes on.
// A Controller is not safe for concurrent use; it calls different
// explorers concurrently, never one explorer concurrently with itself.
type Controller struct {
	shape     RunShape
	params    []*param
	perm      *Permuter
	windows   int
	pass      int           // PassSearch or PassMain
	searchEnd int           // main pass: the step the search pass ended at
	next      int           // the window to plan next (in the pass)
	plan      *plan.Plan    // the plan of window next, once drawn
	genBefore []byte        // the permuter's state before plan's draws
	ahead     *draws        // window next's permutations, drawn before its plan
	fetching  chan *answers // main pass: the next window's plan, asked for while this one trains
	notices   []string
	noticed   map[string]bool
}

// NewController describes and initialises every explorer. Errors (a bad
// shape, a repeated name, an explorer that fails Describe or Init) wrap
// ErrInvalid or ErrExplorer and the explorer's own error.
func NewController(ctx context.Context, shape RunShape, explorers []NamedExplorer) (*Controller, error) {
	if err := (hparam.Setup{Ranks: shape.Ranks, TotalSteps: shape.TotalSteps, WindowSteps: shape.WindowSteps}).Validate(); err != nil {
		return nil, err
	}
	if shape.Ranks > math.MaxUint32 {
		return nil, fmt.Errorf("%w: %d ranks", hparam.ErrInvalid, shape.Ranks)
	}
	c := &Controller{
		shape:   shape,
		perm:    NewPermuter(shape.Seed),
		windows: (shape.TotalSteps + shape.WindowSteps - 1) / shape.WindowSteps,
	}
	seen := map[string]bool{}
	for i, ne := range explorers {
		if ne.Name == "" || seen[ne.Name] || ne.Explorer == nil {
			return nil, fmt.Errorf("%w: explorer %d: name %q must be non-empty and unique, with an explorer", hparam.ErrInvalid, i, ne.Name)
		}
		seen[ne.Name] = true
		d, err := ne.Explorer.Describe(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: describe: %w", ErrExplorer, ne.Name, err)
		}
		cfg := ne.Config
		if len(cfg) == 0 {
			cfg = []byte("{}")
		}
		err = ne.Explorer.Init(ctx, hparam.Setup{
			Name: ne.Name, Config: cfg, Ranks: shape.Ranks, TotalSteps: shape.TotalSteps,
			WindowSteps: shape.WindowSteps, Seed: explorerSeed(shape.Seed, i), Probe: shape.Probe,
		})
		if err != nil {
			return nil, fmt.Errorf("%w: %s: init: %w", ErrExplorer, ne.Name, err)
		}
		if err := admitSetup(ctx, ne, d, shape); err != nil {
			return nil, err
		}
		c.params = append(c.params, &param{name: ne.Name, ex: ne.Explorer, desc: d, spread: d.Spread, bounds: d.Bounds})
	}
	c.noticed = map[string]bool{}
	return c, nil
}

// Notices returns what the run should log once and has not yet: an
// explorer that asked for the probe signal where the workload cannot
// evaluate it (it gets the training losses), or a search pass too short
// to move the values far. Plan and the commit add them.
func (c *Controller) Notices() []string {
	out := c.notices
	c.notices = nil
	return out
}

// explorerSeed gives explorer i its own seed (splitmix64 of seed and i), so
// explorers that draw random numbers do not share a stream.
func explorerSeed(seed uint64, i int) uint64 {
	z := seed + uint64(i+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Windows is the number of windows in the run, ceil(S/T).
func (c *Controller) Windows() int { return c.windows }

// Next is the window the next Plan is for, in the pass Pass says.
func (c *Controller) Next() int { return c.next }

// Pass is the pass the next Plan is for: PassMain once the explorers
// committed.
func (c *Controller) Pass() int { return c.pass }

// SearchEnd is the step the search pass ended at, 0 before the commit.
func (c *Controller) SearchEnd() int { return c.searchEnd }

// Commitments lists each hyperparameter's committed value in plan order;
// nil before the commit.
func (c *Controller) Commitments() []ParamCommit {
	if c.pass != plan.PassMain {
		return nil
	}
	out := make([]ParamCommit, len(c.params))
	for i, p := range c.params {
		out[i] = ParamCommit{Name: p.name, Commitment: p.commit, Frozen: p.frozen}
	}
	return out
}

// Names lists the hyperparameters in plan order.
func (c *Controller) Names() []string {
	out := make([]string, len(c.params))
	for i, p := range c.params {
		out[i] = p.name
	}
	return out
}

// Descriptors lists what each explorer said about itself, in plan order.
func (c *Controller) Descriptors() []hparam.Descriptor {
	out := make([]hparam.Descriptor, len(c.params))
	for i, p := range c.params {
		out[i] = p.desc
	}
	return out
}

// Frozen reports whether hyperparameter name's explorer has been frozen.
func (c *Controller) Frozen(name string) bool {
	for _, p := range c.params {
		if p.name == name {
			return p.frozen
		}
	}
	return false
}

func (c *Controller) freeze(p *param, op string, err error) Event {
	p.frozen = true
	return Event{Kind: EventFrozen, Window: c.next, Param: p.name, Op: op, Err: err, Base: p.base, Spread: p.spread}
}

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
	if c.next >= c.windows {
		return nil, nil, fmt.Errorf("%w: all %d windows have been planned", hparam.ErrOrder, c.windows)
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
	c.genBefore = nil
	if c.pass == plan.PassSearch {
		c.genBefore = c.ahead.gen
	}
	c.plan, c.ahead = pl, nil
	if c.pass == plan.PassMain && c.next+1 < c.windows {
		c.prefetch(ctx, c.request(c.next+1))
	}
	return pl, events, nil
}

// keep puts back a prefetched plan that a call had to wait for.
func (c *Controller) keep(a *answers) {
	ch := make(chan *answers, 1)
	ch <- a
	c.fetching = ch
}

// request is the explorers' request for window k.
func (c *Controller) request(k int) hparam.WindowRequest {
	t, s := c.shape.WindowSteps, c.shape.TotalSteps
	return hparam.WindowRequest{Window: k, Start: k * t, Steps: min(t, s-k*t)}
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
	a.errs = c.each(func(i int, p *param) error {
		wp, err := p.ex.Plan(ctx, req)
		if err == nil {
			err = checkWindowPlan(wp, req.Steps)
		}
		a.wps[i] = wp
		return err
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
// hyperparameter's feedback in plan order, and moves on to the next window:
// window 0 of the main pass when every explorer has settled (Commit). The
// main pass asks the explorers nothing: they learn no more.
func (c *Controller) Observe(ctx context.Context, losses, probes []float64) ([]ParamFeedback, []Event, error) {
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
		events = c.observeSearch(ctx, pl, out, losses, probes)
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
func (c *Controller) observeSearch(ctx context.Context, pl *plan.Plan, out []ParamFeedback, losses, probes []float64) []Event {
	n := len(losses)
	errs := c.each(func(i int, p *param) error {
		fb, err := p.ex.Observe(ctx, hparam.Observation{Window: pl.Window, Values: p.lastValues(&pl.Params[i]), Losses: losses, Probe: probes})
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
	done := false
	for _, p := range c.params {
		if p.frozen {
			continue
		}
		switch p.search {
		case hparam.Searching:
			return false
		case hparam.SearchDone:
			done = true
		}
	}
	return done && c.next < c.windows
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

// each calls fn for every live (not frozen) explorer, concurrently: the
// explorers are independent (plugins are separate processes), so a window
// costs the slowest explorer rather than their sum. No explorer is ever
// called concurrently with itself. Alongside them runs meanwhile, unless
// nil, which must touch no explorer. It returns fn's errors by index.
func (c *Controller) each(fn func(i int, p *param) error, meanwhile func()) []error {
	errs := make([]error, len(c.params))
	var wg sync.WaitGroup
	if meanwhile != nil {
		wg.Go(meanwhile) // first: the goroutine started last runs first
	}
	for i, p := range c.params {
		if p.frozen {
			continue
		}
		wg.Go(func() { errs[i] = fn(i, p) })
	}
	wg.Wait()
	return errs
}

// lastValues is the value each rank used at the window's last step, with
// the arithmetic of ParamPlan.Value: each rank's slot coefficient applied
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

// Controller state encoding (version controllerStateVersion):
//
//	version byte
//	uvarint next window
//	byte pass, uvarint the step the search ended at (version 3)
//	uvarint length, permuter state (before the pending plan's draws, if any)
//	uvarint number of hyperparameters, then for each:
//	  uvarint length, name
//	  byte flags (bit 0 frozen, bit 1 has a base, bits 2-3 the search state)
//	  float64 base, byte spread kind, float64 alpha, lower, upper
//	  float64 committed offset and value (version 3)
//	  uvarint length, the explorer's SaveState bytes (empty when frozen)
//
// Version 2 is revision 2 of the meta-update: the explorers' states it
// holds changed meaning, so a version-1 checkpoint cannot resume. Version
// 3 (revision 3) adds the pass and the commitments; a version-2 state
// resumes in the search pass.
const controllerStateVersion = 3

// SaveState serialises the controller for a checkpoint: the window to plan
// next, the generator, the frozen set and every live explorer's SaveState.
// An explorer whose SaveState fails is frozen (Event).
func (c *Controller) SaveState(ctx context.Context) ([]byte, []Event, error) {
	if a := c.prefetched(); a != nil {
		defer c.keep(a)
	}
	gen := c.genBefore
	if gen == nil && c.ahead != nil {
		gen = c.ahead.gen
	}
	if gen == nil {
		var err error
		if gen, err = c.perm.MarshalBinary(); err != nil {
			return nil, nil, err
		}
	}
	b := []byte{controllerStateVersion}
	b = binary.AppendUvarint(b, uint64(c.next))
	b = append(b, byte(c.pass))
	b = binary.AppendUvarint(b, uint64(c.searchEnd))
	b = plan.AppendBytes(b, gen)
	b = binary.AppendUvarint(b, uint64(len(c.params)))
	var events []Event
	for _, p := range c.params {
		var st []byte
		if !p.frozen {
			var err error
			if st, err = p.ex.SaveState(ctx); err != nil {
				events = append(events, c.freeze(p, "save_state", err))
				st = nil
			}
		}
		b = plan.AppendBytes(b, []byte(p.name))
		var flags byte
		if p.frozen {
			flags |= 1
		}
		if p.hasBase {
			flags |= 2
		}
		b = append(b, flags|byte(p.search)<<2)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.base))
		b = append(b, plan.SpreadCode(p.spread.Kind))
		for _, f := range []float64{p.spread.Alpha, p.bounds.Lower, p.bounds.Upper, p.commit.Offset, p.commit.Value} {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
		}
		b = plan.AppendBytes(b, st)
	}
	return b, events, nil
}

// LoadState restores a SaveState taken with the same explorers (same names
// in the same order), after NewController. Live explorers get their
// LoadState; one that fails is frozen (Event). The next Plan is the one the
// saved controller would have drawn.
func (c *Controller) LoadState(ctx context.Context, data []byte) ([]Event, error) {
	c.prefetched() // made for the state being replaced
	d := plan.NewDecoder(data)
	version := d.Byte("version")
	if d.Err() == nil && version != controllerStateVersion && version != 2 {
		return nil, fmt.Errorf("%w: controller state: version %d, this hdet reads versions 2 and %d (written before revision 2 of the meta-update; start the run afresh)", hparam.ErrDecode, version, controllerStateVersion)
	}
	next := d.Uvarint("next window", uint64(c.windows))
	pass, searchEnd := plan.PassSearch, 0
	if version >= 3 {
		pass = int(d.Byte("pass"))
		searchEnd = d.Uvarint("search end", uint64(c.shape.TotalSteps))
		if d.Err() == nil && pass != plan.PassSearch && pass != plan.PassMain {
			d.Fail(fmt.Sprintf("unknown pass %d", pass))
		}
	}
	gen := d.Bytes("generator state")
	np := d.Uvarint("hyperparameter count", uint64(d.Len()))
	if d.Err() == nil && np != len(c.params) {
		d.Fail(fmt.Sprintf("%d hyperparameters saved, %d configured", np, len(c.params)))
	}
	type saved struct {
		p     param
		state []byte
	}
	ps := make([]saved, 0, min(np, len(c.params)))
	for i := 0; d.Err() == nil && i < np; i++ {
		var s saved
		s.p.name = string(d.Bytes("name"))
		if d.Err() == nil && s.p.name != c.params[i].name {
			d.Fail(fmt.Sprintf("hyperparameter %d is %q, configured %q", i, s.p.name, c.params[i].name))
		}
		flags := d.Byte("flags")
		s.p.frozen, s.p.hasBase, s.p.search = flags&1 != 0, flags&2 != 0, hparam.SearchState(flags>>2&3)
		s.p.base = d.Float("base")
		code := d.Byte("spread kind")
		kind, ok := plan.SpreadKind(code)
		if d.Err() == nil && !ok {
			d.Fail(fmt.Sprintf("unknown spread kind code %d", code))
			break
		}
		s.p.spread = hparam.Spread{Kind: kind, Alpha: d.Float("alpha")}
		s.p.bounds = hparam.Bounds{Lower: d.Float("lower bound"), Upper: d.Float("upper bound")}
		if version >= 3 {
			s.p.commit = hparam.Commitment{Offset: d.Float("committed offset"), Value: d.Float("committed value")}
		}
		s.state = d.Bytes("explorer state")
		ps = append(ps, s)
	}
	if d.Err() == nil && d.Len() != 0 {
		d.Fail(fmt.Sprintf("%d trailing bytes", d.Len()))
	}
	if d.Err() != nil {
		return nil, d.Err()
	}
	perm := &Permuter{}
	if err := perm.UnmarshalBinary(gen); err != nil {
		return nil, err
	}
	c.perm, c.next, c.plan, c.genBefore, c.ahead = perm, next, nil, nil, nil
	c.pass, c.searchEnd = pass, searchEnd
	var events []Event
	for i, s := range ps {
		p := c.params[i]
		p.frozen, p.hasBase, p.base, p.spread, p.bounds = s.p.frozen, s.p.hasBase, s.p.base, s.p.spread, s.p.bounds
		p.search, p.commit = s.p.search, s.p.commit
		if !p.frozen {
			if err := p.ex.LoadState(ctx, s.state); err != nil {
				events = append(events, c.freeze(p, "load_state", err))
			}
		}
	}
	return events, nil
}

// healthy reports whether v is finite.
func healthy(v float64) bool { return math.Abs(v) <= math.MaxFloat64 }

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
