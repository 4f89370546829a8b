package builtin

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/hparam/schedule"
)

// Built-in explorer kinds, the argument of NewExplorer.
const (
	LR          = "lr"
	Dropout     = "dropout"
	WeightDecay = "weight-decay"
)

// Version is the version the built-in explorers describe themselves with.
const Version = "1.0.0"

// builtin is the in-process explorer behind NewExplorer: the
// window bookkeeping, with the meta-update behind form (form.go),
// the config in config.go and the saved state in state.go.
type builtin struct {
	kind builtinKind

	mu        sync.Mutex
	run       *builtinRun // nil before Init
	spread    hparam.Spread
	narrow    Narrowing
	form      metaForm
	next      int  // windows observed so far
	committed bool // Commit was called: the main pass plans schedule (+) u

	// Scratch reused every window: the probe signal with unhealthy ranks masked.
	probe []float64
}

// builtinRun is what a built-in explorer and its meta-update share, fixed
// at Init: the run's shape and the parsed config.
type builtinRun struct {
	setup     hparam.Setup
	sched     schedule.Schedule
	scale     hparam.Scale
	bounds    hparam.Bounds
	autoOn    bool
	autoStart int // first step of the auto phase
	cfg       AutoConfig
	windows   int // ceil(S/T)
	// guardSpan is the regular spread's half-width in scale space at the
	// end of the bracket window: the warm-up guard's yardstick after it,
	// whose own replicas spread far wider.
	guardSpan float64
}

// NewExplorer returns the built-in explorer of kind "lr", "dropout"
// or "weight-decay" (see Config for what it does and its config).
func NewExplorer(kind string) (hparam.Explorer, error) {
	k, ok := builtinKinds[kind]
	if !ok {
		return nil, fmt.Errorf("%w: built-in explorer %q, want %s, %s or %s", hparam.ErrInvalid, kind, LR, Dropout, WeightDecay)
	}
	return &builtin{kind: k}, nil
}

func (b *builtin) Describe(context.Context) (hparam.Descriptor, error) { return b.kind.desc, nil }

func (b *builtin) Init(_ context.Context, s hparam.Setup) error {
	if err := s.Validate(); err != nil {
		return err
	}
	p, err := b.parse(s)
	if err != nil {
		return err
	}
	r := &builtinRun{setup: s, sched: p.sched, scale: b.kind.desc.Scale, bounds: p.bounds,
		autoOn: p.autoOn, autoStart: p.autoStart, cfg: p.auto,
		windows: (s.TotalSteps + s.WindowSteps - 1) / s.WindowSteps}
	if r.bracketed(0) {
		sp := p.spread
		sp.Alpha = p.narrow.Alpha(sp.Alpha, float64(s.WindowSteps)/float64(s.TotalSteps))
		r.guardSpan = logHalfWidth(sp, s.Ranks)
	}
	form, err := newMetaForm(r)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.run, b.spread, b.narrow, b.form = r, p.spread, p.narrow, form
	b.next, b.committed = 0, false
	return nil
}

// firstUpdate is the step of the first meta-update: the first window
// boundary k*T >= start with k >= 1.
func firstUpdate(start, t int) int {
	k := max((start+t-1)/t, 1)
	return k * t
}

// autoWindow reports whether window k runs on the auto base: a meta-update
// happened at its start boundary.
func (r *builtinRun) autoWindow(k int) bool {
	return r.autoOn && k >= 1 && k*r.setup.WindowSteps >= r.autoStart
}

// bracketed reports whether window k is the bracket window (auto.bracket):
// the first of the search, when the update at its end is one.
func (r *builtinRun) bracketed(k int) bool {
	return k == 0 && r.cfg.Bracket > 1 && r.autoWindow(1) && r.windows > 1 && r.beforeUntil(r.setup.WindowSteps)
}

// bracket is the bracket window's spread: base/Bracket..base*Bracket.
func (r *builtinRun) bracket() hparam.Spread {
	return hparam.Spread{Kind: hparam.Geometric, Alpha: r.cfg.Bracket - 1}
}

// logHalfWidth is the largest |log c| over the n slots' multipliers c of a
// multiplicative or geometric spread.
func logHalfWidth(sp hparam.Spread, n int) float64 {
	c := make([]float64, n)
	sp.Coefs(c)
	span := 0.0
	for _, m := range c {
		span = wider(span, math.Log(m))
	}
	return span
}

// beforeUntil reports whether step is before auto.until.
func (r *builtinRun) beforeUntil(step int) bool {
	return float64(step) < r.cfg.Until*float64(r.setup.TotalSteps)
}

// lastStep is the index of window k's last step within the window.
func (r *builtinRun) lastStep(k int) int {
	return min(r.setup.WindowSteps, r.setup.TotalSteps-k*r.setup.WindowSteps) - 1
}

func (b *builtin) initialised() error {
	if b.run == nil {
		return fmt.Errorf("%w: the explorer has not been initialised", hparam.ErrOrder)
	}
	return nil
}

// spreadAt is the spread of a window starting at step.
func (b *builtin) spreadAt(step int) hparam.Spread {
	sp := b.spread
	sp.Alpha = b.narrow.Alpha(sp.Alpha, float64(step)/float64(b.run.setup.TotalSteps))
	return sp
}

func (b *builtin) Plan(_ context.Context, r hparam.WindowRequest) (hparam.WindowPlan, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initialised(); err != nil {
		return hparam.WindowPlan{}, err
	}
	t, total, windows := b.run.setup.WindowSteps, b.run.setup.TotalSteps, b.run.windows
	if r.Window < 0 || r.Window >= windows || r.Start != r.Window*t || r.Steps != min(t, total-r.Start) {
		return hparam.WindowPlan{}, fmt.Errorf("%w: window %d start %d steps %d; the run has %d windows of %d steps over %d steps",
			hparam.ErrInvalid, r.Window, r.Start, r.Steps, windows, t, total)
	}
	// Past the first update the base depends on the state, so the window
	// must be the one after the last observed (a committed base does not).
	if b.run.autoWindow(r.Window) && b.next != r.Window && !b.committed {
		return hparam.WindowPlan{}, fmt.Errorf("%w: window %d is in the auto phase and needs window %d observed first; %d windows observed",
			hparam.ErrOrder, r.Window, r.Window-1, b.next)
	}
	base := make([]float64, r.Steps)
	for i := range base {
		v, err := b.form.base(r.Window, i, b.next)
		if err != nil {
			return hparam.WindowPlan{}, err
		}
		base[i] = v
	}
	if b.committed {
		return hparam.WindowPlan{Base: base, Spread: hparam.Spread{Kind: b.spread.Kind}, Bounds: b.run.bounds}, nil
	}
	probe := b.run.cfg.Signal == SignalProbe && b.form.updates(r.Window+1) && r.Window+1 < windows
	sp := b.spreadAt(r.Start)
	if b.run.bracketed(r.Window) {
		sp = b.run.bracket()
	}
	// The search state at the last boundary the controller can commit at
	// (window windows-1's start): fixed by auto.commit and auto.until.
	end := b.form.search(windows - 1)
	return hparam.WindowPlan{Base: base, Spread: sp, Bounds: b.run.bounds, Probe: probe, SearchAtEnd: end}, nil
}

// Commit ends the search: u settles (the average of its updates, if they
// have not ended yet), and Plan answers the main pass's windows with the
// schedule (+) u and no spread. A second call answers the same.
func (b *builtin) Commit(context.Context) (hparam.Commitment, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initialised(); err != nil {
		return hparam.Commitment{}, err
	}
	if !b.committed {
		if err := b.form.settle(b.next); err != nil {
			return hparam.Commitment{}, err
		}
		b.committed, b.next = true, 0
	}
	return b.form.commitment()
}

// peakOf is the schedule's value where its warm-up ends (OneCycle's
// max_lr, one step before schedule.WarmupEnd; a warm-up schedule's peak, at it),
// or its first value.
func peakOf(s schedule.Schedule) (float64, error) {
	end := min(schedule.WarmupEnd(s), s.Steps()-1)
	v, err := s.At(end)
	if err != nil || end == 0 {
		return v, err
	}
	before, err := s.At(end - 1)
	return max(v, before), err
}

func (b *builtin) Observe(_ context.Context, o hparam.Observation) (hparam.Feedback, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initialised(); err != nil {
		return hparam.Feedback{}, err
	}
	if b.committed { // the main pass learns nothing
		return hparam.Feedback{Offset: b.form.offset(), Search: hparam.SearchDone}, nil
	}
	if err := b.checkObservation(o); err != nil {
		return hparam.Feedback{}, err
	}
	k := o.Window + 1 // the boundary this observation ends at
	fb, hasBase, err := b.form.observe(o, b.signal(o))
	if err != nil {
		return hparam.Feedback{}, err
	}
	b.next = k
	if !hasBase {
		// The next window's first base (or the last step's, after the last window).
		kk, i := k, 0
		if k == b.run.windows {
			kk, i = k-1, b.run.lastStep(k-1)
		}
		if fb.Base, err = b.form.base(kk, i, b.next); err != nil {
			return hparam.Feedback{}, err
		}
	}
	fb.Search = b.form.search(k)
	return fb, nil
}

// checkObservation refuses an observation of another window than the
// next, or one whose slices are not one per rank.
func (b *builtin) checkObservation(o hparam.Observation) error {
	if o.Window != b.next || o.Window >= b.run.windows {
		return fmt.Errorf("%w: observation of window %d, expected window %d of %d", hparam.ErrOrder, o.Window, b.next, b.run.windows)
	}
	n := b.run.setup.Ranks
	if len(o.Values) != n || len(o.Losses) != n || (o.Probe != nil && len(o.Probe) != n) {
		return fmt.Errorf("%w: %d values, %d losses and %d probe losses for %d ranks", hparam.ErrInvalid, len(o.Values), len(o.Losses), len(o.Probe), n)
	}
	return nil
}

// signal is what the ranks are compared by: the probe losses where the
// explorer asked for them and got them (NaN for a rank whose training loss
// says it is unhealthy), else the training losses.
func (b *builtin) signal(o hparam.Observation) []float64 {
	if b.run.cfg.Signal != SignalProbe || o.Probe == nil {
		return o.Losses
	}
	out := grow(b.probe, len(o.Probe))
	b.probe = out
	for r, p := range o.Probe {
		out[r] = p
		if !healthy(o.Losses[r]) {
			out[r] = math.NaN()
		}
	}
	return out
}
