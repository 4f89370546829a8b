package builtin

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/hparam/schedule"
)

func initBuiltin(t *testing.T, kind, cfg string, s hparam.Setup) (hparam.Explorer, error) {
	t.Helper()
	e, err := NewExplorer(kind)
	require.NoError(t, err)
	s.Config = []byte(cfg)
	return e, e.Init(context.Background(), s)
}

var setup4 = hparam.Setup{Name: "x", Ranks: 4, TotalSteps: 100, WindowSteps: 10, Seed: 1}

func TestBuiltinDescribe(t *testing.T) {
	ctx := context.Background()
	for kind, want := range map[string]hparam.SpreadKind{LR: hparam.Multiplicative, Dropout: hparam.Additive, WeightDecay: hparam.Geometric} {
		e, err := NewExplorer(kind)
		require.NoError(t, err)
		d, err := e.Describe(ctx)
		require.NoError(t, err)
		assert.Equal(t, kind, d.Name)
		assert.Equal(t, want, d.Spread.Kind)
		wantAlpha := 1.0 / 9
		if kind == LR {
			wantAlpha = 0.5
		}
		assert.InDelta(t, wantAlpha, d.Spread.Alpha, 1e-17)
		_, err = initBuiltin(t, kind, string(d.ExampleConfig), setup4)
		assert.NoError(t, err, "the example config is accepted")
	}
	_, err := NewExplorer("momentum")
	assert.ErrorIs(t, err, hparam.ErrInvalid)
}

func TestBuiltinConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		kind, cfg, field string
	}{
		{LR, `{}`, "schedule.max_lr"},
		{LR, `{"schedul": {}}`, "schedul"},
		{LR, `{"schedule": {"max_lr": 0.1, "maxlr": 1}}`, "schedule.maxlr"},
		{LR, `{"schedule": {"max_lr": 0.1, "value": 1}}`, "schedule.max_lr"}, // a value without a kind means constant
		{LR, `{"schedule": {"kind": "onecycle", "max_lr": 0.1, "value": 1}}`, "schedule.value"},
		{LR, `{"schedule": {"max_lr": "big"}}`, "schedule.max_lr"},
		{LR, `{"schedule": {"max_lr": 0.1, "pct_start": 2}}`, "schedule.pct_start"},
		{LR, `{"schedule": {"max_lr": 0.1, "total_steps": 0}}`, "schedule.total_steps"},
		{LR, `{"schedule": {"max_lr": 0.1, "total_steps": 20}, "auto": {"start": 50}}`, "schedule.total_steps"},
		{LR, `{"schedule": {"max_lr": 0.1}, "spread": {"alpha": 1}}`, "spread.alpha"},
		{LR, `{"schedule": {"max_lr": 0.1}, "spread": {"kind": "log"}}`, "spread.kind"},
		{LR, `{"schedule": {"max_lr": 0.1}, "spread": {"alpah": 0.1}}`, "spread.alpah"},
		{LR, `{"schedule": {"max_lr": 0.1}, "bounds": {"lower": 1, "upper": 0.5}}`, "bounds.upper"},
		{LR, `{"schedule": {"max_lr": 0.1}, "auto": {"sigma": 0}}`, "auto.sigma"},
		{LR, `{"schedule": {"max_lr": 0.1}, "auto": {"beta": 1}}`, "auto.beta"},
		{LR, `{"schedule": {"max_lr": 0.1}, "auto": {"lambda": -1}}`, "auto.lambda"},
		{LR, `{"schedule": {"max_lr": 0.1}, "auto": {"decay": "exp"}}`, "auto.decay"},
		{LR, `{"schedule": {"max_lr": 0.1}, "auto": {"start": -1}}`, "auto.start"},
		{LR, `{"schedule": {"max_lr": 0.1}, "auto": {"start": 1.5}}`, "auto.start"},
		{LR, `{"schedule": {"max_lr": 0.1}, "auto": {"stat": 1}}`, "auto.stat"},
		{LR, `{"schedule": {"max_lr": 0.1}, "auto": {"decay": "none"}}`, "auto.decay"}, // the paper form's old decay, refused
		{LR, `{"schedule": {"max_lr": 0.1}, "auto": {"form": "absolute"}}`, "auto.form"},
		{LR, `{"schedule": {"max_lr": 0.1}, "auto": {"signal": "eval"}}`, "auto.signal"},
		{LR, `{"schedule": {"max_lr": 0.1}, "auto": {"estimator": "cubic"}}`, "auto.estimator"},
		{LR, `{"schedule": {"max_lr": 0.1}, "auto": {"form": "paper", "estimator": "quadratic"}}`, "auto.estimator"},
		{LR, `{"schedule": {"max_lr": 0.1}, "auto": {"clip": -1}}`, "auto.clip"},
		{LR, `{"schedule": {"max_lr": 0.1}, "auto": {"until": 0}}`, "auto.until"},
		{LR, `{"schedule": {"max_lr": 0.1}, "spread": {"narrow_from": 0.8, "narrow_to": 0.5}}`, "spread.narrow_from"},
		{LR, `{"schedule": {"max_lr": 0.1}, "spread": {"alpha_end": 1.5}}`, "spread.alpha_end"},
		{LR, `{"schedule": {"max_lr": 0.1, "total_steps": 50}}`, "schedule.total_steps"}, // the offset form needs the whole run
		{Dropout, `{}`, "schedule.value"},
		{Dropout, `{"schedule": "high"}`, "schedule"},
		{Dropout, `{"schedule": 0.1} x`, "config"},
	} {
		_, err := initBuiltin(t, tc.kind, tc.cfg, setup4)
		require.ErrorIs(t, err, hparam.ErrInvalid, "%s", tc.cfg)
		var fe *hparam.FieldError
		require.True(t, errors.As(err, &fe), "%v", err)
		assert.Equal(t, tc.field, fe.Field, "%s: %v", tc.cfg, err)
	}
	_, err := initBuiltin(t, LR, `{"schedule": {"max_lr": 0.1}}`, hparam.Setup{Ranks: 0, TotalSteps: 10, WindowSteps: 1})
	assert.ErrorIs(t, err, hparam.ErrInvalid)
}

func TestBuiltinUnknownKeyListsAllowed(t *testing.T) {
	_, err := initBuiltin(t, LR, `{"schedule": {"max_lr": 0.1}, "spread": {"alpah": 0.1}}`, setup4)
	assert.ErrorContains(t, err, "spread.alpah: unknown key (allowed: kind, alpha, narrow_from, narrow_to, alpha_end)")
}

func TestBuiltinTypeErrorNamesTheValue(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"schedule": {"max_lr": 0.1}, "spread": {"alpha": "NaN"}}`: `spread.alpha: must be a JSON number, got string "NaN"`,
		`{"schedule": {"max_lr": 0.1}, "auto": {"estimator": 3}}`:   `auto.estimator: must be a JSON string, got number 3`,
		`{"schedule": {"max_lr": 0.1}, "auto": {"clip": [1, 2]}}`:   `auto.clip: must be a JSON number, got array`,
		`{"schedule": {"max_lr": "0.1,5"}}`:                         `schedule.max_lr: must be a JSON number, got string "0.1,5"`,
		// Cut at 37 bytes, mid-character: the half character is dropped.
		`{"schedule": {"max_lr": "a` + strings.Repeat("é", 30) + `"}}`: `got string "a` + strings.Repeat("é", 17) + `...`,
	} {
		_, err := initBuiltin(t, LR, cfg, setup4)
		require.ErrorContains(t, err, want, "%s", cfg)
		assert.False(t, strings.HasSuffix(err.Error(), " "), "%q", err)
	}
}

func TestBuiltinScheduleThenAuto(t *testing.T) {
	ctx := context.Background()
	// Paper form, auto.start 35: windows 0..3 follow the schedule, the
	// first update is at step 40, after window 3.
	e, err := initBuiltin(t, LR, `{"schedule": {"max_lr": 0.1}, "auto": {"form": "paper", "start": 35}}`, setup4)
	require.NoError(t, err)
	oc, err := schedule.NewOneCycle(schedule.DefaultOneCycleConfig(0.1, 100))
	require.NoError(t, err)
	losses := []float64{1, 0.9, 0.8, 0.7}
	for k := range 10 {
		wp, err := e.Plan(ctx, hparam.WindowRequest{Window: k, Start: 10 * k, Steps: 10})
		require.NoError(t, err)
		if k < 4 {
			for i, b := range wp.Base {
				want, _ := oc.At(10*k + i)
				require.Equal(t, want, b, "window %d step %d follows schedule.OneCycle", k, i)
			}
		} else {
			for _, b := range wp.Base {
				require.Equal(t, wp.Base[0], b, "window %d: constant base in the auto phase", k)
			}
		}
		last := wp.Base[9]
		values := wp.Spread.Values(last, 4, wp.Bounds)
		fb, err := e.Observe(ctx, hparam.Observation{Window: k, Values: values, Losses: losses})
		require.NoError(t, err)
		if k < 3 {
			assert.Empty(t, fb.Weights, "window %d", k)
		} else {
			assert.Len(t, fb.Weights, 4, "window %d", k)
		}
	}
	_, err = e.Plan(ctx, hparam.WindowRequest{Window: 10, Start: 100, Steps: 10})
	assert.ErrorIs(t, err, hparam.ErrInvalid)
	_, err = e.Observe(ctx, hparam.Observation{Window: 3, Values: make([]float64, 4), Losses: make([]float64, 4)})
	assert.ErrorIs(t, err, hparam.ErrOrder)
}

func TestBuiltinOrderErrors(t *testing.T) {
	ctx := context.Background()
	e, err := NewExplorer(Dropout)
	require.NoError(t, err)
	_, err = e.Plan(ctx, hparam.WindowRequest{Steps: 10})
	assert.ErrorIs(t, err, hparam.ErrOrder, "Plan before Init")
	e, err = initBuiltin(t, Dropout, `{"schedule": 0.1, "auto": {"start": 0}}`, setup4)
	require.NoError(t, err)
	_, err = e.Plan(ctx, hparam.WindowRequest{Window: 2, Start: 20, Steps: 10})
	assert.ErrorIs(t, err, hparam.ErrOrder, "an auto window before its predecessor was observed")
	_, err = e.Plan(ctx, hparam.WindowRequest{Window: 0, Start: 0, Steps: 9})
	assert.ErrorIs(t, err, hparam.ErrInvalid)
	_, err = e.Observe(ctx, hparam.Observation{Window: 0, Values: []float64{1}, Losses: []float64{1}})
	assert.ErrorIs(t, err, hparam.ErrInvalid)
}

func TestBuiltinStateRoundTrip(t *testing.T) {
	ctx := context.Background()
	cfg := `{"schedule": {"max_lr": 0.05, "pct_start": 0.2}, "auto": {"sigma": 0.05}}`
	s := hparam.Setup{Name: "lr", Ranks: 5, TotalSteps: 200, WindowSteps: 7}
	step := func(e hparam.Explorer, k int) (hparam.WindowPlan, hparam.Feedback) {
		req := hparam.WindowRequest{Window: k, Start: 7 * k, Steps: min(7, 200-7*k)}
		wp, err := e.Plan(ctx, req)
		require.NoError(t, err)
		losses := make([]float64, 5)
		for r := range losses {
			losses[r] = 1 + 0.1*math.Sin(float64(k*5+r))
		}
		fb, err := e.Observe(ctx, hparam.Observation{Window: k, Values: wp.Spread.Values(wp.Base[len(wp.Base)-1], 5, wp.Bounds), Losses: losses})
		require.NoError(t, err)
		return wp, fb
	}
	// Saved while u is being averaged (updates at boundaries 1-6, the
	// average from the 4th), and after it settled; a version-2 state (no
	// average) resumes too.
	var st []byte
	for _, saveAt := range []int{5, 12} {
		a, err := initBuiltin(t, LR, cfg, s)
		require.NoError(t, err)
		for k := range saveAt {
			step(a, k)
		}
		st, err = a.SaveState(ctx)
		require.NoError(t, err)
		b, err := initBuiltin(t, LR, cfg, s)
		require.NoError(t, err)
		require.NoError(t, b.LoadState(ctx, st))
		for k := saveAt; k < 29; k++ {
			pa, fa := step(a, k)
			pb, fb := step(b, k)
			require.Equal(t, pa, pb, "window %d", k)
			require.Equal(t, math.Float64bits(fa.Base), math.Float64bits(fb.Base), "window %d", k)
			require.Equal(t, fa.Weights, fb.Weights)
		}
	}
	b, err := initBuiltin(t, LR, cfg, s)
	require.NoError(t, err)
	// Version 5 added the evidence and the rejected offset after the
	// offset's state, version 4 the commit flag after the form byte (the
	// window count, 12, takes one byte).
	v4 := append([]byte{4}, st[1:1+3+offsetStateLen]...)
	require.NoError(t, b.LoadState(ctx, v4), "version 4: the state before the evidence")
	assert.ErrorIs(t, b.LoadState(ctx, append([]byte{5}, v4[1:]...)), hparam.ErrDecode, "version 5 without the evidence")
	v3 := append(append([]byte{3}, v4[1:3]...), v4[4:]...)
	require.NoError(t, b.LoadState(ctx, v3), "version 3: the state before the commit")
	v2 := append([]byte{2}, v3[1:len(v3)-16]...)
	require.NoError(t, b.LoadState(ctx, v2), "version 2: the state before the average")
	assert.ErrorIs(t, b.LoadState(ctx, append([]byte{3}, v3[1:len(v3)-16]...)), hparam.ErrDecode, "version 3 without the average")
	assert.ErrorIs(t, b.LoadState(ctx, append(append([]byte{4}, v4[1:3]...), append([]byte{2}, v4[4:]...)...)), hparam.ErrDecode, "a commit flag that is not 0 or 1")
	assert.ErrorIs(t, b.LoadState(ctx, []byte{1}), hparam.ErrDecode)
	assert.ErrorIs(t, b.LoadState(ctx, nil), hparam.ErrDecode)
	assert.ErrorIs(t, b.LoadState(ctx, append([]byte{2, 99}, st[2:]...)), hparam.ErrDecode, "window count past the run")
}

// Each built-in explorer kind describes itself with its row of
// hparam.Builtins.
func TestEveryKindHasItsRow(t *testing.T) {
	for _, kind := range []string{LR, Dropout, WeightDecay} {
		row, ok := hparam.BuiltinExplored(kind)
		require.True(t, ok, kind)
		d := builtinKinds[kind].desc
		assert.Equal(t, row.Name, d.Hyperparameter, kind)
		assert.Equal(t, row.Scale, d.Scale, kind)
		assert.Equal(t, row.Bounds, d.Bounds, kind)
		assert.Equal(t, row.Spread, d.Spread, kind)
		assert.NoError(t, hparam.AdmitBounds(row.Name, row.Bounds), kind)
	}
	assert.Len(t, hparam.Explored(), len(builtinKinds), "a row for each kind, and no other row names an explorer")
}
