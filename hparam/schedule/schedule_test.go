package schedule

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
)

func values(t *testing.T, s Schedule) []float64 {
	t.Helper()
	out := make([]float64, s.Steps())
	for i := range out {
		v, err := s.At(i)
		require.NoError(t, err)
		out[i] = v
	}
	_, err := s.At(s.Steps())
	require.ErrorIs(t, err, ErrStepRange)
	_, err = s.At(-1)
	require.ErrorIs(t, err, ErrStepRange)
	return out
}

func TestConstant(t *testing.T) {
	c, err := NewConstant(0.3, 5)
	require.NoError(t, err)
	assert.Equal(t, []float64{0.3, 0.3, 0.3, 0.3, 0.3}, values(t, c))
	assert.Equal(t, 0.3, c.Final())
	_, err = NewConstant(math.NaN(), 5)
	assert.ErrorIs(t, err, hparam.ErrInvalid)
}

func TestWarmupSchedules(t *testing.T) {
	c := WarmupConfig{Initial: 0, Peak: 1, Final: 0.1, WarmupSteps: 4, TotalSteps: 13}
	cos, err := NewWarmupCosine(c)
	require.NoError(t, err)
	lin, err := NewWarmupLinear(c)
	require.NoError(t, err)
	cv, lv := values(t, cos), values(t, lin)
	for i, want := range []float64{0, 0.25, 0.5, 0.75, 1} {
		assert.InDelta(t, want, cv[i], 1e-15, "warm-up step %d", i)
		assert.InDelta(t, want, lv[i], 1e-15, "warm-up step %d", i)
	}
	assert.Equal(t, 0.1, cv[12])
	assert.InDelta(t, 0.1, lv[12], 1e-15)
	assert.InDelta(t, 0.55, cv[8], 1e-15, "cosine midpoint")
	assert.InDelta(t, 0.55, lv[8], 1e-15, "linear midpoint")
	for i := 5; i < 13; i++ {
		assert.Less(t, cv[i], cv[i-1])
		assert.Less(t, lv[i], lv[i-1])
	}
	assert.Equal(t, 0.1, cos.Final())

	// The decay may be a single step: it is the final value.
	one, err := NewWarmupCosine(WarmupConfig{Initial: 0, Peak: 1, Final: 0.5, WarmupSteps: 2, TotalSteps: 3})
	require.NoError(t, err)
	assert.Equal(t, []float64{0, 0.5, 0.5}, values(t, one))

	for _, tc := range []struct {
		field string
		c     WarmupConfig
	}{
		{"warmup_steps", WarmupConfig{Peak: 1, WarmupSteps: 5, TotalSteps: 5}},
		{"warmup_steps", WarmupConfig{Peak: 1, WarmupSteps: -1, TotalSteps: 5}},
		{"total_steps", WarmupConfig{Peak: 1}},
		{"peak", WarmupConfig{Peak: math.Inf(1), TotalSteps: 5}},
	} {
		_, err := NewWarmupLinear(tc.c)
		var fe *hparam.FieldError
		require.True(t, errors.As(err, &fe), "%+v", tc.c)
		assert.Equal(t, tc.field, fe.Field)
	}
}

func TestStepDecay(t *testing.T) {
	s, err := NewStepDecay(StepDecayConfig{Initial: 1, Gamma: 0.5, StepSize: 3, TotalSteps: 8})
	require.NoError(t, err)
	assert.Equal(t, []float64{1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25}, values(t, s))
	assert.Equal(t, 0.25, s.Final())
	_, err = NewStepDecay(StepDecayConfig{Initial: 1, Gamma: 0.5, StepSize: 0, TotalSteps: 8})
	var fe *hparam.FieldError
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "step_size", fe.Field)
}

func TestScheduleSpecBuild(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	i := func(v int) *int { return &v }
	str := func(v string) *string { return &v }

	// The lone value means constant whatever the default kind.
	s, err := Spec{Value: f(0.2)}.Build(KindOneCycle, 10)
	require.NoError(t, err)
	assert.IsType(t, &Constant{}, s)

	s, err = Spec{MaxLR: f(0.1)}.Build(KindOneCycle, 100)
	require.NoError(t, err)
	ref, _ := NewOneCycle(DefaultOneCycleConfig(0.1, 100))
	assert.Equal(t, values(t, ref), values(t, s))

	s, err = Spec{MaxLR: f(0.1), Epochs: i(3), StepsPerEpoch: i(7)}.Build(KindOneCycle, 1000)
	require.NoError(t, err)
	assert.Equal(t, 21, s.Steps())

	s, err = Spec{Kind: str(KindStep), Initial: f(1), StepSize: i(2)}.Build("", 5)
	require.NoError(t, err)
	assert.InDelta(t, 0.01, s.Final(), 1e-17, "gamma defaults to StepLR's 0.1")

	for _, tc := range []struct {
		field string
		spec  Spec
	}{
		{"max_lr", Spec{}},
		{"value", Spec{Kind: str(KindConstant)}},
		{"kind", Spec{Kind: str("exp")}},
		{"value", Spec{Kind: str(KindOneCycle), MaxLR: f(1), Value: f(1)}},
		{"peak", Spec{Kind: str(KindCosine)}},
		{"step_size", Spec{Kind: str(KindStep), Initial: f(1)}},
		{"steps_per_epoch", Spec{MaxLR: f(1), Epochs: i(3)}},
		{"total_steps", Spec{MaxLR: f(1), TotalSteps: i(0), Epochs: i(3), StepsPerEpoch: i(2)}},
	} {
		_, err := tc.spec.Build(KindOneCycle, 100)
		var fe *hparam.FieldError
		require.True(t, errors.As(err, &fe), "%v", err)
		assert.Equal(t, tc.field, fe.Field, "%v", err)
	}
}
