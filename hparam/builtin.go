package hparam

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
)

// Built-in explorer kinds, the argument of NewBuiltinExplorer.
const (
	BuiltinLR          = "lr"
	BuiltinDropout     = "dropout"
	BuiltinWeightDecay = "weight-decay"
)

// BuiltinVersion is the version the built-in explorers describe themselves with.
const BuiltinVersion = "1.0.0"

type builtinKind struct {
	desc         Descriptor
	scheduleKind string
}

var builtinKinds = map[string]builtinKind{
	BuiltinLR: {
		desc: Descriptor{Name: BuiltinLR, Version: BuiltinVersion, Hyperparameter: "lr", Scale: Log,
			Bounds: Bounds{1e-8, 10}, Spread: Spread{Multiplicative, 0.5},
			ExampleConfig: []byte(`{"schedule": {"max_lr": 0.003}}`)},
		scheduleKind: KindOneCycle,
	},
	BuiltinDropout: {
		desc: Descriptor{Name: BuiltinDropout, Version: BuiltinVersion, Hyperparameter: "dropout", Scale: Linear,
			Bounds: Bounds{0, 0.9}, Spread: Spread{Additive, 1.0 / 9},
			ExampleConfig: []byte(`{"schedule": 0.1}`)},
		scheduleKind: KindConstant,
	},
	BuiltinWeightDecay: {
		desc: Descriptor{Name: BuiltinWeightDecay, Version: BuiltinVersion, Hyperparameter: "weight_decay", Scale: Log,
			Bounds: Bounds{0, 1}, Spread: Spread{Geometric, 1.0 / 9},
			ExampleConfig: []byte(`{"schedule": 0.01}`)},
		scheduleKind: KindConstant,
	},
}

// BuiltinConfig is a built-in explorer's config block (Setup.Config), in
// JSON; the engine converts the YAML block of the run config to it. Every
// block and key is optional except the schedule's required value; unknown
// keys are errors naming the key.
//
//	{
//	  "schedule": {"kind": "onecycle", "max_lr": 0.1, ...},  // a ScheduleSpec, or a bare number for a constant
//	  "spread": {
//	    "kind": "multiplicative", // multiplicative | additive | geometric
//	    "alpha": 0.5,             // >= 0 (< 1 multiplicative)
//	    "narrow_from": until,     // fraction of the run where alpha starts shrinking linearly (offset
//	                              // form: auto.until; paper form or auto off: 1, no narrowing)...
//	    "narrow_to": until+0.1,   // ...to reach alpha_end here (at most 1); 0 <= narrow_from <= narrow_to <= 1
//	    "alpha_end": 0            // alpha from narrow_to on (paper form or auto off: alpha)
//	  },
//	  "bounds": {"lower": 1e-8, "upper": 10},  // values are clamped to [lower, upper]
//	  "auto": {
//	    "enabled": true,   // false: the schedule (with its spread) for the whole run
//	    "form": "offset",  // offset (revision 2: base = schedule (+) learned offset u) | paper (revision 1)
//	    "start": 0,        // first step whose window boundary may update; default offset: 0,
//	                       // paper: the schedule's warm-up end (OneCycle: int(pct_start*total_steps))
//	    "until": ...,      // offset: fraction of the run after which u stops moving, (0, 1]; default: the first
//	                       // window boundary after the schedule's warm-up (1 for schedules without one)
//	    "guard": 0.01,     // offset: warm-up guard threshold, a fraction of the spread's half-width; 0: off
//	    "signal": "probe", // probe (train where the workload cannot probe) | train; paper default: train
//	    "estimator": "quadratic", // quadratic | softmax; paper: softmax only
//	    "clip":    1.5,    // quadratic: |x*| <= clip * the spread's half-width in scale space
//	    "sigma":   0.1,    // softmax temperature in loss units, > 0
//	    "sigma_mode": "absolute", // absolute | relative: sigma times the std of the window's losses
//	    "beta":    0,      // velocity momentum, [0, 1); paper default 0.9
//	    "lambda":  1       // step on the velocity, >= 0; paper default 0.5
//	  }
//	}
//
// Defaults by kind:
//
//	kind          schedule                   spread               bounds       scale
//	lr            onecycle (max_lr required) multiplicative 0.5   [1e-8, 10]   log
//	dropout       constant (value required)  additive 1/9         [0, 0.9]     linear
//	weight-decay  constant (value required)  geometric 1/9        [0, 1]       log
//
// The schedule's total_steps defaults to the run's total steps. In the
// offset form the base at step t is clamp(s(t) (+) u): s(t)*exp(u) on a log
// scale, s(t)+u on a linear one, and the schedule must cover the run. In
// the paper form the first meta-update happens at the first window
// boundary k*T >= max(auto.start, T); windows before it follow the
// schedule, windows after it hold the auto base. "auto.decay" (revision 1)
// is refused: the schedule's own anneal replaced it.
type BuiltinConfig struct {
	Schedule json.RawMessage `json:"schedule"` // a ScheduleSpec object or a number
	Spread   json.RawMessage `json:"spread"`   // a SpreadSpec
	Bounds   json.RawMessage `json:"bounds"`   // a BoundsSpec
	Auto     json.RawMessage `json:"auto"`     // an AutoSpec
}

// SpreadSpec is the "spread" block; nil fields keep the explorer's default.
type SpreadSpec struct {
	Kind       *SpreadKind `json:"kind"`
	Alpha      *float64    `json:"alpha"`
	NarrowFrom *float64    `json:"narrow_from"`
	NarrowTo   *float64    `json:"narrow_to"`
	AlphaEnd   *float64    `json:"alpha_end"`
}

// BoundsSpec is the "bounds" block; nil fields keep the explorer's default.
type BoundsSpec struct {
	Lower *float64 `json:"lower"`
	Upper *float64 `json:"upper"`
}

// AutoSpec is the "auto" block; nil fields keep the defaults.
type AutoSpec struct {
	Enabled   *bool       `json:"enabled"`
	Form      *Form       `json:"form"`
	Start     *int        `json:"start"`
	Until     *float64    `json:"until"`
	Guard     *float64    `json:"guard"`
	Signal    *Signal     `json:"signal"`
	Estimator *Estimator  `json:"estimator"`
	Clip      *float64    `json:"clip"`
	Sigma     *float64    `json:"sigma"`
	SigmaMode *SigmaMode  `json:"sigma_mode"`
	Beta      *float64    `json:"beta"`
	Lambda    *float64    `json:"lambda"`
	Commit    *CommitMode `json:"commit"`
	// Decay is revision 1's; a config that sets it is refused with what replaced it.
	Decay json.RawMessage `json:"decay"`
}

// Narrowing shrinks a spread's alpha linearly from From to To (fractions
// of the run) down to AlphaEnd (docs/design.md §1, "Narrowing spread").
type Narrowing struct {
	From, To, AlphaEnd float64
}

// offsetNarrowing is the offset form's default: explore while u learns,
// then narrow to 0 over a tenth of the run (measured: an abrupt stop was
// not tried, a narrowing from 30% to the end of the run cost more).
func offsetNarrowing(until float64) Narrowing {
	return Narrowing{From: until, To: min(1, until+0.1), AlphaEnd: 0}
}

// searchWithoutWarmup is auto.until's default for a schedule without a
// warm-up in a run that commits.
const searchWithoutWarmup = 0.25

// defaultUntil is the offset form's default auto.until: through the
// schedule's warm-up and the first window boundary after it (docs/design.md
// §6.1). A schedule without a warm-up (a constant) searches a quarter of
// the run when it commits, so that it ends with a OneCycle learning rate's
// usual warm-up rather than keep the run from ever committing; continuing,
// it learns the whole run.
func defaultUntil(sched Schedule, s Setup, commit CommitMode) float64 {
	end := warmupEnd(sched)
	switch {
	case end <= 0 && commit == CommitRestart:
		return searchWithoutWarmup
	case end <= 0:
		return 1
	}
	return min(1, float64(firstUpdate(end, s.WindowSteps)+1)/float64(s.TotalSteps))
}

// Alpha is the spread width at fraction f of the run.
func (n Narrowing) Alpha(alpha, f float64) float64 {
	switch {
	case f <= n.From:
		return alpha
	case f >= n.To:
		return n.AlphaEnd
	}
	return alpha + (n.AlphaEnd-alpha)*(f-n.From)/(n.To-n.From)
}

// decodeBlock decodes an optional block of the config into v.
func decodeBlock(raw json.RawMessage, v any, name string) error {
	if !present(raw) {
		return nil
	}
	return decodeStrict(raw, v, name)
}

// builtin is the in-process explorer behind NewBuiltinExplorer.
type builtin struct {
	kind builtinKind

	mu        sync.Mutex
	setup     Setup
	sched     Schedule
	spread    Spread
	narrow    Narrowing
	bounds    Bounds
	autoOn    bool
	autoStart int // first step of the auto phase
	cfg       AutoConfig
	paper     *Auto   // form paper
	off       *Offset // form offset
	windows   int     // ceil(S/T)
	next      int     // windows observed so far
	committed bool    // Commit was called: the main pass plans schedule (+) u

	// Scratch reused every window: each rank's offset in scale space, and
	// the probe signal with unhealthy ranks masked.
	x, probe []float64
}

// NewBuiltinExplorer returns the built-in explorer of kind "lr", "dropout"
// or "weight-decay" (see BuiltinConfig for what it does and its config).
func NewBuiltinExplorer(kind string) (Explorer, error) {
	k, ok := builtinKinds[kind]
	if !ok {
		return nil, fmt.Errorf("%w: built-in explorer %q, want %s, %s or %s", ErrInvalid, kind, BuiltinLR, BuiltinDropout, BuiltinWeightDecay)
	}
	return &builtin{kind: k}, nil
}

func (b *builtin) Describe(context.Context) (Descriptor, error) { return b.kind.desc, nil }

// parsedConfig is a BuiltinConfig decoded and checked against the run.
type parsedConfig struct {
	sched     Schedule
	spread    Spread
	narrow    Narrowing
	bounds    Bounds
	autoOn    bool
	autoStart int
	auto      AutoConfig
}

func decodeSchedule(raw json.RawMessage) (ScheduleSpec, error) {
	var spec ScheduleSpec
	switch {
	case !present(raw):
	case isNumber(raw):
		var v float64
		if err := decodeStrict(raw, &v, "schedule"); err != nil {
			return spec, err
		}
		spec.Value = &v
	default:
		if err := decodeStrict(raw, &spec, "schedule"); err != nil {
			return spec, err
		}
	}
	return spec, nil
}

func (b *builtin) parse(s Setup) (parsedConfig, error) {
	var p parsedConfig
	cfgJSON := s.Config
	if len(strings.TrimSpace(string(cfgJSON))) == 0 {
		cfgJSON = []byte("{}")
	}
	var cfg BuiltinConfig
	if err := decodeStrict(cfgJSON, &cfg, ""); err != nil {
		return p, err
	}
	spec, err := decodeSchedule(cfg.Schedule)
	if err != nil {
		return p, err
	}
	if p.sched, err = spec.Build(b.kind.scheduleKind, s.TotalSteps); err != nil {
		return p, prefixField("schedule", err)
	}
	var ss SpreadSpec
	var bs BoundsSpec
	var as AutoSpec
	for _, blk := range []struct {
		raw  json.RawMessage
		v    any
		name string
	}{{cfg.Spread, &ss, "spread"}, {cfg.Bounds, &bs, "bounds"}, {cfg.Auto, &as, "auto"}} {
		if err := decodeBlock(blk.raw, blk.v, blk.name); err != nil {
			return p, err
		}
	}
	d := b.kind.desc
	if err := p.autoConfig(as); err != nil {
		return p, err
	}
	// Narrowing is revision 2's: it spends the end of the run on the answer
	// the offset form found, so without it the spread keeps its width.
	if as.Until == nil && p.auto.Form == FormOffset {
		p.auto.Until = defaultUntil(p.sched, s, p.auto.Commit)
	}
	narrow := Narrowing{From: 1, To: 1, AlphaEnd: -1}
	if p.autoOn && p.auto.Form == FormOffset {
		narrow = offsetNarrowing(p.auto.Until)
	}
	if p.spread, p.narrow, err = spreadConfig(d.Spread, ss, narrow); err != nil {
		return p, err
	}
	p.auto.LogSpace = p.spread.Kind == Geometric
	p.bounds = Bounds{orFloat(bs.Lower, d.Bounds.Lower), orFloat(bs.Upper, d.Bounds.Upper)}
	if err := p.bounds.Validate(); err != nil {
		return p, err
	}
	if err := admitSchedule(s.Name, p.sched, p.bounds); err != nil {
		return p, err
	}
	// The schedule must cover every step it gives a value for: all of them
	// in the offset form or without the auto phase, else those before the
	// first paper-form update.
	need := s.TotalSteps
	if p.autoOn && p.auto.Form == FormPaper {
		need = min(need, firstUpdate(p.autoStart, s.WindowSteps))
	}
	if p.sched.Steps() < need {
		return p, fieldErr("schedule.total_steps", "the schedule covers %d steps but the run takes its values for steps 0..%d", p.sched.Steps(), need-1)
	}
	return p, nil
}

// spreadConfig applies the "spread" block to the explorer's default spread
// and narrowing (an AlphaEnd < 0 there means alpha itself).
func spreadConfig(def Spread, ss SpreadSpec, defNarrow Narrowing) (Spread, Narrowing, error) {
	sp := def
	if ss.Kind != nil {
		sp.Kind = *ss.Kind
	}
	sp.Alpha = orFloat(ss.Alpha, sp.Alpha)
	if err := sp.Validate(); err != nil {
		return sp, Narrowing{}, err
	}
	if defNarrow.AlphaEnd < 0 {
		defNarrow.AlphaEnd = sp.Alpha
	}
	// A narrow_from without narrow_to keeps the default's length.
	from := orFloat(ss.NarrowFrom, defNarrow.From)
	n := Narrowing{From: from, To: orFloat(ss.NarrowTo, min(1, from+defNarrow.To-defNarrow.From)),
		AlphaEnd: orFloat(ss.AlphaEnd, defNarrow.AlphaEnd)}
	if !(n.From >= 0 && n.From <= n.To && n.To <= 1) {
		return sp, n, fieldErr("spread.narrow_from", "narrow_from %v and narrow_to %v must satisfy 0 <= narrow_from <= narrow_to <= 1", n.From, n.To)
	}
	if err := (Spread{Kind: sp.Kind, Alpha: n.AlphaEnd}).Validate(); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			err = fieldErr("spread.alpha_end", "%s", fe.Msg)
		}
		return sp, n, err
	}
	return sp, n, nil
}

// autoConfig applies the "auto" block: the form's defaults, then the keys set.
func (p *parsedConfig) autoConfig(as AutoSpec) error {
	if present(as.Decay) {
		return fieldErr("auto.decay", "was removed in revision 2 of the meta-update: the base is now the schedule combined with a learned offset, "+
			"so the schedule's own anneal replaces the decay; delete the key (auto.form: paper gives the paper's update, without decay)")
	}
	form := FormOffset
	if as.Form != nil {
		form = *as.Form
	}
	c := DefaultAutoConfig(form)
	c.Form = form
	p.autoOn = as.Enabled == nil || *as.Enabled
	p.autoStart = 0
	if form == FormPaper {
		p.autoStart = warmupEnd(p.sched)
	}
	p.autoStart = orInt(as.Start, p.autoStart)
	if p.autoStart < 0 {
		return fieldErr("auto.start", "must be >= 0, got %d", p.autoStart)
	}
	c.Sigma, c.Beta, c.Lambda = orFloat(as.Sigma, c.Sigma), orFloat(as.Beta, c.Beta), orFloat(as.Lambda, c.Lambda)
	c.Clip, c.Until, c.Guard = orFloat(as.Clip, c.Clip), orFloat(as.Until, c.Until), orFloat(as.Guard, c.Guard)
	if as.SigmaMode != nil {
		c.SigmaMode = *as.SigmaMode
	}
	if as.Signal != nil {
		c.Signal = *as.Signal
	}
	if as.Estimator != nil {
		c.Estimator = *as.Estimator
	}
	switch {
	case as.Commit != nil:
		c.Commit = *as.Commit
	case !p.autoOn: // nothing to search: no restart unless asked for
		c.Commit = CommitContinue
	}
	p.auto = c
	return c.Validate()
}

func (b *builtin) Init(_ context.Context, s Setup) error {
	if err := s.Validate(); err != nil {
		return err
	}
	p, err := b.parse(s)
	if err != nil {
		return err
	}
	var paper *Auto
	var off *Offset
	if p.auto.Form == FormPaper {
		paper, err = NewAuto(p.auto, p.bounds)
	} else {
		off, err = NewOffset(p.auto)
	}
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.setup, b.sched, b.spread, b.narrow, b.bounds = s, p.sched, p.spread, p.narrow, p.bounds
	b.autoOn, b.autoStart, b.cfg, b.paper, b.off = p.autoOn, p.autoStart, p.auto, paper, off
	b.windows = (s.TotalSteps + s.WindowSteps - 1) / s.WindowSteps
	b.next, b.committed = 0, false
	if off != nil {
		off.AverageOver(b.totalUpdates())
	}
	return nil
}

// totalUpdates is the number of boundaries at which the run's meta-update
// learns.
func (b *builtin) totalUpdates() int {
	n := 0
	for k := 1; k < b.windows; k++ {
		if b.updates(k) {
			n++
		}
	}
	return n
}

// firstUpdate is the step of the first meta-update: the first window
// boundary k*T >= start with k >= 1.
func firstUpdate(start, t int) int {
	k := max((start+t-1)/t, 1)
	return k * t
}

// autoWindow reports whether window k runs on the auto base: a meta-update
// happened at its start boundary.
func (b *builtin) autoWindow(k int) bool {
	return b.autoOn && k >= 1 && k*b.setup.WindowSteps >= b.autoStart
}

// updates reports whether the boundary before window k updates: in the
// offset form only where a window follows and before auto.until.
func (b *builtin) updates(k int) bool {
	if !b.autoWindow(k) {
		return false
	}
	if b.paper != nil {
		return true
	}
	return k < b.windows && float64(k*b.setup.WindowSteps) < b.cfg.Until*float64(b.setup.TotalSteps)
}

func (b *builtin) initialised() error {
	if b.sched == nil {
		return fmt.Errorf("%w: the explorer has not been initialised", ErrOrder)
	}
	return nil
}

// spreadAt is the spread of a window starting at step.
func (b *builtin) spreadAt(step int) Spread {
	sp := b.spread
	sp.Alpha = b.narrow.Alpha(sp.Alpha, float64(step)/float64(b.setup.TotalSteps))
	return sp
}

// baseAt is the base at the i-th step of window k, k the next window to
// observe or a schedule window: the paper form's held base in its auto
// windows, else the schedule (+) u. A window the warm-up guard holds keeps
// the value the schedule reaches at the next window's start.
func (b *builtin) baseAt(k, i int) (float64, error) {
	t, total := b.setup.WindowSteps, b.setup.TotalSteps
	if b.paper != nil {
		if b.autoWindow(k) {
			return b.paper.Base, nil
		}
		return b.sched.At(k*t + i)
	}
	step := k*t + i
	if b.off.Held && k == b.next {
		step = min((k+1)*t, total-1)
	}
	s, err := b.sched.At(step)
	return Combine(b.kind.desc.Scale, s, b.off.U), err
}

func (b *builtin) Plan(_ context.Context, r WindowRequest) (WindowPlan, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initialised(); err != nil {
		return WindowPlan{}, err
	}
	t, total := b.setup.WindowSteps, b.setup.TotalSteps
	if r.Window < 0 || r.Window >= b.windows || r.Start != r.Window*t || r.Steps != min(t, total-r.Start) {
		return WindowPlan{}, fmt.Errorf("%w: window %d start %d steps %d; the run has %d windows of %d steps over %d steps",
			ErrInvalid, r.Window, r.Start, r.Steps, b.windows, t, total)
	}
	// Past the first update the base depends on the state, so the window
	// must be the one after the last observed (a committed base does not).
	if b.autoWindow(r.Window) && b.next != r.Window && !b.committed {
		return WindowPlan{}, fmt.Errorf("%w: window %d is in the auto phase and needs window %d observed first; %d windows observed",
			ErrOrder, r.Window, r.Window-1, b.next)
	}
	base := make([]float64, r.Steps)
	for i := range base {
		v, err := b.baseAt(r.Window, i)
		if err != nil {
			return WindowPlan{}, err
		}
		base[i] = v
	}
	if b.committed {
		return WindowPlan{Base: base, Spread: Spread{Kind: b.spread.Kind}, Bounds: b.bounds}, nil
	}
	probe := b.cfg.Signal == SignalProbe && b.updates(r.Window+1) && r.Window+1 < b.windows
	return WindowPlan{Base: base, Spread: b.spreadAt(r.Start), Bounds: b.bounds, Probe: probe}, nil
}

// search is the explorer's part in the search pass at boundary k: with
// auto.commit restart, searching until auto.until, then done.
func (b *builtin) search(k int) SearchState {
	switch {
	case b.paper != nil || b.cfg.Commit != CommitRestart:
		return SearchNone
	case float64(k*b.setup.WindowSteps) < b.cfg.Until*float64(b.setup.TotalSteps):
		return Searching
	}
	return SearchDone
}

// Commit ends the search: u settles (the average of its updates, if they
// have not ended yet), and Plan answers the main pass's windows with the
// schedule (+) u and no spread. A second call answers the same.
func (b *builtin) Commit(context.Context) (Commitment, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initialised(); err != nil {
		return Commitment{}, err
	}
	if b.paper != nil {
		return Commitment{}, fmt.Errorf("%w: auto.form paper has no offset to commit", ErrOrder)
	}
	if !b.committed {
		if b.off.Settle() {
			s, err := b.sched.At(min(b.next*b.setup.WindowSteps, b.setup.TotalSteps-1))
			if err != nil {
				return Commitment{}, err
			}
			b.clamp(s)
		}
		b.off.Held, b.committed, b.next = false, true, 0
	}
	peak, err := peakOf(b.sched)
	if err != nil {
		return Commitment{}, err
	}
	return Commitment{Offset: b.off.U, Value: b.bounds.Clamp(Combine(b.kind.desc.Scale, peak, b.off.U))}, nil
}

// peakOf is the schedule's value where its warm-up ends (OneCycle's
// max_lr, one step before warmupEnd; a warm-up schedule's peak, at it),
// or its first value.
func peakOf(s Schedule) (float64, error) {
	end := min(warmupEnd(s), s.Steps()-1)
	v, err := s.At(end)
	if err != nil || end == 0 {
		return v, err
	}
	before, err := s.At(end - 1)
	return max(v, before), err
}

func (b *builtin) Observe(_ context.Context, o Observation) (Feedback, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initialised(); err != nil {
		return Feedback{}, err
	}
	if b.committed { // the main pass learns nothing
		return Feedback{Offset: b.off.U, Search: SearchDone}, nil
	}
	if o.Window != b.next || o.Window >= b.windows {
		return Feedback{}, fmt.Errorf("%w: observation of window %d, expected window %d of %d", ErrOrder, o.Window, b.next, b.windows)
	}
	n := b.setup.Ranks
	if len(o.Values) != n || len(o.Losses) != n || (o.Probe != nil && len(o.Probe) != n) {
		return Feedback{}, fmt.Errorf("%w: %d values, %d losses and %d probe losses for %d ranks", ErrInvalid, len(o.Values), len(o.Losses), len(o.Probe), n)
	}
	k := o.Window + 1 // the boundary this observation ends at
	signal := b.signal(o)
	var fb Feedback
	var err error
	switch {
	case b.paper != nil && b.updates(k):
		fb, err = b.paper.Update(o.Values, signal, nil)
	case b.off != nil:
		fb, err = b.observeOffset(o, signal, b.updates(k))
	}
	if err != nil {
		return Feedback{}, err
	}
	b.next = k
	if b.paper == nil || !b.updates(k) {
		// The next window's first base (or the last step's, after the last window).
		kk, i := k, 0
		if k == b.windows {
			kk, i = k-1, b.setup.TotalSteps-1-(k-1)*b.setup.WindowSteps
		}
		if fb.Base, err = b.baseAt(kk, i); err != nil {
			return Feedback{}, err
		}
	}
	fb.Search = b.search(k)
	return fb, nil
}

// signal is what the ranks are compared by: the probe losses where the
// explorer asked for them and got them (NaN for a rank whose training loss
// says it is unhealthy), else the training losses.
func (b *builtin) signal(o Observation) []float64 {
	if b.cfg.Signal != SignalProbe || o.Probe == nil {
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

// observeOffset is the offset form's update at the boundary after window
// o.Window (docs/design.md §1.1, steps 3-5), when update is set; the
// returned Feedback's Base is filled by the caller.
func (b *builtin) observeOffset(o Observation, signal []float64, update bool) (Feedback, error) {
	sc := b.kind.desc.Scale
	centre, err := b.baseAt(o.Window, min(b.setup.WindowSteps, b.setup.TotalSteps-o.Window*b.setup.WindowSteps)-1)
	if err != nil {
		return Feedback{}, err
	}
	b.off.Held = false
	if !update {
		if b.off.Settle() {
			s, err := b.sched.At(min((o.Window+1)*b.setup.WindowSteps, b.setup.TotalSteps-1))
			if err != nil {
				return Feedback{}, err
			}
			b.clamp(s)
		}
		return Feedback{Offset: b.off.U}, nil
	}
	x := grow(b.x, len(o.Values))
	b.x = x
	offsetsTo(x, o.Values, sc, toScale(sc, centre))
	est, w := b.off.Estimate(x, signal)
	b.off.Step(est)
	if err := b.guardAndClamp(o.Window+1, x); err != nil {
		return Feedback{}, err
	}
	return Feedback{Weights: w, Estimate: est, Offset: b.off.U}, nil
}

// guardAndClamp applies the warm-up guard to window k and clamps u so the
// base at k's first step stays within the bounds. The guard fires when the
// schedule still rises over window k and the velocity says "lower" by more
// than Guard times the spread's half-width span (the largest |x_r| over the
// ranks' offsets x). Measured on MNIST, the first warm-up readings lean
// high, and from 10x above the best rate the first one read only -0.02 to
// -0.11 against a span of 0.69: letting the rise go on there trains at
// damaging rates, while holding a well-placed base costs one window's
// rise. Firing, u absorbs the rise, so window k holds the base where the
// schedule's rise would have taken it. The span is taken only while the
// schedule rises: a pass over the ranks the other windows need not pay.
func (b *builtin) guardAndClamp(k int, x []float64) error {
	sc, t, total := b.kind.desc.Scale, b.setup.WindowSteps, b.setup.TotalSteps
	s0, err := b.sched.At(k * t)
	if err != nil {
		return err
	}
	s1, err := b.sched.At(min((k+1)*t, total-1))
	if err != nil {
		return err
	}
	if rise := toScale(sc, s1) - toScale(sc, s0); rise > 0 && b.cfg.Guard > 0 {
		if span := halfWidth(x); span > 0 && b.off.V <= -b.cfg.Guard*span {
			b.off.U -= rise
			b.off.Held = true
			s0 = s1
		}
	}
	b.clamp(s0)
	return nil
}

// clamp keeps u so that the base on schedule value s stays within the bounds.
func (b *builtin) clamp(s float64) {
	sc := b.kind.desc.Scale
	f := toScale(sc, s)
	if !healthy(f) {
		return // a log-scale schedule at 0: u does not change the base
	}
	lo, hi := math.Inf(-1), toScale(sc, b.bounds.Upper)-f
	if sc != Log || b.bounds.Lower > 0 {
		lo = toScale(sc, b.bounds.Lower) - f
	}
	b.off.U = max(lo, min(hi, b.off.U))
}

// builtinStateVersion 4 added the commit (revision 3), 3 the offset's
// average; versions 2 and 3 still resume, uncommitted, a version-2
// average starting empty.
const builtinStateVersion = 4

// SaveState is the version, the number of windows observed, the form,
// whether the explorer committed and its meta-update's state; the
// configuration comes again through Init.
func (b *builtin) SaveState(context.Context) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initialised(); err != nil {
		return nil, err
	}
	out := []byte{builtinStateVersion}
	out = binary.AppendUvarint(out, uint64(b.next))
	var st []byte
	var err error
	if b.paper != nil {
		out = append(out, 1, 0)
		st, err = b.paper.MarshalBinary()
	} else {
		out = append(out, 0, boolByte(b.committed))
		st, err = b.off.MarshalBinary()
	}
	if err != nil {
		return nil, err
	}
	return append(out, st...), nil
}

func (b *builtin) LoadState(_ context.Context, state []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initialised(); err != nil {
		return err
	}
	if len(state) < 1 || state[0] < 2 || state[0] > builtinStateVersion {
		v := -1
		if len(state) > 0 {
			v = int(state[0])
		}
		return fmt.Errorf("%w: explorer state: version %d, this explorer reads versions 2 to %d (revision 2 of the meta-update on; a revision-1 checkpoint cannot resume)",
			ErrDecode, v, builtinStateVersion)
	}
	version := state[0]
	next, n := binary.Uvarint(state[1:])
	if n <= 0 || next > uint64(b.windows) || len(state) < 2+n {
		return fmt.Errorf("%w: explorer state: bad window count", ErrDecode)
	}
	form, rest := state[1+n], state[2+n:]
	if (form == 1) != (b.paper != nil) || form > 1 {
		return fmt.Errorf("%w: explorer state: saved with another auto.form than %q", ErrDecode, b.cfg.Form)
	}
	committed := false
	if version >= 4 {
		if len(rest) < 1 || rest[0] > 1 || (rest[0] == 1 && form == 1) {
			return fmt.Errorf("%w: explorer state: bad commit flag", ErrDecode)
		}
		committed, rest = rest[0] == 1, rest[1:]
	}
	if err := b.loadForm(version, rest); err != nil {
		return err
	}
	b.next, b.committed = int(next), committed
	return nil
}

// loadForm restores the paper form's or the offset's state.
func (b *builtin) loadForm(version byte, rest []byte) error {
	if b.paper != nil {
		a := *b.paper
		if err := a.UnmarshalBinary(rest); err != nil {
			return err
		}
		*b.paper = a
		return nil
	}
	if version == 2 { // no average yet: its sum and count are zero
		rest = append(slices.Clip(rest), make([]byte, 16)...)
	}
	o := *b.off
	if err := o.UnmarshalBinary(rest); err != nil {
		return err
	}
	*b.off = o
	return nil
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}
