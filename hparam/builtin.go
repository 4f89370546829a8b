package hparam

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
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
	decay        Decay
}

var builtinKinds = map[string]builtinKind{
	BuiltinLR: {
		desc: Descriptor{Name: BuiltinLR, Version: BuiltinVersion, Hyperparameter: "lr", Scale: Log,
			Bounds: Bounds{1e-8, 10}, Spread: Spread{Multiplicative, 1.0 / 9}},
		scheduleKind: KindOneCycle, decay: DecayFloor,
	},
	BuiltinDropout: {
		desc: Descriptor{Name: BuiltinDropout, Version: BuiltinVersion, Hyperparameter: "dropout", Scale: Linear,
			Bounds: Bounds{0, 0.9}, Spread: Spread{Additive, 1.0 / 9}},
		scheduleKind: KindConstant, decay: DecayNone,
	},
	BuiltinWeightDecay: {
		desc: Descriptor{Name: BuiltinWeightDecay, Version: BuiltinVersion, Hyperparameter: "weight_decay", Scale: Log,
			Bounds: Bounds{0, 1}, Spread: Spread{Geometric, 1.0 / 9}},
		scheduleKind: KindConstant, decay: DecayNone,
	},
}

// BuiltinConfig is a built-in explorer's config block (Setup.Config), in
// JSON; the engine converts the YAML block of the run config to it. Every
// block and key is optional except the schedule's required value; unknown
// keys are errors naming the key.
//
//	{
//	  "schedule": {"kind": "onecycle", "max_lr": 0.1, ...},  // a ScheduleSpec, or a bare number for a constant
//	  "spread":   {"kind": "multiplicative", "alpha": 0.111}, // multiplicative | additive | geometric; alpha >= 0 (< 1 multiplicative)
//	  "bounds":   {"lower": 1e-8, "upper": 10},               // values are clamped to [lower, upper]
//	  "auto": {
//	    "enabled": true,   // false: the schedule (with its spread) for the whole run
//	    "start":   300,    // first step of the auto phase; default: the schedule's warm-up end
//	                       // (OneCycle: int(pct_start*total_steps); cosine/linear: warmup_steps; else 0)
//	    "sigma":   0.1,    // softmax temperature in loss units, > 0
//	    "sigma_mode": "absolute", // absolute (the paper's) | relative: sigma times the std of the window's losses
//	    "beta":    0.9,    // velocity momentum, [0, 1)
//	    "lambda":  0.5,    // step on the velocity, >= 0
//	    "decay":   "floor" // floor | none
//	  }
//	}
//
// Defaults by kind:
//
//	kind          schedule                   spread               bounds       decay  scale
//	lr            onecycle (max_lr required) multiplicative 1/9   [1e-8, 10]   floor  log
//	dropout       constant (value required)  additive 1/9         [0, 0.9]     none   linear
//	weight-decay  constant (value required)  geometric 1/9        [0, 1]       none   log
//
// The schedule's total_steps defaults to the run's total steps and must
// cover every step before the auto phase. The first meta-update happens at
// the first window boundary k*T >= max(auto.start, T); windows before it
// follow the schedule step by step, windows after it hold the auto base.
type BuiltinConfig struct {
	Schedule json.RawMessage `json:"schedule"` // a ScheduleSpec object or a number
	Spread   json.RawMessage `json:"spread"`   // a SpreadSpec
	Bounds   json.RawMessage `json:"bounds"`   // a BoundsSpec
	Auto     json.RawMessage `json:"auto"`     // an AutoSpec
}

// SpreadSpec is the "spread" block; nil fields keep the explorer's default.
type SpreadSpec struct {
	Kind  *SpreadKind `json:"kind"`
	Alpha *float64    `json:"alpha"`
}

// BoundsSpec is the "bounds" block; nil fields keep the explorer's default.
type BoundsSpec struct {
	Lower *float64 `json:"lower"`
	Upper *float64 `json:"upper"`
}

// AutoSpec is the "auto" block; nil fields keep the defaults.
type AutoSpec struct {
	Enabled   *bool      `json:"enabled"`
	Start     *int       `json:"start"`
	Sigma     *float64   `json:"sigma"`
	SigmaMode *SigmaMode `json:"sigma_mode"`
	Beta      *float64   `json:"beta"`
	Lambda    *float64   `json:"lambda"`
	Decay     *Decay     `json:"decay"`
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
	bounds    Bounds
	autoOn    bool
	autoStart int // first step of the auto phase
	auto      *Auto
	windows   int // ceil(S/T)
	next      int // windows observed so far
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

func (b *builtin) Describe(context.Context) (Descriptor, error) { return withExample(b.kind.desc), nil }

func checkSetup(s Setup) error {
	if s.Ranks < 1 || s.TotalSteps < 1 || s.WindowSteps < 1 || s.WindowSteps > MaxWindowSteps {
		return fmt.Errorf("%w: setup: ranks %d, total steps %d, window steps %d; want ranks >= 1, total steps >= 1, 1 <= window steps <= %d",
			ErrInvalid, s.Ranks, s.TotalSteps, s.WindowSteps, MaxWindowSteps)
	}
	return nil
}

func (b *builtin) Init(_ context.Context, s Setup) error {
	if err := checkSetup(s); err != nil {
		return err
	}
	cfgJSON := s.Config
	if len(strings.TrimSpace(string(cfgJSON))) == 0 {
		cfgJSON = []byte("{}")
	}
	var cfg BuiltinConfig
	if err := decodeStrict(cfgJSON, &cfg, ""); err != nil {
		return err
	}
	d := b.kind.desc

	var spec ScheduleSpec
	switch {
	case !present(cfg.Schedule):
	case isNumber(cfg.Schedule):
		var v float64
		if err := decodeStrict(cfg.Schedule, &v, "schedule"); err != nil {
			return err
		}
		spec.Value = &v
	default:
		if err := decodeStrict(cfg.Schedule, &spec, "schedule"); err != nil {
			return err
		}
	}
	sched, err := spec.Build(b.kind.scheduleKind, s.TotalSteps)
	if err != nil {
		return prefixField("schedule", err)
	}

	var ss SpreadSpec
	var bs BoundsSpec
	var as AutoSpec
	if err := decodeBlock(cfg.Spread, &ss, "spread"); err != nil {
		return err
	}
	if err := decodeBlock(cfg.Bounds, &bs, "bounds"); err != nil {
		return err
	}
	if err := decodeBlock(cfg.Auto, &as, "auto"); err != nil {
		return err
	}
	spread := d.Spread
	if ss.Kind != nil {
		spread.Kind = *ss.Kind
	}
	spread.Alpha = orFloat(ss.Alpha, spread.Alpha)
	if err := spread.Validate(); err != nil {
		return err
	}
	bounds := Bounds{orFloat(bs.Lower, d.Bounds.Lower), orFloat(bs.Upper, d.Bounds.Upper)}
	if err := bounds.Validate(); err != nil {
		return err
	}
	if err := admitSchedule(s.Name, sched, bounds); err != nil {
		return err
	}

	ac := DefaultAutoConfig()
	ac.Decay = b.kind.decay
	autoOn, autoStart := true, orInt(as.Start, warmupEnd(sched))
	if as.Enabled != nil {
		autoOn = *as.Enabled
	}
	ac.Sigma, ac.Beta, ac.Lambda = orFloat(as.Sigma, ac.Sigma), orFloat(as.Beta, ac.Beta), orFloat(as.Lambda, ac.Lambda)
	if as.Decay != nil {
		ac.Decay = *as.Decay
	}
	if as.SigmaMode != nil {
		ac.SigmaMode = *as.SigmaMode
	}
	ac.LogSpace = spread.Kind == Geometric
	if autoStart < 0 {
		return fieldErr("auto.start", "must be >= 0, got %d", autoStart)
	}
	// The schedule must cover every step that follows it: all of them
	// without the auto phase, else those before the first meta-update.
	need := s.TotalSteps
	if autoOn {
		need = min(need, firstUpdate(autoStart, s.WindowSteps))
	}
	if sched.Steps() < need {
		return fieldErr("schedule.total_steps", "the schedule covers %d steps but the run takes its values for steps 0..%d", sched.Steps(), need-1)
	}
	if !autoOn {
		ac.Decay = DecayNone // the floor's target is never used, so don't demand one
	}
	auto, err := NewAuto(ac, bounds, sched.Final())
	if err != nil {
		return err
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	b.setup, b.sched, b.spread, b.bounds = s, sched, spread, bounds
	b.autoOn, b.autoStart, b.auto = autoOn, autoStart, auto
	b.windows = (s.TotalSteps + s.WindowSteps - 1) / s.WindowSteps
	b.next = 0
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
func (b *builtin) autoWindow(k int) bool {
	return b.autoOn && k >= 1 && k*b.setup.WindowSteps >= b.autoStart
}

func (b *builtin) initialised() error {
	if b.sched == nil {
		return fmt.Errorf("%w: the explorer has not been initialised", ErrOrder)
	}
	return nil
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
	base := make([]float64, r.Steps)
	if b.autoWindow(r.Window) {
		if b.next != r.Window {
			return WindowPlan{}, fmt.Errorf("%w: window %d is in the auto phase and needs window %d observed first; %d windows observed",
				ErrOrder, r.Window, r.Window-1, b.next)
		}
		for i := range base {
			base[i] = b.auto.Base
		}
	} else {
		for i := range base {
			v, err := b.sched.At(r.Start + i)
			if err != nil {
				return WindowPlan{}, err
			}
			base[i] = v
		}
	}
	return WindowPlan{Base: base, Spread: b.spread, Bounds: b.bounds}, nil
}

func (b *builtin) Observe(_ context.Context, o Observation) (Feedback, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initialised(); err != nil {
		return Feedback{}, err
	}
	if o.Window != b.next || o.Window >= b.windows {
		return Feedback{}, fmt.Errorf("%w: observation of window %d, expected window %d of %d", ErrOrder, o.Window, b.next, b.windows)
	}
	if len(o.Values) != b.setup.Ranks || len(o.Losses) != b.setup.Ranks {
		return Feedback{}, fmt.Errorf("%w: %d values and %d losses for %d ranks", ErrInvalid, len(o.Values), len(o.Losses), b.setup.Ranks)
	}
	k := o.Window + 1 // the boundary this observation ends at
	if b.autoWindow(k) {
		fb, err := b.auto.Update(o.Values, o.Losses, b.windows-k, nil)
		if err != nil {
			return Feedback{}, err
		}
		b.next = k
		return fb, nil
	}
	b.next = k
	step := min(k*b.setup.WindowSteps, b.setup.TotalSteps-1) // next window's first step, or the last step
	v, err := b.sched.At(step)
	if err != nil {
		return Feedback{}, err
	}
	return Feedback{Base: v}, nil
}

const builtinStateVersion = 1

// SaveState is the version, the number of windows observed and the
// meta-update's state; the configuration comes again through Init.
func (b *builtin) SaveState(context.Context) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initialised(); err != nil {
		return nil, err
	}
	out := []byte{builtinStateVersion}
	out = binary.AppendUvarint(out, uint64(b.next))
	a, err := b.auto.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return append(out, a...), nil
}

func (b *builtin) LoadState(_ context.Context, state []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initialised(); err != nil {
		return err
	}
	if len(state) < 1 || state[0] != builtinStateVersion {
		return fmt.Errorf("%w: explorer state: not version %d", ErrDecode, builtinStateVersion)
	}
	next, n := binary.Uvarint(state[1:])
	if n <= 0 || next > uint64(b.windows) {
		return fmt.Errorf("%w: explorer state: bad window count", ErrDecode)
	}
	a := *b.auto
	if err := a.UnmarshalBinary(state[1+n:]); err != nil {
		return err
	}
	*b.auto = a
	b.next = int(next)
	return nil
}
