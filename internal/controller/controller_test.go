package controller

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/hparam/builtin"
	"github.com/hdet-dev/hdet/hparam/schedule"
	"github.com/hdet-dev/hdet/internal/plan"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// threeExplorers is the default trio with the given spread width.
func threeExplorers(t testing.TB, alpha float64, autoStart int) []NamedExplorer {
	mk := func(kind, name, cfg string) NamedExplorer {
		e, err := builtin.NewExplorer(kind)
		require.NoError(t, err)
		return NamedExplorer{Name: name, Explorer: e, Config: []byte(cfg)}
	}
	auto := fmt.Sprintf(`"spread": {"alpha": %v}, "auto": {"start": %d, "commit": "continue"}`, alpha, autoStart)
	return []NamedExplorer{
		mk(builtin.LR, "lr", `{"schedule": {"max_lr": 0.1}, `+auto+`}`),
		mk(builtin.Dropout, "dropout", `{"schedule": 0.2, `+auto+`}`),
		mk(builtin.WeightDecay, "weight_decay", `{"schedule": 0.01, `+auto+`}`),
	}
}

// lossesFor makes window losses that favour larger values of the first
// hyperparameter, so the auto phase has a signal to follow.
func lossesFor(p *plan.Plan) []float64 {
	n := p.Ranks()
	out := make([]float64, n)
	for r := range out {
		out[r] = 2 - 10*p.Params[0].Value(r, p.Steps-1) + 0.01*math.Sin(float64(r+p.Window))
	}
	return out
}

func runWindows(t testing.TB, c *Controller, from, to int, losses func(*plan.Plan) []float64) ([][]byte, [][]ParamFeedback) {
	ctx := context.Background()
	var plans [][]byte
	var fbs [][]ParamFeedback
	for k := from; k < to; k++ {
		p, ev, err := c.Plan(ctx)
		require.NoError(t, err)
		require.Empty(t, ev)
		require.Equal(t, k, p.Window)
		b, err := p.MarshalBinary()
		require.NoError(t, err)
		plans = append(plans, b)
		fb, ev, err := c.Observe(ctx, losses(p), nil, 0)
		require.NoError(t, err)
		require.Empty(t, ev)
		fbs = append(fbs, fb)
	}
	return plans, fbs
}

func TestControllerDeterministic(t *testing.T) {
	ctx := context.Background()
	shape := RunShape{Ranks: 6, TotalSteps: 95, WindowSteps: 10, Seed: 99}
	a, err := NewController(ctx, shape, threeExplorers(t, 0.1, 30))
	require.NoError(t, err)
	b, err := NewController(ctx, shape, threeExplorers(t, 0.1, 30))
	require.NoError(t, err)
	require.Equal(t, 10, a.Windows())
	pa, fa := runWindows(t, a, 0, 10, lossesFor)
	pb, fb := runWindows(t, b, 0, 10, lossesFor)
	assert.Equal(t, pa, pb)
	assert.Equal(t, fa, fb)
	_, _, err = a.Plan(ctx)
	assert.ErrorIs(t, err, hparam.ErrOrder, "past the last window")

	shape.Seed = 100
	c, err := NewController(ctx, shape, threeExplorers(t, 0.1, 30))
	require.NoError(t, err)
	p1, _, err := c.Plan(ctx)
	require.NoError(t, err)
	var p0 plan.Plan
	require.NoError(t, p0.UnmarshalBinary(pa[0]))
	assert.Equal(t, p0.Params[0].Base, p1.Params[0].Base)
	assert.NotEqual(t, p0.Params[0].Slots, p1.Params[0].Slots, "another seed, other permutations")
	assert.NotEqual(t, p0.Params[0].Slots, p0.Params[1].Slots, "independent permutations per hyperparameter")

	// Plan is idempotent until Observe; Observe needs a plan.
	p2, _, err := c.Plan(ctx)
	require.NoError(t, err)
	assert.Same(t, p1, p2)
	_, _, err = c.Observe(ctx, []float64{1}, nil, 0)
	assert.ErrorIs(t, err, hparam.ErrInvalid)
	_, _, err = c.Observe(ctx, make([]float64, 6), nil, 0)
	require.NoError(t, err)
	d, err := NewController(ctx, shape, threeExplorers(t, 0.1, 30))
	require.NoError(t, err)
	_, _, err = d.Observe(ctx, make([]float64, 6), nil, 0)
	assert.ErrorIs(t, err, hparam.ErrOrder)
}

// Property: alpha = 0 gives every rank the base value at every step.
func TestControllerAlphaZero(t *testing.T) {
	ctx := context.Background()
	c, err := NewController(ctx, RunShape{Ranks: 5, TotalSteps: 60, WindowSteps: 7, Seed: 1}, threeExplorers(t, 0, 20))
	require.NoError(t, err)
	for k := 0; k < c.Windows(); k++ {
		p, _, err := c.Plan(ctx)
		require.NoError(t, err)
		for _, pp := range p.Params {
			for r := range 5 {
				for i, b := range pp.Base {
					v, err := p.Value(pp.Name, r, i)
					require.NoError(t, err)
					require.Equal(t, b, v, "%s window %d rank %d step %d", pp.Name, k, r, i)
				}
			}
		}
		_, _, err = c.Observe(ctx, lossesFor(p), nil, 0)
		require.NoError(t, err)
	}
}

// Property: with equal losses the offset stays 0, so the base is the
// schedule at every step, to its final value at the last step.
func TestControllerEqualLossesFollowTheSchedule(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ n, s, t, start int }{
		{4, 1000, 10, 300}, {7, 1003, 25, 0}, {2, 500, 100, 150}, {16, 120, 1, 40},
	} {
		e, err := builtin.NewExplorer(builtin.LR)
		require.NoError(t, err)
		cfg := fmt.Sprintf(`{"schedule": {"max_lr": 0.3, "div_factor": 20, "final_div_factor": 500}, "auto": {"start": %d}}`, tc.start)
		c, err := NewController(ctx, RunShape{Ranks: tc.n, TotalSteps: tc.s, WindowSteps: tc.t}, []NamedExplorer{{Name: "lr", Explorer: e, Config: []byte(cfg)}})
		require.NoError(t, err)
		oc := schedule.DefaultOneCycleConfig(0.3, tc.s)
		oc.DivFactor, oc.FinalDivFactor = 20, 500
		sched, err := schedule.NewOneCycle(oc)
		require.NoError(t, err)
		for range c.Windows() {
			p, _, err := c.Plan(ctx)
			require.NoError(t, err)
			for i, b := range p.Params[0].Base {
				want, err := sched.At(p.Start + i)
				require.NoError(t, err)
				require.Equal(t, want, b, "%+v step %d", tc, p.Start+i)
			}
			l := make([]float64, tc.n)
			for r := range l {
				l[r] = 0.7
			}
			fb, _, err := c.Observe(ctx, l, nil, 0)
			require.NoError(t, err)
			require.Zero(t, fb[0].Offset)
		}
		final := 0.3 / 20 / 500
		last, err := sched.At(tc.s - 1)
		require.NoError(t, err)
		assert.InEpsilon(t, final, last, 1e-9)
	}
}

// flaky wraps an explorer and fails one call at one window.
type flaky struct {
	hparam.Explorer
	failOp     string
	failWindow int
	calls      int
	nanBase    bool
}

var errBoom = errors.New("boom")

func (f *flaky) Plan(ctx context.Context, r hparam.WindowRequest) (hparam.WindowPlan, error) {
	f.calls++
	wp, err := f.Explorer.Plan(ctx, r)
	if f.failOp == "plan" && r.Window == f.failWindow {
		if f.nanBase {
			wp.Base[0] = math.NaN()
			return wp, err
		}
		return hparam.WindowPlan{}, errBoom
	}
	return wp, err
}

func (f *flaky) Observe(ctx context.Context, o hparam.Observation) (hparam.Feedback, error) {
	f.calls++
	if f.failOp == "observe" && o.Window == f.failWindow {
		return hparam.Feedback{}, errBoom
	}
	return f.Explorer.Observe(ctx, o)
}

func (f *flaky) SaveState(ctx context.Context) ([]byte, error) {
	if f.failOp == "save_state" {
		return nil, errBoom
	}
	return f.Explorer.SaveState(ctx)
}

func TestControllerFreezesFailingExplorer(t *testing.T) {
	ctx := context.Background()
	for _, f := range []*flaky{
		{failOp: "observe", failWindow: 3},
		{failOp: "plan", failWindow: 4},
		{failOp: "plan", failWindow: 4, nanBase: true},
	} {
		ex := threeExplorers(t, 0.1, 20)
		f.Explorer = ex[0].Explorer
		ex[0].Explorer = f
		c, err := NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10, Seed: 5}, ex)
		require.NoError(t, err)
		var frozenAt float64
		var spread hparam.Spread
		var events []Event
		for k := range 10 {
			p, ev, err := c.Plan(ctx)
			require.NoError(t, err)
			events = append(events, ev...)
			if len(ev) == 1 {
				frozenAt, spread = ev[0].Base, ev[0].Spread
			}
			fb, ev, err := c.Observe(ctx, lossesFor(p), nil, 0)
			require.NoError(t, err)
			events = append(events, ev...)
			if len(ev) == 1 {
				frozenAt, spread = ev[0].Base, ev[0].Spread
				assert.Equal(t, p.Params[0].Base[9], frozenAt, "frozen at the base it had")
			}
			if c.Frozen("lr") {
				assert.True(t, fb[0].Frozen)
				assert.Equal(t, frozenAt, fb[0].Base)
			}
			if p.Params[0].Frozen {
				for _, b := range p.Params[0].Base {
					require.Equal(t, frozenAt, b, "window %d", k)
				}
				assert.Equal(t, spread, p.Params[0].Spread)
			}
			assert.False(t, p.Params[1].Frozen || p.Params[2].Frozen)
		}
		require.Len(t, events, 1, "%s", f.failOp)
		assert.Equal(t, f.failOp, events[0].Op)
		assert.Equal(t, "lr", events[0].Param)
		assert.Equal(t, f.failWindow, events[0].Window)
		assert.Equal(t, hparam.Spread{Kind: hparam.Multiplicative, Alpha: 0.1}, spread)
		assert.Contains(t, events[0].String(), "frozen at")
		if !f.nanBase {
			assert.ErrorIs(t, events[0].Err, errBoom)
		}
		calls := 2*f.failWindow + 2 // setup's plan of window 0 (admit.go), plans 0..w, observations 0..w-1
		if f.failOp == "observe" {
			calls++
		}
		assert.Equal(t, calls, f.calls, "never called after it failed")
	}

	// Failing the very first plan leaves nothing to freeze at: the setup
	// (which plans window 0 to check it) fails.
	ex := threeExplorers(t, 0.1, 20)
	ex[1].Explorer = &flaky{Explorer: ex[1].Explorer, failOp: "plan", failWindow: 0}
	_, err := NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10}, ex)
	assert.ErrorIs(t, err, ErrExplorer)
	assert.ErrorIs(t, err, errBoom)
}

func TestControllerInitErrors(t *testing.T) {
	ctx := context.Background()
	ex := threeExplorers(t, 0.1, 20)
	ex[2].Config = []byte(`{"schedule": 0.01, "spread": {"alpha": -1}}`)
	_, err := NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10}, ex)
	assert.ErrorIs(t, err, ErrExplorer)
	assert.ErrorIs(t, err, hparam.ErrInvalid)
	assert.ErrorContains(t, err, "weight_decay: init: spread.alpha")

	ex = threeExplorers(t, 0.1, 20)
	ex[1].Name = "lr"
	_, err = NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10}, ex)
	assert.ErrorIs(t, err, hparam.ErrInvalid)
	_, err = NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 0}, nil)
	assert.ErrorIs(t, err, hparam.ErrInvalid)
}

// A checkpoint between windows, the engine's, restores to the same plans:
// it holds the generator before the permutations Observe drew ahead.
func TestControllerStateBetweenWindows(t *testing.T) {
	ctx := context.Background()
	shape := RunShape{Ranks: 8, TotalSteps: 200, WindowSteps: 10, Seed: 3}
	newC := func() *Controller {
		c, err := NewController(ctx, shape, threeExplorers(t, 0.1, 50))
		require.NoError(t, err)
		return c
	}
	a := newC()
	runWindows(t, a, 0, 7, lossesFor)
	st, _, err := a.SaveState(ctx)
	require.NoError(t, err)
	b := newC()
	_, err = b.LoadState(ctx, st)
	require.NoError(t, err)
	pa, fa := runWindows(t, a, 7, 20, lossesFor)
	pb, fb := runWindows(t, b, 7, 20, lossesFor)
	assert.Equal(t, pa, pb, "bit-identical plans after the restore")
	assert.Equal(t, fa, fb)
}

func TestControllerStateRoundTrip(t *testing.T) {
	ctx := context.Background()
	shape := RunShape{Ranks: 8, TotalSteps: 200, WindowSteps: 10, Seed: 3}
	newC := func(failSave bool) *Controller {
		ex := threeExplorers(t, 0.1, 50)
		if failSave {
			ex[2].Explorer = &flaky{Explorer: ex[2].Explorer, failOp: "save_state"}
		}
		c, err := NewController(ctx, shape, ex)
		require.NoError(t, err)
		return c
	}
	a := newC(true)
	runWindows(t, a, 0, 7, lossesFor)
	// A checkpoint with window 7 already planned restores to the same plan.
	pending, _, err := a.Plan(ctx)
	require.NoError(t, err)
	st, ev, err := a.SaveState(ctx)
	require.NoError(t, err)
	require.Len(t, ev, 1, "weight_decay's SaveState fails and it is frozen")
	assert.True(t, a.Frozen("weight_decay"))

	b := newC(false)
	ev, err = b.LoadState(ctx, st)
	require.NoError(t, err)
	require.Empty(t, ev)
	assert.True(t, b.Frozen("weight_decay"))
	assert.Equal(t, 7, b.Next())
	restored, _, err := b.Plan(ctx)
	require.NoError(t, err)
	assert.Equal(t, pending.Params[:2], restored.Params[:2])
	assert.Equal(t, pending.Params[2].Slots, restored.Params[2].Slots)

	_, _, err = a.Observe(ctx, lossesFor(pending), nil, 0)
	require.NoError(t, err)
	_, _, err = b.Observe(ctx, lossesFor(restored), nil, 0)
	require.NoError(t, err)
	pa, fa := runWindows(t, a, 8, 20, lossesFor)
	pb, fb := runWindows(t, b, 8, 20, lossesFor)
	assert.Equal(t, pa, pb, "bit-identical plans after the restore")
	assert.Equal(t, fa, fb)

	// Garbage never panics; every truncation is an error.
	for i := range st {
		c := newC(false)
		_, err := c.LoadState(ctx, st[:i])
		require.ErrorIs(t, err, hparam.ErrDecode, "prefix %d", i)
	}
	ex := threeExplorers(t, 0.1, 50)[:2]
	c, err := NewController(ctx, shape, ex)
	require.NoError(t, err)
	_, err = c.LoadState(ctx, st)
	assert.ErrorIs(t, err, hparam.ErrDecode, "other explorers")
}

// lastValues, one pass over the ranks, gives exactly ParamPlan.Value at the
// window's last step for every spread kind, base sign and bounds that clamp
// neither, one or both ends.
func TestLastValuesMatchPlanValue(t *testing.T) {
	slots := []uint32{4, 0, 8, 1, 7, 2, 6, 3, 5}
	spreads := []hparam.Spread{{Kind: hparam.Multiplicative, Alpha: 0.5}, {Kind: hparam.Geometric, Alpha: 2}, {Kind: hparam.Additive, Alpha: 0.3}}
	bounds := []hparam.Bounds{{Lower: -10, Upper: 10}, {Lower: 0.9, Upper: 10}, {Lower: -10, Upper: 1.1}, {Lower: 0.95, Upper: 1.05}, {Lower: 1, Upper: 1}}
	var p param
	for _, sp := range spreads {
		for _, b := range bounds {
			for _, base := range []float64{1, -1, 0, 3.7} {
				pp := plan.ParamPlan{Base: []float64{5, base}, Spread: sp, Bounds: b, Slots: slots}
				got := p.lastValues(&pp)
				for r := range slots {
					require.Equal(t, math.Float64bits(pp.Value(r, 1)), math.Float64bits(got[r]), "%v %v base %v rank %d", sp, b, base, r)
				}
			}
		}
	}
}

// A workload that cannot probe gets annealing windows instead, and a notice.
func TestControllerProbeOrAnneal(t *testing.T) {
	ctx := context.Background()
	for _, canProbe := range []bool{true, false} {
		e, err := builtin.NewExplorer(builtin.LR)
		require.NoError(t, err)
		c, err := NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10, Probe: canProbe},
			[]NamedExplorer{{Name: "lr", Explorer: e, Config: []byte(`{"schedule": {"max_lr": 0.01}}`)}})
		require.NoError(t, err)
		p, _, err := c.Plan(ctx)
		require.NoError(t, err)
		assert.Equal(t, canProbe, p.Probe)
		assert.Equal(t, !canProbe, p.Anneal)
		b, err := p.MarshalBinary()
		require.NoError(t, err)
		var q plan.Plan
		require.NoError(t, q.UnmarshalBinary(b))
		assert.Equal(t, canProbe, q.Probe, "the flag crosses the broadcast")
		assert.Equal(t, !canProbe, q.Anneal, "the flag crosses the broadcast")
		if canProbe {
			assert.Empty(t, c.Notices())
		} else {
			n := c.Notices()
			require.Len(t, n, 1)
			assert.Contains(t, n[0], "training losses at the end of windows whose learning rates anneal")
			assert.Contains(t, n[0], "hdet.probe_dataset(model, dataset)", "what to do about it")
			assert.Empty(t, c.Notices(), "said once")
		}
	}
}
