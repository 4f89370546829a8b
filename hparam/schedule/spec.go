package schedule

import (
	"reflect"
	"slices"
	"strings"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/hparam/internal/jsonopt"
)

// Schedule kinds, the "kind" of a Spec and the first argument of
// `hdet schedule`.
const (
	KindOneCycle = "onecycle"
	KindConstant = "constant"
	KindCosine   = "cosine" // linear warm-up, cosine decay
	KindLinear   = "linear" // linear warm-up, linear decay
	KindStep     = "step"
)

// Kinds lists the schedule kinds.
var Kinds = []string{KindOneCycle, KindConstant, KindCosine, KindLinear, KindStep}

// Spec describes a schedule by kind and parameters, as written in an
// explorer's config block ("schedule": {...}) or typed on `hdet schedule`'s
// command line (the same names with dashes). A nil field takes its default.
//
//	kind              onecycle | constant | cosine | linear | step
//	total_steps       all kinds; default: the run's total steps
//	value             constant: the value (required)
//	max_lr            onecycle: peak learning rate (required)
//	epochs, steps_per_epoch   onecycle: total_steps = epochs*steps_per_epoch
//	pct_start         onecycle: 0.3, in [0, 1]
//	anneal_strategy   onecycle: "cos" | "linear", default "cos"
//	cycle_momentum    onecycle: true
//	base_momentum     onecycle: 0.85
//	max_momentum      onecycle: 0.95
//	div_factor        onecycle: 25 (initial_lr = max_lr/div_factor)
//	final_div_factor  onecycle: 1e4 (min_lr = initial_lr/final_div_factor)
//	three_phase       onecycle: false
//	momentum          onecycle: 0.9, the optimizer's momentum, reported when cycle_momentum is false
//	initial           cosine, linear: 0, value at step 0; step: the starting value (required)
//	peak              cosine, linear: value at the end of the warm-up (required)
//	final             cosine, linear: 0, value at the last step
//	warmup_steps      cosine, linear: 0, in [0, total_steps)
//	step_size         step: multiply by gamma every step_size steps (required)
//	gamma             step: 0.1
type Spec struct {
	Kind           *string  `json:"kind"`
	TotalSteps     *int     `json:"total_steps"`
	Value          *float64 `json:"value"`
	MaxLR          *float64 `json:"max_lr"`
	Epochs         *int     `json:"epochs"`
	StepsPerEpoch  *int     `json:"steps_per_epoch"`
	PctStart       *float64 `json:"pct_start"`
	AnnealStrategy *string  `json:"anneal_strategy"`
	CycleMomentum  *bool    `json:"cycle_momentum"`
	BaseMomentum   *float64 `json:"base_momentum"`
	MaxMomentum    *float64 `json:"max_momentum"`
	DivFactor      *float64 `json:"div_factor"`
	FinalDivFactor *float64 `json:"final_div_factor"`
	ThreePhase     *bool    `json:"three_phase"`
	Momentum       *float64 `json:"momentum"`
	Initial        *float64 `json:"initial"`
	Peak           *float64 `json:"peak"`
	Final          *float64 `json:"final"`
	WarmupSteps    *int     `json:"warmup_steps"`
	StepSize       *int     `json:"step_size"`
	Gamma          *float64 `json:"gamma"`
}

// scheduleKeys are the keys each kind accepts besides kind and total_steps.
var scheduleKeys = map[string][]string{
	KindOneCycle: {"max_lr", "epochs", "steps_per_epoch", "pct_start", "anneal_strategy", "cycle_momentum",
		"base_momentum", "max_momentum", "div_factor", "final_div_factor", "three_phase", "momentum"},
	KindConstant: {"value"},
	KindCosine:   {"initial", "peak", "final", "warmup_steps"},
	KindLinear:   {"initial", "peak", "final", "warmup_steps"},
	KindStep:     {"initial", "step_size", "gamma"},
}

// KindKeys returns the keys a schedule kind takes besides "kind", in
// the order of Spec's doc; nil for an unknown kind.
func KindKeys(kind string) []string {
	keys, ok := scheduleKeys[kind]
	if !ok {
		return nil
	}
	return append([]string{"total_steps"}, keys...)
}

// Keys returns the JSON names of the fields that are set.
func (s Spec) Keys() []string {
	var keys []string
	v := reflect.ValueOf(s)
	for i := range v.NumField() {
		if !v.Field(i).IsNil() {
			keys = append(keys, jsonopt.Name(v.Type().Field(i)))
		}
	}
	return keys
}

func required(name string, p *float64) (float64, error) {
	if p == nil {
		return 0, hparam.FieldErrorf(name, "is required")
	}
	return *p, nil
}

// Build returns the schedule. defaultKind applies when Kind is nil (and
// Value is nil too; a lone value means constant); defaultTotal is
// total_steps when it is not set. Errors are FieldErrors naming the field
// as Spec spells it.
func (s Spec) Build(defaultKind string, defaultTotal int) (Schedule, error) {
	kind := defaultKind
	switch {
	case s.Kind != nil:
		kind = *s.Kind
	case s.Value != nil:
		kind = KindConstant
	}
	allowed, ok := scheduleKeys[kind]
	if !ok {
		return nil, hparam.FieldErrorf("kind", "must be one of %s, got %q", strings.Join(Kinds, ", "), kind)
	}
	for _, k := range s.Keys() {
		if k != "kind" && k != "total_steps" && !slices.Contains(allowed, k) {
			return nil, hparam.FieldErrorf(k, "does not apply to schedule kind %s (it takes kind, total_steps, %s)", kind, strings.Join(allowed, ", "))
		}
	}
	if s.TotalSteps != nil {
		// Set, it must be valid even where epochs*steps_per_epoch could stand in (PyTorch checks it first).
		if err := checkTotal(*s.TotalSteps); err != nil {
			return nil, err
		}
	}
	total := jsonopt.Or(s.TotalSteps, defaultTotal)
	switch kind {
	case KindOneCycle:
		return s.oneCycle(total)
	case KindConstant:
		v, err := required("value", s.Value)
		if err != nil {
			return nil, err
		}
		return NewConstant(v, total)
	case KindCosine, KindLinear:
		peak, err := required("peak", s.Peak)
		if err != nil {
			return nil, err
		}
		c := WarmupConfig{Initial: jsonopt.Or(s.Initial, 0), Peak: peak, Final: jsonopt.Or(s.Final, 0),
			WarmupSteps: jsonopt.Or(s.WarmupSteps, 0), TotalSteps: total}
		if kind == KindCosine {
			return NewWarmupCosine(c)
		}
		return NewWarmupLinear(c)
	default: // KindStep
		initial, err := required("initial", s.Initial)
		if err != nil {
			return nil, err
		}
		if s.StepSize == nil {
			return nil, hparam.FieldErrorf("step_size", "is required")
		}
		return NewStepDecay(StepDecayConfig{Initial: initial, Gamma: jsonopt.Or(s.Gamma, 0.1), StepSize: *s.StepSize, TotalSteps: total})
	}
}

// oneCycle builds a OneCycle schedule of total steps, PyTorch's defaults
// where a field is not set.
func (s Spec) oneCycle(total int) (Schedule, error) {
	maxLR, err := required("max_lr", s.MaxLR)
	if err != nil {
		return nil, err
	}
	c := DefaultOneCycleConfig(maxLR, total)
	if s.Epochs != nil || s.StepsPerEpoch != nil {
		c.Epochs, c.StepsPerEpoch = jsonopt.Or(s.Epochs, 0), jsonopt.Or(s.StepsPerEpoch, 0)
		c.TotalSteps = jsonopt.Or(s.TotalSteps, 0) // an explicit total_steps wins, as in PyTorch
		if s.TotalSteps == nil && (c.Epochs == 0 || c.StepsPerEpoch == 0) {
			// Make the missing one the error, not total_steps.
			if c.Epochs == 0 {
				return nil, hparam.FieldErrorf("epochs", "must be a positive integer, got 0")
			}
			return nil, hparam.FieldErrorf("steps_per_epoch", "must be a positive integer, got 0")
		}
	}
	c.PctStart = jsonopt.Or(s.PctStart, c.PctStart)
	if s.AnnealStrategy != nil {
		c.AnnealStrategy = *s.AnnealStrategy
	}
	if s.CycleMomentum != nil {
		c.CycleMomentum = *s.CycleMomentum
	}
	c.BaseMomentum = jsonopt.Or(s.BaseMomentum, c.BaseMomentum)
	c.MaxMomentum = jsonopt.Or(s.MaxMomentum, c.MaxMomentum)
	c.DivFactor = jsonopt.Or(s.DivFactor, c.DivFactor)
	c.FinalDivFactor = jsonopt.Or(s.FinalDivFactor, c.FinalDivFactor)
	if s.ThreePhase != nil {
		c.ThreePhase = *s.ThreePhase
	}
	c.OptimizerMomentum = jsonopt.Or(s.Momentum, c.OptimizerMomentum)
	return NewOneCycle(c)
}

// WarmupEnd is the step where a schedule's warm-up ends (where the
// built-in explorers' search pass ends by default): OneCycle's
// int(pct_start*total_steps), the warm-up schedules' warmup_steps, 0 for
// schedules without a warm-up.
func WarmupEnd(s Schedule) int {
	switch s := s.(type) {
	case *OneCycle:
		return int(s.c.PctStart * float64(s.total))
	case *Warmup:
		return s.c.WarmupSteps
	}
	return 0
}
