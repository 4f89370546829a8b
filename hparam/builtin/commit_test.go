package builtin

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/hparam/schedule"
)

// restartLR is OneCycle at max_lr 0.01 over 100 steps of 10 (peak at step
// 29), searching until 0.4 of the run: the boundary at step 40.
const restartLR = `{"schedule": {"kind": "onecycle", "max_lr": 0.01}, "spread": {"alpha": 0.5}, "auto": {"signal": "train", "until": 0.4%s}}`

func TestBuiltinSearchesThenCommits(t *testing.T) {
	ctx := context.Background()
	e, err := initBuiltin(t, LR, fmtCfg(restartLR, ""), lrSetup)
	require.NoError(t, err)
	higher := func(x float64) float64 { return (x - 0.4) * (x - 0.4) } // the best is 1.5x higher
	var states []hparam.SearchState
	for k := range 5 {
		_, fb := window(t, e, k, higher)
		states = append(states, fb.Search)
	}
	assert.Equal(t, []hparam.SearchState{hparam.Searching, hparam.Searching, hparam.Searching, hparam.SearchDone, hparam.SearchDone}, states,
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
	sched, err := (schedule.Spec{MaxLR: &maxLR}).Build(schedule.KindOneCycle, 100)
	require.NoError(t, err)
	for _, k := range []int{0, 7, 3} {
		wp, err := e.Plan(ctx, hparam.WindowRequest{Window: k, Start: 10 * k, Steps: 10})
		require.NoError(t, err)
		assert.Zero(t, wp.Spread.Alpha)
		assert.False(t, wp.Probe)
		for i, b := range wp.Base {
			s, err := sched.At(10*k + i)
			require.NoError(t, err)
			assert.InDelta(t, s*math.Exp(c.Offset), b, 1e-15, "window %d step %d", k, i)
		}
	}
	fb, err := e.Observe(ctx, hparam.Observation{Window: 9, Values: make([]float64, 4), Losses: []float64{1, 2, 3, 4}})
	require.NoError(t, err)
	assert.Equal(t, c.Offset, fb.Offset, "the main pass learns nothing")

	// The commit survives a checkpoint.
	st, err := e.SaveState(ctx)
	require.NoError(t, err)
	f, err := initBuiltin(t, LR, fmtCfg(restartLR, ""), lrSetup)
	require.NoError(t, err)
	require.NoError(t, f.LoadState(ctx, st))
	wp, err := f.Plan(ctx, hparam.WindowRequest{Window: 7, Start: 70, Steps: 10})
	require.NoError(t, err)
	assert.Zero(t, wp.Spread.Alpha, "restored committed")
}

func TestBuiltinSearchStates(t *testing.T) {
	for _, c := range []struct {
		name, kind, cfg string
		want            hparam.SearchState
	}{
		{"continue", LR, fmtCfg(restartLR, `, "commit": "continue"`), hparam.SearchNone},
		{"paper form", LR, `{"schedule": {"max_lr": 0.01}, "auto": {"form": "paper"}}`, hparam.SearchNone},
		{"auto off: nothing to search", Dropout, `{"schedule": 0.1, "auto": {"enabled": false}}`, hparam.SearchNone},
		{"auto off, restart asked for", Dropout, `{"schedule": 0.1, "auto": {"enabled": false, "commit": "restart", "until": 0.2}}`, hparam.SearchDone},
		{"a constant searches a quarter of the run by default", WeightDecay, `{"schedule": 0.01}`, hparam.SearchDone},
		{"a longer search, asked for", WeightDecay, `{"schedule": 0.01, "auto": {"until": 0.35}}`, hparam.Searching},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := lrSetup
			s.Name = map[string]string{LR: "lr", Dropout: "dropout", WeightDecay: "weight_decay"}[c.kind]
			e, err := initBuiltin(t, c.kind, c.cfg, s)
			require.NoError(t, err)
			var fb hparam.Feedback
			for k := range 3 {
				_, fb = window(t, e, k, func(x float64) float64 { return x * x })
			}
			assert.Equal(t, c.want, fb.Search, "after three windows")
		})
	}
	_, err := initBuiltin(t, LR, `{"schedule": {"max_lr": 0.01}, "auto": {"form": "paper", "commit": "restart"}}`, lrSetup)
	assert.ErrorContains(t, err, "auto.commit: form paper only continues")
	_, err = initBuiltin(t, LR, fmtCfg(restartLR, `, "commit": "later"`), lrSetup)
	assert.ErrorContains(t, err, `auto.commit: must be one of [restart continue], got "later"`)

	paper, err := initBuiltin(t, LR, `{"schedule": {"max_lr": 0.01}, "auto": {"form": "paper"}}`, lrSetup)
	require.NoError(t, err)
	_, err = paper.Commit(context.Background())
	assert.ErrorIs(t, err, hparam.ErrOrder)
}

func fmtCfg(format, extra string) string { return fmt.Sprintf(format, extra) }

// A run that restarts searches the whole windows in a quarter of the run,
// at most MaxSearchWindows: the share falls with the run's length, and never
// passes a quarter. A warm-up ends it sooner (the first boundary after it),
// never later.
func TestBuiltinSearchLength(t *testing.T) {
	constant := `{"schedule": 0.01}`
	warmup := func(pct float64) string {
		return fmt.Sprintf(`{"schedule": {"kind": "onecycle", "max_lr": 0.01, "pct_start": %g}}`, pct)
	}
	for _, c := range []struct {
		steps   int
		cfg     string
		windows int
	}{
		{30, constant, 1}, {100, constant, 2}, {404, constant, 10}, {640, constant, 16}, {10000, constant, 16},
		{1000, warmup(0.05), 6},    // the boundary after step 50, window 5, is the first update past the warm-up
		{300, warmup(0.3), 7},      // through step 90 would be 10 windows (30 %); a quarter holds 7
		{1000, warmup(0.3), 16},    // OneCycleLR's default warm-up, longer than the search may be
		{10000, warmup(0.02), 16},  // through step 200 would be 21 windows; 16 at most
		{10000, warmup(0.005), 6},  // nanoGPT's short warm-up: the search ends after it
		{100000, warmup(0.25), 16}, // 0.16 % of the run
	} {
		s := hparam.Setup{Name: "weight_decay", Ranks: 4, TotalSteps: c.steps, WindowSteps: 10, Seed: 1}
		e, err := initBuiltin(t, WeightDecay, c.cfg, s)
		require.NoError(t, err)
		searched := 1 // the feedback after window k says whether window k+1 searches
		for k := 0; (k+1)*s.WindowSteps < s.TotalSteps; k++ {
			if _, fb := window(t, e, k, func(x float64) float64 { return x * x }); fb.Search != hparam.Searching {
				break
			}
			searched++
		}
		assert.Equal(t, c.windows, searched, "%d steps in windows of 10, %s", c.steps, c.cfg)
		if c.windows > 1 {
			assert.LessOrEqual(t, searched*s.WindowSteps*4, c.steps, "%d steps: at most a quarter", c.steps)
		}
		if c.steps >= 10000 {
			assert.LessOrEqual(t, searched*s.WindowSteps*10, c.steps, "%d steps: at most a tenth", c.steps)
		}
	}
}
