// Package controller is rank 0's meta-controller (docs/design.md §1 and
// §3): it asks every explorer (package hparam's Explorer, in process or a
// plugin) for its window plan, draws the slot permutations, feeds the
// window's losses back, commits the explorers when the search pass ends,
// freezes one that fails, and saves and restores all of it for
// checkpoints. The plan it hands out is package plan's.
//
// One file per job: controller.go the Controller and its setup,
// event.go what it reports (frozen and clamped explorers, commitments,
// feedback), planning.go a window's plan (ask, prefetch, assemble, the
// permutations' draws), observe.go a window's feedback and the commit,
// state.go its checkpoint encoding, admit.go what a hyperparameter
// admits, perm.go the permutations' generator.
package controller

import (
	"context"
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
	Ranks       int // N
	TotalSteps  int // S
	WindowSteps int // T
	// MainWindowSteps is the main pass's window, a multiple of T (0: T).
	// Where the main pass has nothing to average (gradients mode: every
	// rank holds the same parameters) its windows need only come as often
	// as checkpoints and evaluations do; each of its plans joins the
	// explorers' plans of the T-step windows it spans (docs/performance.md).
	MainWindowSteps int
	Seed            uint64 // seeds the permutations and, derived, each explorer
	Probe           bool   // the workload can evaluate the probe signal (hparam.Setup.Probe)
}

// NamedExplorer is one explored hyperparameter: the instance name the
// workload receives ("lr", "lr/hidden"), its explorer and its config block
// as JSON (nil means "{}").
type NamedExplorer struct {
	Name     string
	Explorer hparam.Explorer
	Config   []byte
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
	if m, t := shape.MainWindowSteps, shape.WindowSteps; m < 0 || m > hparam.MaxWindowSteps || m%t != 0 {
		return nil, fmt.Errorf("%w: the main pass's window of %d steps is not a multiple of the %d-step window in [0, %d]", hparam.ErrInvalid, m, t, hparam.MaxWindowSteps)
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

// windowSteps is the window of the pass in force: T, or the main pass's.
func (c *Controller) windowSteps() int {
	if c.pass == plan.PassMain && c.shape.MainWindowSteps > 0 {
		return c.shape.MainWindowSteps
	}
	return c.shape.WindowSteps
}

// passWindows is the number of windows of the pass in force.
func (c *Controller) passWindows() int {
	t := c.windowSteps()
	return (c.shape.TotalSteps + t - 1) / t
}

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
