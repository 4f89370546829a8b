package schedule

import (
	"math"

	"github.com/hdet-dev/hdet/hparam"
)

// OneCycleConfig holds torch.optim.lr_scheduler.OneCycleLR's arguments
// (PyTorch 1.13), with the same names in snake case as field names in
// errors. Start from DefaultOneCycleConfig: the zero value of PctStart (0)
// is a valid setting, not "use the default".
type OneCycleConfig struct {
	MaxLR float64 // max_lr
	// TotalSteps (total_steps) wins when it is set (non-zero) or when Epochs
	// and StepsPerEpoch are both zero; otherwise the schedule has
	// Epochs*StepsPerEpoch steps, as in PyTorch.
	TotalSteps     int
	Epochs         int     // epochs
	StepsPerEpoch  int     // steps_per_epoch
	PctStart       float64 // pct_start, in [0, 1]
	AnnealStrategy string  // anneal_strategy: "cos" or "linear"
	CycleMomentum  bool    // cycle_momentum
	BaseMomentum   float64 // base_momentum
	MaxMomentum    float64 // max_momentum
	DivFactor      float64 // div_factor: initial_lr = max_lr/div_factor
	FinalDivFactor float64 // final_div_factor: min_lr = initial_lr/final_div_factor
	ThreePhase     bool    // three_phase
	// OptimizerMomentum (momentum) is the optimizer's own momentum, which
	// OneCycleLR leaves alone when CycleMomentum is false; Momentum reports
	// it then. The reference data was made with SGD(momentum=0.9).
	OptimizerMomentum float64
}

// DefaultOneCycleConfig returns OneCycleLR's defaults for maxLR and totalSteps.
func DefaultOneCycleConfig(maxLR float64, totalSteps int) OneCycleConfig {
	return OneCycleConfig{
		MaxLR:             maxLR,
		TotalSteps:        totalSteps,
		PctStart:          0.3,
		AnnealStrategy:    "cos",
		CycleMomentum:     true,
		BaseMomentum:      0.85,
		MaxMomentum:       0.95,
		DivFactor:         25,
		FinalDivFactor:    1e4,
		OptimizerMomentum: 0.9,
	}
}

type ocPhase struct {
	endStep                          float64
	startLR, endLR, startMom, endMom float64
}

// OneCycle is PyTorch's OneCycleLR: the same phases and the same float
// operations in the same order, with a correctly rounded cosine (Cos), so
// the learning rates and momenta are PyTorch's to the bit wherever the C
// library's cos that PyTorch calls is correctly rounded too.
type OneCycle struct {
	c      OneCycleConfig
	total  int
	phases []ocPhase
	minLR  float64
	anneal func(start, end, pct float64) float64
}

// NewOneCycle validates c as OneCycleLR's constructor does (plus finiteness
// and positivity of the factors, which PyTorch leaves unchecked) and
// returns the schedule.
func NewOneCycle(c OneCycleConfig) (*OneCycle, error) {
	total := c.TotalSteps
	switch {
	case c.TotalSteps != 0 || (c.Epochs == 0 && c.StepsPerEpoch == 0):
		if err := checkTotal(c.TotalSteps); err != nil {
			return nil, err
		}
	default:
		if c.Epochs <= 0 {
			return nil, hparam.FieldErrorf("epochs", "must be a positive integer, got %d", c.Epochs)
		}
		if c.StepsPerEpoch <= 0 {
			return nil, hparam.FieldErrorf("steps_per_epoch", "must be a positive integer, got %d", c.StepsPerEpoch)
		}
		if c.Epochs > math.MaxInt32/c.StepsPerEpoch {
			return nil, hparam.FieldErrorf("epochs", "epochs*steps_per_epoch = %d*%d is too large", c.Epochs, c.StepsPerEpoch)
		}
		total = c.Epochs * c.StepsPerEpoch
	}
	if math.IsNaN(c.PctStart) || c.PctStart < 0 || c.PctStart > 1 {
		return nil, hparam.FieldErrorf("pct_start", "must be a number in [0, 1], got %v", c.PctStart)
	}
	o := &OneCycle{c: c, total: total}
	switch c.AnnealStrategy {
	case "cos":
		o.anneal = annealCos
	case "linear":
		o.anneal = annealLinear
	default:
		return nil, hparam.FieldErrorf("anneal_strategy", "must be \"cos\" or \"linear\", got %q", c.AnnealStrategy)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"max_lr", c.MaxLR}, {"div_factor", c.DivFactor}, {"final_div_factor", c.FinalDivFactor}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v <= 0 {
			return nil, hparam.FieldErrorf(f.name, "must be a positive finite number, got %v", f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"base_momentum", c.BaseMomentum}, {"max_momentum", c.MaxMomentum}, {"momentum", c.OptimizerMomentum}} {
		if err := checkFinite(f.name, f.v); err != nil {
			return nil, err
		}
	}
	// float(pct_start*total_steps) - 1 == 0 makes PyTorch divide by zero
	// at step 0 (ZeroDivisionError); refuse it up front. No other step can
	// land in a zero-length phase.
	if float64(c.PctStart*float64(total))-1 == 0 {
		return nil, hparam.FieldErrorf("pct_start", "pct_start*total_steps = 1 makes the warm-up phase zero steps long (PyTorch divides by zero); pick another pct_start")
	}

	initial := c.MaxLR / c.DivFactor
	o.minLR = initial / c.FinalDivFactor
	maxM, baseM := c.MaxMomentum, c.BaseMomentum
	end1 := float64(c.PctStart*float64(total)) - 1
	last := float64(total - 1)
	if c.ThreePhase {
		o.phases = []ocPhase{
			{end1, initial, c.MaxLR, maxM, baseM},
			{float64(2*c.PctStart*float64(total)) - 2, c.MaxLR, initial, baseM, maxM},
			{last, initial, o.minLR, maxM, maxM},
		}
	} else {
		o.phases = []ocPhase{
			{end1, initial, c.MaxLR, maxM, baseM},
			{last, c.MaxLR, o.minLR, baseM, maxM},
		}
	}
	return o, nil
}

// Config returns the configuration the schedule was built from.
func (o *OneCycle) Config() OneCycleConfig { return o.c }

// Steps is total_steps (or epochs*steps_per_epoch).
func (o *OneCycle) Steps() int { return o.total }

// Final is min_lr = max_lr/div_factor/final_div_factor.
func (o *OneCycle) Final() float64 { return o.minLR }

// At is the learning rate used at step: OneCycleLR.get_lr() after step
// calls to scheduler.step().
func (o *OneCycle) At(step int) (float64, error) {
	lr, _, err := o.AtBoth(step)
	return lr, err
}

// Momentum is the momentum (or Adam's beta1) used at step.
func (o *OneCycle) Momentum(step int) (float64, error) {
	_, m, err := o.AtBoth(step)
	return m, err
}

// AtBoth returns the learning rate and momentum used at step.
func (o *OneCycle) AtBoth(step int) (lr, momentum float64, err error) {
	if err := checkStep(step, o.total); err != nil {
		return 0, 0, err
	}
	// OneCycleLR.get_lr, line by line: the first phase whose end_step is
	// not behind the step, else the last phase.
	s := float64(step)
	var startStep float64
	p := o.phases[len(o.phases)-1]
	for _, q := range o.phases[:len(o.phases)-1] {
		if s <= q.endStep {
			p = q
			break
		}
		startStep = q.endStep
	}
	pct := (s - startStep) / (p.endStep - startStep)
	lr = o.anneal(p.startLR, p.endLR, pct)
	momentum = o.c.OptimizerMomentum
	if o.c.CycleMomentum {
		momentum = o.anneal(p.startMom, p.endMom, pct)
	}
	return lr, momentum, nil
}
