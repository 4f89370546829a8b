package plan

import (
	"math"
	"testing"
)

func TestBaseLRTakesAnyLearningRateGroup(t *testing.T) {
	plan := func(names ...string) *Plan {
		p := &Plan{}
		for i, n := range names {
			p.Params = append(p.Params, ParamPlan{Name: n, Base: []float64{9, float64(i + 1)}})
		}
		return p
	}
	for _, tc := range []struct {
		p    *Plan
		want float64
	}{
		{plan("dropout", "lr"), 2},
		{plan("lr/output", "lr/hidden"), 2},
		{plan("dropout", "lr/backbone"), 2},
		{plan("lr/head", "lr"), 2},
	} {
		if got := BaseLR(tc.p); got != tc.want {
			t.Errorf("%v: BaseLR = %g, want %g", tc.p.Params, got, tc.want)
		}
	}
	if got := BaseLR(plan("dropout")); !math.IsNaN(got) {
		t.Errorf("no learning rate: BaseLR = %g, want NaN", got)
	}
}
