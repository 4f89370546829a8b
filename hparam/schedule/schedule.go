package schedule

import (
	"fmt"
	"math"

	"github.com/hdet-dev/hdet/hparam"
)

// Schedule is a base value over a run's steps: the value before the auto
// phase (docs/design.md §1, "Base schedule").
type Schedule interface {
	// At returns the value used at step, 0 <= step < Steps(); any other step
	// is an error wrapping ErrStepRange.
	At(step int) (float64, error)
	// Steps is the number of steps the schedule covers.
	Steps() int
	// Final is the value the schedule ends on.
	Final() float64
}

func checkStep(step, total int) error {
	if step < 0 || step >= total {
		return fmt.Errorf("%w: step %d, the schedule covers steps 0..%d", ErrStepRange, step, total-1)
	}
	return nil
}

func checkFinite(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return hparam.FieldErrorf(field, "must be a finite number, got %v", v)
	}
	return nil
}

func checkTotal(total int) error {
	if total <= 0 {
		return hparam.FieldErrorf("total_steps", "must be a positive integer, got %d", total)
	}
	return nil
}

// Constant is the same value at every step.
type Constant struct {
	value float64
	total int
}

// NewConstant returns value at each of totalSteps steps.
func NewConstant(value float64, totalSteps int) (*Constant, error) {
	if err := checkFinite("value", value); err != nil {
		return nil, err
	}
	if err := checkTotal(totalSteps); err != nil {
		return nil, err
	}
	return &Constant{value: value, total: totalSteps}, nil
}

func (c *Constant) At(step int) (float64, error) {
	if err := checkStep(step, c.total); err != nil {
		return 0, err
	}
	return c.value, nil
}

func (c *Constant) Steps() int     { return c.total }
func (c *Constant) Final() float64 { return c.value }

// WarmupConfig configures the warm-up schedules: a linear ramp from Initial
// at step 0 to Peak at step WarmupSteps, then a decay that reaches Final
// exactly at the last step, TotalSteps-1.
type WarmupConfig struct {
	Initial     float64 // value at step 0 ("initial")
	Peak        float64 // value at the end of the warm-up ("peak")
	Final       float64 // value at the last step ("final")
	WarmupSteps int     // 0 <= WarmupSteps < TotalSteps ("warmup_steps")
	TotalSteps  int     // ("total_steps")
}

func (c WarmupConfig) validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"initial", c.Initial}, {"peak", c.Peak}, {"final", c.Final}} {
		if err := checkFinite(f.name, f.v); err != nil {
			return err
		}
	}
	if err := checkTotal(c.TotalSteps); err != nil {
		return err
	}
	if c.WarmupSteps < 0 || c.WarmupSteps >= c.TotalSteps {
		return hparam.FieldErrorf("warmup_steps", "must be in [0, total_steps) = [0, %d), got %d", c.TotalSteps, c.WarmupSteps)
	}
	return nil
}

// Warmup is a linear warm-up followed by a cosine or linear decay.
type Warmup struct {
	c      WarmupConfig
	cosine bool
}

// NewWarmupCosine is linear warm-up then cosine decay (the common
// "cosine with warmup").
func NewWarmupCosine(c WarmupConfig) (*Warmup, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Warmup{c: c, cosine: true}, nil
}

// NewWarmupLinear is linear warm-up then linear decay.
func NewWarmupLinear(c WarmupConfig) (*Warmup, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Warmup{c: c}, nil
}

func (w *Warmup) At(step int) (float64, error) {
	c := w.c
	if err := checkStep(step, c.TotalSteps); err != nil {
		return 0, err
	}
	if step < c.WarmupSteps {
		return annealLinear(c.Initial, c.Peak, float64(step)/float64(c.WarmupSteps)), nil
	}
	span := c.TotalSteps - 1 - c.WarmupSteps
	if span == 0 {
		// The only decay step is the last one, which is Final by definition.
		return c.Final, nil
	}
	pct := float64(step-c.WarmupSteps) / float64(span)
	if w.cosine {
		return annealCos(c.Peak, c.Final, pct), nil
	}
	return annealLinear(c.Peak, c.Final, pct), nil
}

func (w *Warmup) Steps() int     { return w.c.TotalSteps }
func (w *Warmup) Final() float64 { return w.c.Final }

// StepDecayConfig is PyTorch's StepLR: Initial * Gamma^floor(step/StepSize).
type StepDecayConfig struct {
	Initial    float64 // ("initial")
	Gamma      float64 // ("gamma"), >= 0
	StepSize   int     // ("step_size"), >= 1
	TotalSteps int     // ("total_steps")
}

// StepDecay multiplies the value by Gamma every StepSize steps.
type StepDecay struct{ c StepDecayConfig }

// NewStepDecay validates c and returns its schedule.
func NewStepDecay(c StepDecayConfig) (*StepDecay, error) {
	if err := checkFinite("initial", c.Initial); err != nil {
		return nil, err
	}
	if err := checkFinite("gamma", c.Gamma); err != nil {
		return nil, err
	}
	if c.Gamma < 0 {
		return nil, hparam.FieldErrorf("gamma", "must be >= 0, got %v", c.Gamma)
	}
	if c.StepSize < 1 {
		return nil, hparam.FieldErrorf("step_size", "must be a positive integer, got %d", c.StepSize)
	}
	if err := checkTotal(c.TotalSteps); err != nil {
		return nil, err
	}
	return &StepDecay{c: c}, nil
}

func (s *StepDecay) At(step int) (float64, error) {
	if err := checkStep(step, s.c.TotalSteps); err != nil {
		return 0, err
	}
	return s.at(step), nil
}

// The closed form PyTorch's StepLR uses (_get_closed_form_lr).
func (s *StepDecay) at(step int) float64 {
	return s.c.Initial * math.Pow(s.c.Gamma, float64(step/s.c.StepSize))
}

func (s *StepDecay) Steps() int     { return s.c.TotalSteps }
func (s *StepDecay) Final() float64 { return s.at(s.c.TotalSteps - 1) }

// The two annealing functions of PyTorch's OneCycleLR, with Python's order
// of operations. The float64() conversions forbid fused multiply-adds
// (which Go may otherwise emit on arm64, ppc64, s390x), so the result is
// rounded exactly as CPython rounds it.
func annealCos(start, end, pct float64) float64 {
	cosOut := Cos(float64(math.Pi*pct)) + 1
	return end + float64(float64((start-end)/2.0)*cosOut)
}

func annealLinear(start, end, pct float64) float64 {
	return float64((end-start)*pct) + start
}
