package controller

import (
	"context"
	"testing"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/hparam/builtin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func builtinNamed(t *testing.T, kind, name, cfg string) NamedExplorer {
	t.Helper()
	e, err := builtin.NewExplorer(kind)
	require.NoError(t, err)
	return NamedExplorer{Name: name, Explorer: e, Config: []byte(cfg)}
}

func TestSetupRefusesWhatTheHyperparameterDoesNotAdmit(t *testing.T) {
	ctx := context.Background()
	shape := RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10, Seed: 1}
	for _, tc := range []struct {
		kind, name, cfg, want string
	}{
		{builtin.Dropout, "dropout", `{"schedule": 1.5, "bounds": {"upper": 2}}`, "bounds.upper: 2 is outside what dropout admits, [0, 1)"},
		{builtin.Dropout, "dropout", `{"schedule": 1.5}`, "schedule: gives 1.5 at step 0, outside what dropout admits, [0, 1)"},
		{builtin.LR, "lr", `{"schedule": {"max_lr": 0.1}, "bounds": {"lower": 0}}`, "bounds.lower: 0 is outside what lr admits, (0, +Inf)"},
		{builtin.LR, "lr/output", `{"schedule": {"kind": "linear", "peak": 0.1, "final": -0.1}}`, "schedule: gives -0.1 at step 99"},
		{builtin.WeightDecay, "momentum", `{"schedule": 0.5, "bounds": {"upper": 1}}`, "bounds.upper: 1 is outside what momentum admits"},
	} {
		_, err := NewController(ctx, shape, []NamedExplorer{builtinNamed(t, tc.kind, tc.name, tc.cfg)})
		require.Error(t, err, tc.cfg)
		assert.ErrorIs(t, err, hparam.ErrInvalid, tc.cfg)
		assert.Contains(t, err.Error(), tc.name)
		assert.Contains(t, err.Error(), tc.want)
	}
	// A warm-up from 0 is fine: the base may touch an open end, the bounds
	// keep every rank's value inside.
	_, err := NewController(ctx, shape, []NamedExplorer{builtinNamed(t, builtin.LR, "lr", `{"schedule": {"kind": "cosine", "peak": 0.1, "final": 0.001, "warmup_steps": 10}}`)})
	require.NoError(t, err)

	// Declared bounds are checked against the explorer's own hyperparameter.
	bad := &misplans{Explorer: builtinNamed(t, builtin.Dropout, "dropout", `{"schedule": 0.1}`).Explorer, declare: &hparam.Bounds{Lower: 0, Upper: 1}}
	_, err = NewController(ctx, shape, []NamedExplorer{{Name: "dropout", Explorer: bad, Config: []byte(`{"schedule": 0.1}`)}})
	require.ErrorIs(t, err, hparam.ErrInvalid)
	assert.Contains(t, err.Error(), "dropout (explorer dropout 1.0.0) declares bounds.upper: 1 is outside what dropout admits")
}

// misplans wraps an explorer: it may declare other bounds, and from window
// from on it plans base with bounds.
type misplans struct {
	hparam.Explorer
	declare *hparam.Bounds
	from    int
	base    float64
	bounds  hparam.Bounds
}

func (m *misplans) Describe(ctx context.Context) (hparam.Descriptor, error) {
	d, err := m.Explorer.Describe(ctx)
	if m.declare != nil {
		d.Bounds = *m.declare
	}
	return d, err
}

func (m *misplans) Plan(ctx context.Context, r hparam.WindowRequest) (hparam.WindowPlan, error) {
	wp, err := m.Explorer.Plan(ctx, r)
	if m.from > 0 && r.Window >= m.from {
		for i := range wp.Base {
			wp.Base[i] = m.base
		}
		wp.Bounds = m.bounds
	}
	return wp, err
}

func TestControllerClampsThenFreezesAnExplorerThatLeavesTheRange(t *testing.T) {
	ctx := context.Background()
	inner := builtinNamed(t, builtin.Dropout, "dropout", `{"schedule": 0.2, "bounds": {"upper": 0.5}, "auto": {"enabled": false}}`)
	bad := &misplans{Explorer: inner.Explorer, from: 2, base: 1.5, bounds: hparam.Bounds{Lower: -1, Upper: 2}}
	c, err := NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10, Seed: 1}, []NamedExplorer{{Name: "dropout", Explorer: bad, Config: inner.Config}})
	require.NoError(t, err)
	var kinds []string
	for k := range 6 {
		p, evs, err := c.Plan(ctx)
		require.NoError(t, err, "window %d: never an error", k)
		for _, ev := range evs {
			kinds = append(kinds, ev.Kind)
			assert.Equal(t, k, ev.Window)
			assert.Contains(t, ev.String(), "outside what dropout admits, [0, 1)")
		}
		pp := &p.Params[0]
		for r := range 4 {
			for i := range p.Steps {
				v := pp.Value(r, i)
				require.True(t, v >= 0 && v <= 0.5, "window %d rank %d: %g, within the last admitted bounds", k, r, v)
			}
		}
		if k >= 4 {
			assert.True(t, pp.Frozen)
			assert.Equal(t, 0.5, pp.Base[0], "frozen at its last admitted (clamped) plan")
		}
		_, _, err = c.Observe(ctx, []float64{1, 1, 1, 1}, nil, 0)
		require.NoError(t, err)
	}
	assert.Equal(t, []string{EventClamped, EventClamped, EventFrozen}, kinds)
}
