package builtin

import (
	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/hparam/schedule"
)

// admitSchedule refuses a built-in explorer's config whose bounds, or whose
// schedule at any of its extremes (the first step, the end of the warm-up,
// the last step), leave what hyperparameter name admits.
func admitSchedule(name string, s schedule.Schedule, b hparam.Bounds) error {
	if err := hparam.AdmitBounds(name, b); err != nil {
		return err
	}
	r := hparam.Admissible(name)
	for _, step := range []int{0, min(schedule.WarmupEnd(s), s.Steps()-1), s.Steps() - 1} {
		v, err := s.At(step)
		if err != nil {
			return err
		}
		if !r.Closure().Contains(v) {
			return hparam.FieldErrorf("schedule", "gives %g at step %d, outside what %s admits, %s", v, step, name, r)
		}
	}
	return nil
}
