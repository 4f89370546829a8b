package builtin

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/hdet-dev/hdet/hparam/internal/jsonopt"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/hparam/schedule"
)

// builtinKind is a built-in explorer kind's defaults: what it describes
// itself as, and the schedule kind a config's schedule block defaults to.
type builtinKind struct {
	desc         hparam.Descriptor
	scheduleKind string
}

var builtinKinds = map[string]builtinKind{
	LR:          kindOf(LR, schedule.KindOneCycle, `{"schedule": {"max_lr": 0.003}}`),
	Dropout:     kindOf(Dropout, schedule.KindConstant, `{"schedule": 0.1}`),
	WeightDecay: kindOf(WeightDecay, schedule.KindConstant, `{"schedule": 0.01}`),
}

// kindOf is a built-in explorer kind's defaults: the hyperparameter it
// explores, its scale, bounds and spread are its row of hparam.Builtins.
func kindOf(kind, scheduleKind, example string) builtinKind {
	b, _ := hparam.BuiltinExplored(kind) // every kind has a row: TestEveryKindHasItsRow
	return builtinKind{
		desc: hparam.Descriptor{Name: kind, Version: Version, Hyperparameter: b.Name, Scale: b.Scale,
			Bounds: b.Bounds, Spread: b.Spread, ExampleConfig: []byte(example)},
		scheduleKind: scheduleKind,
	}
}

// Config is a built-in explorer's config block (Setup.Config), in
// JSON; the engine converts the YAML block of the run config to it. Every
// block and key is optional except the schedule's required value; unknown
// keys are errors naming the key.
//
//	{
//	  "schedule": {"kind": "onecycle", "max_lr": 0.1, ...},  // a schedule.Spec, or a bare number for a constant
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
//	    "form": "offset",  // offset (base = schedule (+) learned offset u) | paper (the paper's absolute update)
//	    "start": 0,        // first step whose window boundary may update; default offset: 0,
//	                       // paper: the schedule's warm-up end (OneCycle: int(pct_start*total_steps))
//	    "until": ...,      // offset: fraction of the run after which u stops moving, (0, 1]; default: the first
//	                       // window boundary after the schedule's warm-up (1 for schedules without one)
//	    "guard": 0.01,     // offset: warm-up guard threshold, a fraction of the spread's half-width (0.5 compared by training losses); 0: off
//	    "bracket": 1,      // offset, restart, log scale: the first window's replicas span base/bracket..base*bracket and the
//	                       // first update takes the best; 1: off
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
// Defaults by kind (their hyperparameter, spread, bounds and scale are
// hparam.Builtins'):
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
// schedule, windows after it hold the auto base. "auto.decay" (the paper
// form's old decay) is refused: the schedule's own anneal replaced it.
type Config struct {
	Schedule json.RawMessage `json:"schedule"` // a schedule.Spec object or a number
	Spread   json.RawMessage `json:"spread"`   // a SpreadSpec
	Bounds   json.RawMessage `json:"bounds"`   // a BoundsSpec
	Auto     json.RawMessage `json:"auto"`     // an AutoSpec
}

// SpreadSpec is the "spread" block; nil fields keep the explorer's default.
type SpreadSpec struct {
	Kind       *hparam.SpreadKind `json:"kind"`
	Alpha      *float64           `json:"alpha"`
	NarrowFrom *float64           `json:"narrow_from"`
	NarrowTo   *float64           `json:"narrow_to"`
	AlphaEnd   *float64           `json:"alpha_end"`
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
	Bracket   *float64    `json:"bracket"`
	Signal    *Signal     `json:"signal"`
	Estimator *Estimator  `json:"estimator"`
	Clip      *float64    `json:"clip"`
	Sigma     *float64    `json:"sigma"`
	SigmaMode *SigmaMode  `json:"sigma_mode"`
	Beta      *float64    `json:"beta"`
	Lambda    *float64    `json:"lambda"`
	Commit    *CommitMode `json:"commit"`
	// Decay was the paper form's; a config that sets it is refused with what replaced it.
	Decay json.RawMessage `json:"decay"`
}

// Narrowing shrinks a spread's alpha linearly from From to To (fractions
// of the run) down to AlphaEnd (docs/design.md §1, "Narrowing spread").
type Narrowing struct {
	From, To, AlphaEnd float64
}

// offsetNarrowing is the offset form's default: explore while u learns,
// then narrow to 0 over a tenth of the run (docs/design.md §6.1).
func offsetNarrowing(until float64) Narrowing {
	return Narrowing{From: until, To: min(1, until+0.1), AlphaEnd: 0}
}

// MaxSearchShare is the largest share of a run that the search pass
// takes by default in a run that commits and restarts.
const MaxSearchShare = 0.25

// MaxSearchWindows is the most windows that search pass takes by default: a
// long run needs as many windows to tell its replicas apart as a short
// one, not the same share of its steps, so the share falls as 16T/N past
// N = 64T (windows of 50 steps: 8 % of 10,000 steps, 0.8 % of 100,000).
const MaxSearchWindows = 16

// defaultUntil is the offset form's default auto.until: through the
// schedule's warm-up and the first window boundary after it (docs/design.md
// §6.1); continuing without a warm-up (a constant, or a schedule hdet does
// not know), the whole run. A run that commits and restarts searches at most
// the whole windows that fit in a quarter of the run, and at most
// MaxSearchWindows of them (at least one): the search pass is paid for
// again by the main pass, so a warm-up longer than that (OneCycleLR's 30 %
// by default) is searched in its first part only.
func defaultUntil(sched schedule.Schedule, s hparam.Setup, commit CommitMode) float64 {
	until := 1.0
	if end := schedule.WarmupEnd(sched); end > 0 {
		until = min(1, float64(firstUpdate(end, s.WindowSteps)+1)/float64(s.TotalSteps))
	}
	if commit != CommitRestart {
		return until
	}
	t := s.WindowSteps
	k := max(1, min(MaxSearchWindows, int(MaxSearchShare*float64(s.TotalSteps))/t))
	return min(until, (float64(k*t)-0.5)/float64(s.TotalSteps)) // window k starts past it, whatever the rounding
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

// parsedConfig is a Config decoded and checked against the run.
type parsedConfig struct {
	sched     schedule.Schedule
	spread    hparam.Spread
	narrow    Narrowing
	bounds    hparam.Bounds
	autoOn    bool
	autoStart int
	auto      AutoConfig
}

func decodeSchedule(raw json.RawMessage) (schedule.Spec, error) {
	var spec schedule.Spec
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

func (b *builtin) parse(s hparam.Setup) (parsedConfig, error) {
	var p parsedConfig
	cfgJSON := s.Config
	if len(strings.TrimSpace(string(cfgJSON))) == 0 {
		cfgJSON = []byte("{}")
	}
	var cfg Config
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
	// The guard's default suits the probe. Training losses read "lower"
	// on noise alone, and at 0.01 every such reading held the rate at the
	// warm-up's start: the search committed 4-8x below the best rate.
	if as.Guard == nil && p.auto.Form == FormOffset && (p.auto.Signal == SignalTrain || !s.Probe) {
		p.auto.Guard = trainGuard
	}
	// Narrowing belongs to the offset form: it spends the end of the run on the answer
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
	if err := p.bracketConfig(d.Scale); err != nil {
		return p, err
	}
	p.auto.LogSpace = p.spread.Kind == hparam.Geometric
	p.bounds = hparam.Bounds{Lower: jsonopt.Or(bs.Lower, d.Bounds.Lower), Upper: jsonopt.Or(bs.Upper, d.Bounds.Upper)}
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
		return p, hparam.FieldErrorf("schedule.total_steps", "the schedule covers %d steps but the run takes its values for steps 0..%d", p.sched.Steps(), need-1)
	}
	return p, nil
}

// bracketConfig checks that a bracket other than 1 has what it needs: a
// log scale and a spread whose slots are multipliers, so that the guard
// after it can measure the regular spread.
func (p *parsedConfig) bracketConfig(sc hparam.Scale) error {
	if p.auto.Bracket != 1 && (sc != hparam.Log || p.spread.Kind == hparam.Additive) {
		return hparam.FieldErrorf("auto.bracket", "takes a log-scale hyperparameter with a multiplicative or geometric spread, this one is %s with a %s spread; set 1", sc, p.spread.Kind)
	}
	return nil
}

// spreadConfig applies the "spread" block to the explorer's default spread
// and narrowing (an AlphaEnd < 0 there means alpha itself).
func spreadConfig(def hparam.Spread, ss SpreadSpec, defNarrow Narrowing) (hparam.Spread, Narrowing, error) {
	sp := def
	if ss.Kind != nil {
		sp.Kind = *ss.Kind
	}
	sp.Alpha = jsonopt.Or(ss.Alpha, sp.Alpha)
	if err := sp.Validate(); err != nil {
		return sp, Narrowing{}, err
	}
	if defNarrow.AlphaEnd < 0 {
		defNarrow.AlphaEnd = sp.Alpha
	}
	// A narrow_from without narrow_to keeps the default's length.
	from := jsonopt.Or(ss.NarrowFrom, defNarrow.From)
	n := Narrowing{From: from, To: jsonopt.Or(ss.NarrowTo, min(1, from+defNarrow.To-defNarrow.From)),
		AlphaEnd: jsonopt.Or(ss.AlphaEnd, defNarrow.AlphaEnd)}
	if !(n.From >= 0 && n.From <= n.To && n.To <= 1) {
		return sp, n, hparam.FieldErrorf("spread.narrow_from", "narrow_from %v and narrow_to %v must satisfy 0 <= narrow_from <= narrow_to <= 1", n.From, n.To)
	}
	if err := (hparam.Spread{Kind: sp.Kind, Alpha: n.AlphaEnd}).Validate(); err != nil {
		var fe *hparam.FieldError
		if errors.As(err, &fe) {
			err = hparam.FieldErrorf("spread.alpha_end", "%s", fe.Msg)
		}
		return sp, n, err
	}
	return sp, n, nil
}

// autoConfig applies the "auto" block: the form's defaults, then the keys set.
func (p *parsedConfig) autoConfig(as AutoSpec) error {
	if present(as.Decay) {
		return hparam.FieldErrorf("auto.decay", "was removed: the base is now the schedule combined with a learned offset, "+
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
		p.autoStart = schedule.WarmupEnd(p.sched)
	}
	p.autoStart = jsonopt.Or(as.Start, p.autoStart)
	if p.autoStart < 0 {
		return hparam.FieldErrorf("auto.start", "must be >= 0, got %d", p.autoStart)
	}
	c.Sigma, c.Beta, c.Lambda = jsonopt.Or(as.Sigma, c.Sigma), jsonopt.Or(as.Beta, c.Beta), jsonopt.Or(as.Lambda, c.Lambda)
	c.Clip, c.Until, c.Guard = jsonopt.Or(as.Clip, c.Clip), jsonopt.Or(as.Until, c.Until), jsonopt.Or(as.Guard, c.Guard)
	c.Bracket = jsonopt.Or(as.Bracket, c.Bracket)
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
