package controller

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/hparam/builtin"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The controller ends the search at the first boundary where no explorer
// still searches, commits every explorer and plans the main pass from
// window 0: no spread, no probe, every rank in its own slot, and no call
// to the explorers' Observe. A checkpoint in the main pass resumes it.
func TestControllerCommitsAndPlansTheMainPass(t *testing.T) {
	ctx := context.Background()
	mk := func() *Controller {
		lr := builtinNamed(t, builtin.LR, "lr", fmtCfg(restartLR, ""))
		drop := builtinNamed(t, builtin.Dropout, "dropout", `{"schedule": 0.1, "auto": {"enabled": false}}`)
		c, err := NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10, Seed: 3}, []NamedExplorer{lr, drop})
		require.NoError(t, err)
		return c
	}
	c := mk()
	runWindows(t, c, 0, 4, lossesFor)
	assert.Equal(t, plan.PassMain, c.Pass(), "committed after window 3 (the boundary at step 40)")
	assert.Equal(t, 40, c.SearchEnd())
	cs := c.Commitments()
	require.Len(t, cs, 2)
	assert.Equal(t, "lr", cs[0].Name)
	assert.InDelta(t, 0.01*math.Exp(cs[0].Offset), cs[0].Value, 1e-15)
	assert.Equal(t, ParamCommit{Name: "dropout", Commitment: hparam.Commitment{Value: 0.1}}, cs[1])
	assert.Empty(t, c.Notices(), "4 search windows are enough")

	st, _, err := c.SaveState(ctx)
	require.NoError(t, err)
	plans, _ := runWindows(t, c, 0, 10, lossesFor)
	for k, b := range plans {
		var p plan.Plan
		require.NoError(t, p.UnmarshalBinary(b))
		assert.Equal(t, plan.PassMain, p.Pass)
		assert.False(t, p.Probe)
		for _, pp := range p.Params {
			assert.Zero(t, pp.Spread.Alpha, "window %d %s", k, pp.Name)
			assert.Equal(t, []uint32{0, 1, 2, 3}, pp.Slots)
		}
	}
	_, _, err = c.Plan(ctx)
	assert.ErrorIs(t, err, hparam.ErrOrder, "the main pass ends with the run")

	d := mk()
	_, err = d.LoadState(ctx, st)
	require.NoError(t, err)
	assert.Equal(t, plan.PassMain, d.Pass())
	again, _ := runWindows(t, d, 0, 10, lossesFor)
	assert.Equal(t, plans, again, "a main-pass checkpoint plans the same main pass")
}

// An explorer that fails its Commit is frozen at its base: it commits that
// base, and the main pass goes on.
func TestControllerFreezesAnExplorerThatFailsToCommit(t *testing.T) {
	ctx := context.Background()
	lr := builtinNamed(t, builtin.LR, "lr", fmtCfg(restartLR, ""))
	c, err := NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10, Seed: 3},
		[]NamedExplorer{{Name: "lr", Explorer: &noCommit{lr.Explorer}, Config: lr.Config}})
	require.NoError(t, err)
	for range 4 {
		_, _, err := c.Plan(ctx)
		require.NoError(t, err)
		_, evs, err := c.Observe(ctx, []float64{1, 1, 1, 1}, nil, 0)
		require.NoError(t, err)
		if c.Pass() == plan.PassMain {
			require.Len(t, evs, 1)
			assert.Equal(t, "commit", evs[0].Op)
		}
	}
	require.Equal(t, plan.PassMain, c.Pass())
	assert.True(t, c.Commitments()[0].Frozen)
	p, _, err := c.Plan(ctx)
	require.NoError(t, err)
	assert.True(t, p.Params[0].Frozen)
	assert.Zero(t, p.Params[0].Spread.Alpha)
}

type noCommit struct{ hparam.Explorer }

func (noCommit) Commit(context.Context) (hparam.Commitment, error) {
	return hparam.Commitment{}, errors.New("unimplemented")
}

// restartLR is OneCycle at max_lr 0.01 over 100 steps of 10 (peak at step
// 29), searching until 0.4 of the run: the boundary at step 40.
const restartLR = `{"schedule": {"kind": "onecycle", "max_lr": 0.01}, "spread": {"alpha": 0.5}, "auto": {"signal": "train", "until": 0.4%s}}`

func fmtCfg(format, extra string) string { return fmt.Sprintf(format, extra) }

// A search pass of fewer than minSearchWindows windows ends with a notice
// that names its windows and the lever (a shorter window).
func TestControllerNoticesAShortSearchPass(t *testing.T) {
	ctx := context.Background()
	lr := builtinNamed(t, builtin.LR, "lr", fmtCfg(restartLR, ""))
	c, err := NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 20, Seed: 3}, []NamedExplorer{lr})
	require.NoError(t, err)
	runWindows(t, c, 0, 2, lossesFor)
	require.Equal(t, plan.PassMain, c.Pass(), "committed after window 1 (the boundary at step 40)")
	n := c.Notices()
	require.Len(t, n, 1)
	assert.Contains(t, n[0], "after 2 windows of 20 steps")
	assert.Contains(t, n[0], "shorter window")
	assert.Empty(t, c.Notices(), "said once")
}

// With a main-pass window of 3T (RunShape.MainWindowSteps) the main pass
// is planned in windows of 30 steps, the last one cut at the run's end,
// each the explorers' plans of the T-step windows it spans put together:
// the same values at every step as with T-step windows. A state saved in
// the main pass resumes it in the same windows; a main window that is not
// a multiple of T is refused.
func TestControllerPlansALongerMainWindow(t *testing.T) {
	ctx := context.Background()
	mk := func(mainWindow int) *Controller {
		lr := builtinNamed(t, builtin.LR, "lr", fmtCfg(restartLR, ""))
		c, err := NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10, MainWindowSteps: mainWindow, Seed: 3}, []NamedExplorer{lr})
		require.NoError(t, err)
		return c
	}
	bases := func(plans [][]byte) (starts, steps []int, base []float64) {
		for _, b := range plans {
			var p plan.Plan
			require.NoError(t, p.UnmarshalBinary(b))
			require.Equal(t, plan.PassMain, p.Pass)
			starts, steps, base = append(starts, p.Start), append(steps, p.Steps), append(base, p.Params[0].Base...)
		}
		return starts, steps, base
	}
	short, long := mk(0), mk(30)
	runWindows(t, short, 0, 4, lossesFor)
	runWindows(t, long, 0, 4, lossesFor)
	require.Equal(t, plan.PassMain, long.Pass())
	st, _, err := long.SaveState(ctx)
	require.NoError(t, err)
	shortPlans, _ := runWindows(t, short, 0, 10, lossesFor)
	longPlans, _ := runWindows(t, long, 0, 4, lossesFor)
	_, _, wantBase := bases(shortPlans)
	starts, steps, base := bases(longPlans)
	assert.Equal(t, []int{0, 30, 60, 90}, starts)
	assert.Equal(t, []int{30, 30, 30, 10}, steps)
	assert.Equal(t, wantBase, base, "the same values at every step")
	_, _, err = long.Plan(ctx)
	assert.ErrorIs(t, err, hparam.ErrOrder, "the main pass ends with the run")

	resumed := mk(30)
	_, err = resumed.LoadState(ctx, st)
	require.NoError(t, err)
	again, _ := runWindows(t, resumed, 0, 4, lossesFor)
	assert.Equal(t, longPlans, again, "a main-pass state plans the same windows")

	_, err = NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10, MainWindowSteps: 25, Seed: 3}, nil)
	assert.ErrorIs(t, err, hparam.ErrInvalid)
}

// levels records the learning rate each observation carried.
type levels struct {
	hparam.Explorer
	got []float64
}

func (l *levels) Observe(ctx context.Context, o hparam.Observation) (hparam.Feedback, error) {
	l.got = append(l.got, o.Level)
	return l.Explorer.Observe(ctx, o)
}

// The workload's own learning rate at each window's end reaches every
// explorer with the window's losses (the no-harm rule's evidence reads it).
func TestControllerHandsTheLevelToTheExplorers(t *testing.T) {
	ctx := context.Background()
	lr := builtinNamed(t, builtin.LR, "lr", fmtCfg(restartLR, ""))
	rec := &levels{Explorer: lr.Explorer}
	c, err := NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10, Seed: 3},
		[]NamedExplorer{{Name: "lr", Explorer: rec, Config: lr.Config}})
	require.NoError(t, err)
	for k := range 3 {
		p, _, err := c.Plan(ctx)
		require.NoError(t, err)
		_, _, err = c.Observe(ctx, lossesFor(p), nil, 0.001*float64(k+1))
		require.NoError(t, err)
	}
	assert.Equal(t, []float64{0.001, 0.002, 0.003}, rec.got)
}

// A search pass that the run restarts says so in its plans (Plan.Search:
// a worker script's replicas share their batches there); the main pass,
// a run whose search lasts to its end, one that asks for no search (one
// pass) and one with a probe do not.
func TestControllerPlansSaySearchWhereTheRunRestarts(t *testing.T) {
	ctx := context.Background()
	searchOfRun := func(cfg string, windows int, probe bool) []bool {
		lr := builtinNamed(t, builtin.LR, "lr", cfg)
		c, err := NewController(ctx, RunShape{Ranks: 4, TotalSteps: 100, WindowSteps: 10, Seed: 3, Probe: probe}, []NamedExplorer{lr})
		require.NoError(t, err)
		var out []bool
		for range windows {
			p, _, err := c.Plan(ctx)
			require.NoError(t, err)
			out = append(out, p.Search)
			b, err := p.MarshalBinary()
			require.NoError(t, err)
			var q plan.Plan
			require.NoError(t, q.UnmarshalBinary(b))
			require.Equal(t, p.Search, q.Search, "the flag crosses the wire")
			_, _, err = c.Observe(ctx, lossesFor(p), nil, 0)
			require.NoError(t, err)
		}
		return out
	}
	searchOf := func(cfg string, windows int) []bool { return searchOfRun(cfg, windows, false) }
	assert.Equal(t, []bool{true, true, true, true, false, false}, searchOf(fmtCfg(restartLR, ""), 6),
		"4 search windows, then the main pass")
	assert.Equal(t, []bool{false, false, false, false, false, false}, searchOfRun(fmtCfg(restartLR, ""), 6, true),
		"a run with a probe: its replicas keep their own batches")
	assert.Equal(t, []bool{false, false, false}, searchOf(fmtCfg(restartLR, `, "commit": "continue"`), 3),
		"auto.commit continue: one pass")
	assert.Equal(t, []bool{false, false, false},
		searchOf(`{"schedule": {"kind": "onecycle", "max_lr": 0.01}, "spread": {"alpha": 0.5}, "auto": {"enabled": false}}`, 3),
		"the auto phase off: one pass")
	assert.Equal(t, []bool{false, false, false},
		searchOf(`{"schedule": {"kind": "onecycle", "max_lr": 0.01}, "spread": {"alpha": 0.5}, "auto": {"signal": "train", "until": 1}}`, 3),
		"a search to the run's end keeps its model: one pass")
}
