package engine

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam/builtin"
	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/controller"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/hdet-dev/hdet/mpi/reduce"
)

func TestMarkDiverged(t *testing.T) {
	nan := math.NaN()
	all := []bool{true, true, true, true}
	for name, tc := range map[string]struct {
		losses  []float64
		healthy []bool
		factor  float64
		last    float64 // the previous window's median, 0: none
		want    []int
	}{
		"one exploded":         {[]float64{1, 1.1, 50, 0.9}, all, 10, 0, []int{2}},
		"just under the limit": {[]float64{1, 1, 9.9, 1}, all, 10, 0, nil},
		"NaN rank ignored":     {[]float64{1, nan, 20, 1}, []bool{true, false, true, true}, 10, 0, []int{2}},
		"disabled":             {[]float64{1, 1, 500, 1}, all, 0, 0, nil},
		"non-positive median":  {[]float64{0, 0, 5, 0}, all, 10, 0, nil},
		"all equal":            {[]float64{2, 2, 2, 2}, all, 10, 0, nil},
		// A replica at chance while another half blew up: 4x the median
		// (0.58), 15x where the window started.
		"against the previous window":           {[]float64{0.17, 2.3, 0.31, 0.86}, all, 10, 0.15, []int{1}},
		"the same without it":                   {[]float64{0.17, 2.3, 0.31, 0.86}, all, 10, 0, nil},
		"a previous median above this window's": {[]float64{1, 1, 9.9, 1}, all, 10, 5, nil},
	} {
		t.Run(name, func(t *testing.T) {
			losses, healthy := append([]float64(nil), tc.losses...), append([]bool(nil), tc.healthy...)
			evs := markDiverged(Layout{World: len(losses), Size: 1}, divergence{losses, tc.last, "the previous window's", "probe loss", tc.factor, "train.divergence_factor"}, healthy, 4)
			var got []int
			for _, e := range evs {
				require.NotNil(t, e.Rank)
				assert.Equal(t, metrics.EventUnhealthy, e.Kind)
				assert.Contains(t, e.Message, "probe loss")
				assert.Contains(t, e.Message, "diverged")
				got = append(got, *e.Rank)
			}
			assert.Equal(t, tc.want, got)
			for _, r := range tc.want {
				assert.False(t, healthy[r])
				assert.True(t, math.IsNaN(losses[r]))
			}
		})
	}
}

// A window that probed also checks the probe losses, and a replica whose
// probe diverged loses its window loss too; the blow-up check takes the
// median before diverged replicas were left out; the references carry to
// the next window.
func TestCheckDivergence(t *testing.T) {
	l := &loop{o: Options{DivergenceFactor: 10, CheckpointDir: t.TempDir(), MaxRollbacks: 3}, lay: Layout{World: 4, Size: 1},
		guard: checkpoint.Guard{LastMedian: 0.24, LastProbe: 0.17}} // a previous window's
	window := func(losses, probes []float64) *window {
		w := &window{index: 3, losses: losses, probes: probes, healthyRanks: []bool{true, true, true, true}, nHealthy: 4}
		w.plan.Probe = probes != nil
		return w
	}
	w := window([]float64{0.4, 1.9, 0.25, 0.7}, []float64{0.16, 2.3, 0.14, 0.38})
	l.checkDivergence(w)
	// Measured on a PyTorch ConvNet: rank 1's window loss is 3.5x the
	// median, 7.9x the previous window's; its probe (chance) is 8.5x the
	// median, 14x the previous window's.
	assert.Equal(t, []bool{true, false, true, true}, w.healthyRanks, "rank 1's probe diverged")
	assert.Equal(t, 3, w.nHealthy)
	assert.True(t, math.IsNaN(w.losses[1]), "its window loss is left out too")
	assert.InDelta(t, 0.4, l.guard.LastMedian, 1e-12)
	assert.InDelta(t, 0.16, l.guard.LastProbe, 1e-12)

	// 4.5 is 7.5x this window's median (0.6) but 11x the last one's (0.4).
	w = window([]float64{0.3, 4.5, 0.2, 0.9}, nil)
	l.checkDivergence(w)
	assert.Equal(t, []bool{true, false, true, true}, w.healthyRanks)
	assert.InDelta(t, 0.3, l.guard.LastMedian, 1e-12)
	assert.InDelta(t, 0.16, l.guard.LastProbe, 1e-12, "a window that did not probe keeps the last probe median")

	// Every replica blew up (the median is 71x the last one's): rolled back
	// when a rollback is left, although the two left after the two far
	// above the best are left out would not count as blown up (7.5x); with
	// no rollback left those two are averaged.
	blown := []float64{2, 40, 2.5, 50}
	w = window(slices.Clone(blown), nil)
	l.checkDivergence(w)
	assert.Equal(t, []bool{false, false, false, false}, w.healthyRanks)
	assert.Zero(t, w.nHealthy)
	assert.Contains(t, w.events[len(w.events)-1].Message, "blew up everywhere")
	assert.InDelta(t, 0.3, l.guard.LastMedian, 1e-12, "a rolled-back window leaves the reference")
	l.o.CheckpointDir = ""
	w = window(slices.Clone(blown), nil)
	l.checkDivergence(w)
	assert.Equal(t, []bool{true, false, true, false}, w.healthyRanks)
	assert.InDelta(t, 2.25, l.guard.LastMedian, 1e-12)

	// The probe's threshold is the square root of the factor (3.16 here).
	// Measured on the PyTorch ConvNet (local mode, 1e-2, seed 0, window
	// 3): two replicas' probes are 4.2x and 6.4x the reference (the
	// previous window's median, 0.157), their window losses under 10x
	// theirs. Averaged in, they ended the run at test loss 0.0724; left
	// out, at 0.0440.
	l.o.CheckpointDir, l.guard.LastMedian, l.guard.LastProbe = t.TempDir(), 0.24495, 0.15665
	w = window([]float64{0.4003, 1.169, 0.2632, 1.6936}, []float64{0.1921, 0.6601, 0.1245, 1.0017})
	l.checkDivergence(w)
	assert.Equal(t, []bool{true, false, true, false}, w.healthyRanks, "ranks 1 and 3's probes diverged")
	assert.Contains(t, w.events[0].Message, "the square root of train.divergence_factor (3.162)")
	assert.InDelta(t, 0.33175, l.guard.LastMedian, 1e-12)
	assert.InDelta(t, 0.1583, l.guard.LastProbe, 1e-12)
}

// A pass's first window has no previous one: its first steps' losses
// are the reference. SGD from 10x above in a bracket window (measured):
// three replicas at 1e11-1e12 (and one NaN) were healthy by their own
// median, and their average wrecked every later window. Against the first
// steps' loss the three are left out; only a window whose best replica blew
// up too rolls back.
func TestCheckDivergenceFirstWindow(t *testing.T) {
	l := &loop{o: Options{DivergenceFactor: 10, CheckpointDir: t.TempDir(), MaxRollbacks: 3}, lay: Layout{World: 4, Size: 1}}
	window := func(losses []float64) *window {
		return &window{index: 0, losses: losses, firsts: []float64{2.3, 2.31, 2.29, 2.3},
			healthyRanks: []bool{true, true, true, true}, nHealthy: 4}
	}
	w := window([]float64{3.1e12, 0.53, 7.8e11, 7.6e12})
	l.checkDivergence(w)
	assert.Equal(t, []bool{false, true, false, false}, w.healthyRanks, "the best replica is sound: no rollback")
	assert.Contains(t, w.events[0].Message, "its first step's when lower")
	assert.InDelta(t, 0.53, l.guard.LastMedian, 1e-12)

	l.guard.LastMedian = 0
	w = window([]float64{3.1e12, 31, 7.8e11, 7.6e12})
	l.checkDivergence(w)
	assert.Equal(t, []bool{false, false, false, false}, w.healthyRanks)
	assert.Contains(t, w.events[len(w.events)-1].Message, "the replicas' lowest window loss 31 in window 0 is over train.divergence_factor (10) times its first step's 2.3")
	assert.Zero(t, l.guard.LastMedian, "a rolled-back window leaves no reference")
}

func TestScaleLROnlyTouchesLearningRates(t *testing.T) {
	p := plan.Plan{Params: []plan.ParamPlan{
		{Name: "lr", Base: []float64{0.1, 0.2}}, {Name: "lr/hidden", Base: []float64{1}},
		{Name: "dropout", Base: []float64{0.1}}, {Name: "lrx", Base: []float64{1}},
	}}
	scaleLR(&p, 0.25)
	assert.Equal(t, []float64{0.025, 0.05}, p.Params[0].Base)
	assert.Equal(t, []float64{0.25}, p.Params[1].Base)
	assert.Equal(t, []float64{0.1}, p.Params[2].Base)
	assert.Equal(t, []float64{1}, p.Params[3].Base, "lrx is not a learning rate")
}

// soloComm is a world of one rank.
type soloComm struct{}

func (soloComm) Rank() int                                    { return 0 }
func (soloComm) Size() int                                    { return 1 }
func (soloComm) AllreduceFloat32([]float32, reduce.Op) error  { return nil }
func (soloComm) AllreduceFloat64([]float64, reduce.Op) error  { return nil }
func (soloComm) AllgatherFloat64(s, r []float64) error        { copy(r, s); return nil }
func (soloComm) BcastMessage(m []byte, _ int) ([]byte, error) { return m, nil }

// lrReplica's loss is NaN from its nanFrom-th window on (< 0: never), and
// the first time it trains from step nanOnce (0: never); it records the
// learning rate of each window and moves its one parameter by it, so a
// restore is visible.
type lrReplica struct {
	buf       []float32
	nanFrom   int
	nanOnce   int
	spikeOnce int     // the first time it trains from this step its loss is 50 (0: never)
	climbOnce bool    // the first time it trains from step 0 its loss climbs from 1 to 50
	probeSecs float64 // reported as every window's ProbeSeconds
	lrs       []float64
}

func (r *lrReplica) Hyperparameters() []string                          { return []string{"lr"} }
func (r *lrReplica) SyncBuffer(bool) []float32                          { return r.buf }
func (r *lrReplica) ParamCount() int                                    { return 1 }
func (r *lrReplica) Evaluate(context.Context) (float64, float64, error) { return 1, 0.5, nil }
func (r *lrReplica) CanProbe() bool                                     { return false }
func (r *lrReplica) TrainWindow(_ context.Context, w Window) (WindowResult, error) {
	lr := w.V["lr"][w.Steps-1]
	r.lrs = append(r.lrs, lr)
	r.buf[0] += float32(lr)
	loss := 1.0
	if r.nanFrom >= 0 && len(r.lrs) > r.nanFrom {
		loss = math.NaN()
	}
	if r.nanOnce > 0 && w.Start == r.nanOnce {
		loss, r.nanOnce = math.NaN(), 0
	}
	if r.spikeOnce > 0 && w.Start == r.spikeOnce {
		loss, r.spikeOnce = 50, 0
	}
	if r.climbOnce && w.Start == 0 {
		r.climbOnce = false
		return WindowResult{Losses: []float64{1, 50}, ProbeSeconds: r.probeSecs}, nil
	}
	return WindowResult{Losses: []float64{loss}, ProbeSeconds: r.probeSecs}, nil
}

// soloRun runs 6 windows of 2 steps on one rank with a constant learning
// rate 0.01 and divergence factor 10, checkpointing after every window.
func soloRun(t *testing.T, rep *lrReplica, maxRollbacks int, mw *metrics.Writer, tweak ...func(*checkpoint.Saver)) (Result, *bytes.Buffer, error) {
	t.Helper()
	ctx := context.Background()
	ex, err := builtin.NewExplorer(builtin.LR)
	require.NoError(t, err)
	ctrl, err := controller.NewController(ctx, controller.RunShape{Ranks: 1, TotalSteps: 12, WindowSteps: 2, Seed: 1},
		[]controller.NamedExplorer{{Name: "lr", Explorer: ex, Config: []byte(`{"schedule":0.01,"auto":{"enabled":false}}`)}})
	require.NoError(t, err)
	var logs bytes.Buffer
	log := zerolog.New(&logs)
	dir := filepath.Join(t.TempDir(), "checkpoints")
	saver := &checkpoint.Saver{Dir: dir, Every: 1, Keep: 2, Ranks: 1, ParamCount: 1, Log: log,
		Buffer:     func() []float32 { return rep.buf },
		Controller: func(ctx context.Context) ([]byte, error) { b, _, err := ctrl.SaveState(ctx); return b, err }}
	for _, f := range tweak {
		f(saver)
	}
	res, err := Run(ctx, Options{Comm: soloComm{}, Replica: rep, Controller: ctrl, Steps: 12, Window: 2, Sync: SyncLocal,
		Checkpoint: saver, Metrics: mw, Log: log, MaxRollbacks: maxRollbacks, CheckpointDir: dir, DivergenceFactor: 10})
	return res, &logs, err
}

func TestAllUnhealthyWindowRollsBackWithHalvedLR(t *testing.T) {
	rep := &lrReplica{buf: []float32{0}, nanFrom: -1, nanOnce: 6}
	res, logs, err := soloRun(t, rep, 3, nil)
	require.NoError(t, err, logs.String())
	assert.Equal(t, 12, res.Steps)
	// Windows 0-3 at 0.01, window 3 fails, is re-run from the checkpoint
	// after window 2 (step 6) at 0.005 with windows 4 and 5.
	assert.InDeltaSlice(t, []float64{0.01, 0.01, 0.01, 0.01, 0.005, 0.005, 0.005}, rep.lrs, 1e-12)
	assert.InDelta(t, 3*0.01+3*0.005, float64(rep.buf[0]), 1e-6, "window 3's update was rolled back")
	assert.Contains(t, logs.String(), "rolled back to the checkpoint at step 6 with learning rates scaled by 0.5 (rollback 1 of at most 3)")
}

// A window whose every replica's loss jumps together, finite, is a
// divergence the per-window median cannot see: it rolls back like NaN.
func TestBlownUpWindowRollsBack(t *testing.T) {
	rep := &lrReplica{buf: []float32{0}, nanFrom: -1, spikeOnce: 6}
	res, logs, err := soloRun(t, rep, 3, nil)
	require.NoError(t, err, logs.String())
	assert.Equal(t, 12, res.Steps)
	assert.InDeltaSlice(t, []float64{0.01, 0.01, 0.01, 0.01, 0.005, 0.005, 0.005}, rep.lrs, 1e-12)
	assert.Contains(t, logs.String(), "median window loss 50 in window 3 is over train.divergence_factor (10) times the previous window's 1: training blew up everywhere")
	assert.Contains(t, logs.String(), "rollback 1 of at most 3")
}

// The run's first window has no previous one: a loss that climbs tenfold
// from its first step's is the blow-up, and it rolls back to step 0.
func TestFirstWindowBlownUpRollsBack(t *testing.T) {
	rep := &lrReplica{buf: []float32{0}, nanFrom: -1, climbOnce: true}
	res, logs, err := soloRun(t, rep, 3, nil)
	require.NoError(t, err, logs.String())
	assert.Equal(t, 12, res.Steps)
	assert.InDeltaSlice(t, []float64{0.01, 0.005, 0.005, 0.005, 0.005, 0.005, 0.005}, rep.lrs, 1e-12)
	assert.InDelta(t, 6*0.005, float64(rep.buf[0]), 1e-6, "window 0's update was rolled back")
	assert.Contains(t, logs.String(), "lowest window loss 25.5 in window 0 is over train.divergence_factor (10) times its first step's 1: training blew up everywhere")
	assert.Contains(t, logs.String(), "rolled back to the checkpoint at step 0")
}

// With no rollback left a blown-up window is averaged: the rule never
// stops a run by itself.
func TestBlownUpWithoutRollbacksIsAveraged(t *testing.T) {
	rep := &lrReplica{buf: []float32{0}, nanFrom: -1, spikeOnce: 6}
	res, logs, err := soloRun(t, rep, 0, nil)
	require.NoError(t, err, logs.String())
	assert.Equal(t, 12, res.Steps)
	assert.InDeltaSlice(t, []float64{0.01, 0.01, 0.01, 0.01, 0.01, 0.01}, rep.lrs, 1e-12)
	assert.NotContains(t, logs.String(), "blew up everywhere")
}

func TestBlownUp(t *testing.T) {
	for name, tc := range map[string]struct {
		med, last, factor float64
		want              bool
	}{
		"jumped past the factor":  {50, 1, 10, true},
		"just under":              {9.9, 1, 10, false},
		"falling":                 {0.5, 1, 10, false},
		"no previous window":      {50, 0, 10, false},
		"disabled":                {50, 1, 0, false},
		"no healthy median (NaN)": {math.NaN(), 1, 10, false},
	} {
		t.Run(name, func(t *testing.T) {
			ev, got := blownUp(tc.med, "median", tc.last, "the previous window's", tc.factor, 2)
			assert.Equal(t, tc.want, got)
			if got {
				assert.Equal(t, metrics.EventUnhealthy, ev.Kind)
				assert.Contains(t, ev.Message, "blew up everywhere")
			}
		})
	}
}

func TestRollbacksAreBoundedThenTheRunStops(t *testing.T) {
	rep := &lrReplica{buf: []float32{0}, nanFrom: 2} // windows 0 and 1 healthy, then every window NaN
	_, logs, err := soloRun(t, rep, 2, nil)
	require.ErrorIs(t, err, ErrAllUnhealthy)
	assert.Contains(t, err.Error(), "after 2 rollbacks (train.max_rollbacks 2)")
	assert.Contains(t, err.Error(), "scaled by 0.25")
	assert.Contains(t, logs.String(), "rollback 2 of at most 2")
	assert.InDeltaSlice(t, []float64{0.01, 0.01, 0.01, 0.005, 0.0025}, rep.lrs, 1e-12)
}

// A run that fails in its first window rolls back to its step-0
// checkpoint, the parameters it started from, with the rate halved.
func TestFirstWindowRollsBackToTheStart(t *testing.T) {
	rep := &lrReplica{buf: []float32{0}, nanFrom: 0}
	_, logs, err := soloRun(t, rep, 3, nil)
	require.ErrorIs(t, err, ErrAllUnhealthy)
	assert.NotErrorIs(t, err, ErrNoCheckpoint)
	assert.Contains(t, err.Error(), "after 3 rollbacks")
	assert.Contains(t, logs.String(), "rolled back to the checkpoint at step 0 with learning rates scaled by 0.5")
	assert.InDeltaSlice(t, []float64{0.01, 0.005, 0.0025, 0.00125}, rep.lrs, 1e-12)
	assert.InDelta(t, 0.00125, float64(rep.buf[0]), 1e-9, "each re-run starts from the step-0 parameters")
}

// Without a step-0 checkpoint (ranks that start apart), a run that fails
// in its first window has nothing to roll back to and stops.
func TestRollbackWithoutACheckpointStops(t *testing.T) {
	rep := &lrReplica{buf: []float32{0}, nanFrom: 0}
	_, _, err := soloRun(t, rep, 3, nil, func(s *checkpoint.Saver) { s.StartsApart = true })
	require.ErrorIs(t, err, ErrAllUnhealthy)
	require.ErrorIs(t, err, ErrNoCheckpoint)
}

// A metrics.jsonl that cannot be written (here /dev/full: ENOSPC) only warns.
func TestMetricsWriteFailureOnlyWarns(t *testing.T) {
	mw, err := metrics.OpenWriter("/dev/full")
	if err != nil {
		t.Skipf("/dev/full: %v", err)
	}
	defer mw.Close()
	rep := &lrReplica{buf: []float32{0}, nanFrom: -1}
	res, logs, err := soloRun(t, rep, 3, mw)
	require.NoError(t, err)
	assert.Equal(t, 12, res.Steps)
	assert.Contains(t, logs.String(), "metrics.jsonl write failed; training goes on")
}

// The window record carries the time the replica says its probe took.
func TestWindowRecordCarriesProbeSeconds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	mw, err := metrics.OpenWriter(path)
	require.NoError(t, err)
	require.NoError(t, mw.Write(metrics.StartRecord{})) // the CLI's part
	rep := &lrReplica{buf: []float32{0}, nanFrom: -1, probeSecs: 0.25}
	_, logs, err := soloRun(t, rep, 3, mw)
	require.NoError(t, err, logs.String())
	require.NoError(t, mw.Close())
	recs, _, err := metrics.ReadFile(path)
	require.NoError(t, err)
	windows := 0
	for _, r := range metrics.Of[metrics.WindowRecord](recs) {
		windows++
		assert.Equal(t, 0.25, r.ProbeSeconds, "window %d", r.Window)
	}
	assert.Equal(t, 6, windows)
}

// A run resumed from a checkpoint judges its first window against the
// previous window's median that the checkpoint carried (Options.StartGuard),
// as the run left alone did, not against its first step's loss: found by
// the 200-fault PyTorch chaos soak, where a replica reset in the first
// window after a resume changed every later window.
func TestResumedRunJudgesAgainstTheLastWindow(t *testing.T) {
	for _, c := range []struct {
		guard checkpoint.Guard
		want  []bool
		ref   string
	}{
		{checkpoint.Guard{LastMedian: 0.05}, []bool{true, true, true, true}, ""},
		{checkpoint.Guard{}, []bool{true, true, true, false}, "its first step's"},
	} {
		l := &loop{o: Options{DivergenceFactor: 10}, lay: Layout{World: 4, Size: 1}, guard: c.guard}
		// Rank 3's 0.45 is 9x the last window's median, but 22x the median
		// of this window's first steps (0.02; the best replica's 0.01 is
		// the floor of both references).
		w := &window{index: 7, losses: []float64{0.01, 0.05, 0.06, 0.45}, firsts: []float64{0.02, 0.02, 0.02, 0.02},
			healthyRanks: []bool{true, true, true, true}, nHealthy: 4}
		l.checkDivergence(w)
		assert.Equal(t, c.want, w.healthyRanks, "guard %+v", c.guard)
		if c.ref != "" {
			require.NotEmpty(t, w.events)
			assert.Contains(t, w.events[0].Message, c.ref)
		}
	}
}
