package hparam

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// restartLR is OneCycle at max_lr 0.01 over 100 steps of 10 (peak at step
// 29), searching until 0.4 of the run: the boundary at step 40.
const restartLR = `{"schedule": {"kind": "onecycle", "max_lr": 0.01}, "spread": {"alpha": 0.5}, "auto": {"signal": "train", "until": 0.4%s}}`

func TestBuiltinSearchesThenCommits(t *testing.T) {
	ctx := context.Background()
	e, err := initBuiltin(t, BuiltinLR, fmtCfg(restartLR, ""), lrSetup)
	require.NoError(t, err)
	higher := func(x float64) float64 { return (x - 0.4) * (x - 0.4) } // the best is 1.5x higher
	var states []SearchState
	for k := range 5 {
		_, fb := window(t, e, k, higher)
		states = append(states, fb.Search)
	}
	assert.Equal(t, []SearchState{Searching, Searching, Searching, SearchDone, SearchDone}, states,
		"searching while the boundary is before 40% of the run")

	c, err := e.Commit(ctx)
	require.NoError(t, err)
	assert.Greater(t, c.Offset, 0.1, "it learnt to go higher")
	assert.InDelta(t, 0.01*math.Exp(c.Offset), c.Value, 1e-15, "the committed value is max_lr times exp(u)")
	again, err := e.Commit(ctx)
	require.NoError(t, err)
	assert.Equal(t, c, again, "a second commit answers the same")

	// The main pass: any window, schedule times exp(u), no spread, no probe.
	maxLR := 0.01
	sched, err := (ScheduleSpec{MaxLR: &maxLR}).Build(KindOneCycle, 100)
	require.NoError(t, err)
	for _, k := range []int{0, 7, 3} {
		wp, err := e.Plan(ctx, WindowRequest{Window: k, Start: 10 * k, Steps: 10})
		require.NoError(t, err)
		assert.Zero(t, wp.Spread.Alpha)
		assert.False(t, wp.Probe)
		for i, b := range wp.Base {
			s, err := sched.At(10*k + i)
			require.NoError(t, err)
			assert.InDelta(t, s*math.Exp(c.Offset), b, 1e-15, "window %d step %d", k, i)
		}
	}
	fb, err := e.Observe(ctx, Observation{Window: 9, Values: make([]float64, 4), Losses: []float64{1, 2, 3, 4}})
	require.NoError(t, err)
	assert.Equal(t, c.Offset, fb.Offset, "the main pass learns nothing")

	// The commit survives a checkpoint.
	st, err := e.SaveState(ctx)
	require.NoError(t, err)
	f, err := initBuiltin(t, BuiltinLR, fmtCfg(restartLR, ""), lrSetup)
	require.NoError(t, err)
	require.NoError(t, f.LoadState(ctx, st))
	wp, err := f.Plan(ctx, WindowRequest{Window: 7, Start: 70, Steps: 10})
	require.NoError(t, err)
	assert.Zero(t, wp.Spread.Alpha, "restored committed")
}

func TestBuiltinSearchStates(t *testing.T) {
	for _, c := range []struct {
		name, kind, cfg string
		want            SearchState
	}{
		{"continue", BuiltinLR, fmtCfg(restartLR, `, "commit": "continue"`), SearchNone},
		{"paper form", BuiltinLR, `{"schedule": {"max_lr": 0.01}, "auto": {"form": "paper"}}`, SearchNone},
		{"auto off: nothing to search", BuiltinDropout, `{"schedule": 0.1, "auto": {"enabled": false}}`, SearchNone},
		{"auto off, restart asked for", BuiltinDropout, `{"schedule": 0.1, "auto": {"enabled": false, "commit": "restart", "until": 0.2}}`, SearchDone},
		{"a constant searches a quarter of the run by default", BuiltinWeightDecay, `{"schedule": 0.01}`, SearchDone},
		{"a longer search, asked for", BuiltinWeightDecay, `{"schedule": 0.01, "auto": {"until": 0.35}}`, Searching},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := lrSetup
			s.Name = map[string]string{BuiltinLR: "lr", BuiltinDropout: "dropout", BuiltinWeightDecay: "weight_decay"}[c.kind]
			e, err := initBuiltin(t, c.kind, c.cfg, s)
			require.NoError(t, err)
			var fb Feedback
			for k := range 3 {
				_, fb = window(t, e, k, func(x float64) float64 { return x * x })
			}
			assert.Equal(t, c.want, fb.Search, "after three windows")
		})
	}
	_, err := initBuiltin(t, BuiltinLR, `{"schedule": {"max_lr": 0.01}, "auto": {"form": "paper", "commit": "restart"}}`, lrSetup)
	assert.ErrorContains(t, err, "auto.commit: form paper only continues")
	_, err = initBuiltin(t, BuiltinLR, fmtCfg(restartLR, `, "commit": "later"`), lrSetup)
	assert.ErrorContains(t, err, `auto.commit: must be one of [restart continue], got "later"`)

	paper, err := initBuiltin(t, BuiltinLR, `{"schedule": {"max_lr": 0.01}, "auto": {"form": "paper"}}`, lrSetup)
	require.NoError(t, err)
	_, err = paper.Commit(context.Background())
	assert.ErrorIs(t, err, ErrOrder)
}

// The controller ends the search at the first boundary where no explorer
// still searches, commits every explorer and plans the main pass from
// window 0: no spread, no probe, every rank in its own slot, and no call
// to the explorers' Observe. A checkpoint in the main pass resumes it.
func TestControllerCommitsAndPlansTheMainPass(t *testing.T) {
	ctx := context.Background()
	mk := func() *Controller {
		lr := builtinNamed(t, BuiltinLR, "lr", fmtCfg(restartLR, ""))
		drop := builtinNamed(t, BuiltinDropout, "dropout", `{"schedule": 0.1, "auto": {"enabled": false}}`)
		c, err := NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10, Seed: 3}, []NamedExplorer{lr, drop})
		require.NoError(t, err)
		return c
	}
	c := mk()
	runWindows(t, c, 0, 4, lossesFor)
	assert.Equal(t, PassMain, c.Pass(), "committed after window 3 (the boundary at step 40)")
	assert.Equal(t, 40, c.SearchEnd())
	cs := c.Commitments()
	require.Len(t, cs, 2)
	assert.Equal(t, "lr", cs[0].Name)
	assert.InDelta(t, 0.01*math.Exp(cs[0].Offset), cs[0].Value, 1e-15)
	assert.Equal(t, ParamCommit{Name: "dropout", Commitment: Commitment{Value: 0.1}}, cs[1])

	st, _, err := c.SaveState(ctx)
	require.NoError(t, err)
	plans, _ := runWindows(t, c, 0, 10, lossesFor)
	for k, b := range plans {
		var p Plan
		require.NoError(t, p.UnmarshalBinary(b))
		assert.Equal(t, PassMain, p.Pass)
		assert.False(t, p.Probe)
		for _, pp := range p.Params {
			assert.Zero(t, pp.Spread.Alpha, "window %d %s", k, pp.Name)
			assert.Equal(t, []uint32{0, 1, 2, 3}, pp.Slots)
		}
	}
	_, _, err = c.Plan(ctx)
	assert.ErrorIs(t, err, ErrOrder, "the main pass ends with the run")

	d := mk()
	_, err = d.LoadState(ctx, st)
	require.NoError(t, err)
	assert.Equal(t, PassMain, d.Pass())
	again, _ := runWindows(t, d, 0, 10, lossesFor)
	assert.Equal(t, plans, again, "a main-pass checkpoint plans the same main pass")
}

// An explorer that fails its Commit is frozen at its base: it commits that
// base, and the main pass goes on.
func TestControllerFreezesAnExplorerThatFailsToCommit(t *testing.T) {
	ctx := context.Background()
	lr := builtinNamed(t, BuiltinLR, "lr", fmtCfg(restartLR, ""))
	c, err := NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10, Seed: 3},
		[]NamedExplorer{{Name: "lr", Explorer: &noCommit{lr.Explorer}, Config: lr.Config}})
	require.NoError(t, err)
	for range 4 {
		_, _, err := c.Plan(ctx)
		require.NoError(t, err)
		_, evs, err := c.Observe(ctx, []float64{1, 1, 1, 1}, nil)
		require.NoError(t, err)
		if c.Pass() == PassMain {
			require.Len(t, evs, 1)
			assert.Equal(t, "commit", evs[0].Op)
		}
	}
	require.Equal(t, PassMain, c.Pass())
	assert.True(t, c.Commitments()[0].Frozen)
	p, _, err := c.Plan(ctx)
	require.NoError(t, err)
	assert.True(t, p.Params[0].Frozen)
	assert.Zero(t, p.Params[0].Spread.Alpha)
}

type noCommit struct{ Explorer }

func (noCommit) Commit(context.Context) (Commitment, error) {
	return Commitment{}, errors.New("unimplemented")
}

func TestPlanCarriesThePass(t *testing.T) {
	p := Plan{Window: 2, Start: 20, Steps: 2, Pass: PassMain,
		Params: []ParamPlan{{Name: "lr", Base: []float64{1, 2}, Spread: Spread{Kind: Multiplicative}, Bounds: Bounds{0, 10}, Slots: []uint32{1, 0}}}}
	b, err := p.MarshalBinary()
	require.NoError(t, err)
	var q Plan
	require.NoError(t, q.UnmarshalBinary(b))
	assert.Equal(t, p, q)
}

func fmtCfg(format, extra string) string { return fmt.Sprintf(format, extra) }
