package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/controller"
	"github.com/hdet-dev/hdet/internal/engine/enginetest"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/plan"
)

// Four ranks: each trains at its own learning rate from the plan, the
// gather shares every rank's loss, the converge gives every rank the mean
// of the four buffers, the sharded evaluation sums every rank's shard, and
// a second run gives the same bits.
func TestRanksGatherAndConvergeToTheMean(t *testing.T) {
	r := runRanks(t, ranksSpec{world: 4, lr: constLR})
	for rank, err := range r.errs {
		require.NoError(t, err, "rank %d: %s", rank, r.logs[rank])
	}
	recs := r.windows()
	require.Len(t, recs, 6)
	for k, rec := range recs {
		assert.Equal(t, []bool{true, true, true, true}, rec.Healthy, "window %d", k)
		for rank, rep := range r.reps {
			c := rep.calls[k]
			assert.Equal(t, 2*k, c.start)
			assert.Equal(t, metrics.Float(c.loss), rec.Losses[rank], "window %d: rank %d's loss, gathered", k, rank)
			assert.Equal(t, metrics.Float(c.lr), rec.Values["lr"][rank], "window %d: rank %d applied its plan value", k, rank)
			if k+1 < len(recs) {
				assert.Equal(t, converged(r.afterCall(k)...), rep.calls[k+1].before, "window %d: rank %d holds the mean", k, rank)
			}
		}
	}
	assert.NotEqual(t, recs[0].Values["lr"][0], recs[0].Values["lr"][1], "the ranks explore apart")
	final := converged(r.afterCall(5)...)
	for rank, res := range r.res {
		assert.Equal(t, Result{Steps: 12, Checksum: Checksum(final[:toyParams]), TestLoss: float64(final[0]) * 10 / 40, TestAccuracy: 6.0 / 40, LRScale: 1}, res, "rank %d", rank)
	}
	assert.Equal(t, 6, r.w.World.Count(enginetest.AllgatherFloat64), "one gather per window")

	again := runRanks(t, ranksSpec{world: 4, lr: constLR})
	assert.Equal(t, r.res, again.res, "bit-identical from run to run")
}

// A rank whose loss and parameters are NaN is left out of the average and
// receives it; the window's record says so; the run goes on.
func TestUnhealthyRankIsLeftOutAndReset(t *testing.T) {
	r := runRanks(t, ranksSpec{world: 4, lr: constLR, nan: map[int][]int{2: {1}}})
	for rank, err := range r.errs {
		require.NoError(t, err, "rank %d", rank)
	}
	rec := r.windows()[1]
	assert.Equal(t, []bool{true, true, false, true}, rec.Healthy)
	assert.True(t, math.IsNaN(float64(rec.Losses[2])))
	require.Len(t, rec.Events, 1)
	assert.Equal(t, metrics.EventUnhealthy, rec.Events[0].Kind)
	assert.Equal(t, 2, *rec.Events[0].Rank)
	assert.Contains(t, rec.Events[0].Message, "rank 2 had a non-finite loss or parameters in window 1; left out of the average and reset to it")
	after := r.afterCall(1)
	want := converged(after[0], after[1], nil, after[3])
	for rank, rep := range r.reps {
		assert.Equal(t, want, rep.calls[2].before, "rank %d starts window 2 from the healthy ranks' mean", rank)
	}
	assert.Equal(t, r.res[0], r.res[2])
}

// A window where every rank is NaN rolls back on every rank: each reloads
// the checkpoint rank 0 wrote after window 2 and re-runs window 3 at half
// its learning rate, the controller restored to plan it again.
func TestEveryRankUnhealthyRollsBackTogether(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checkpoints")
	all := map[int][]int{0: {3}, 1: {3}, 2: {3}, 3: {3}}
	r := runRanks(t, ranksSpec{world: 4, lr: constLR, nan: all, tweak: func(rank int, o *Options, rep *toyReplica) {
		o.Checkpoint, o.CheckpointDir, o.MaxRollbacks, o.DivergenceFactor = saver(rank, 4, dir, o.Controller, rep), dir, 3, 10
	}})
	for rank, err := range r.errs {
		require.NoError(t, err, "rank %d: %s", rank, r.logs[rank])
	}
	for rank, rep := range r.reps {
		require.Len(t, rep.calls, 7, "rank %d", rank)
		assert.Equal(t, rep.calls[3].before, rep.calls[4].before, "rank %d re-runs window 3 from the checkpoint", rank)
		assert.Equal(t, 6, rep.calls[4].start)
		assert.InDelta(t, 0.5*rep.calls[3].lr, rep.calls[4].lr, 1e-15, "rank %d: the same plan, halved", rank)
		assert.Equal(t, r.res[0], r.res[rank])
	}
	recs := r.windows()
	require.Len(t, recs, 7)
	assert.Equal(t, []bool{false, false, false, false}, recs[3].Healthy)
	last := recs[3].Events[len(recs[3].Events)-1]
	assert.Equal(t, metrics.EventRollback, last.Kind)
	assert.Contains(t, last.Message, "rolled back to the checkpoint at step 6 with learning rates scaled by 0.5 (rollback 1 of at most 3)")
	assert.Equal(t, recs[3].Values["lr"][1]/2, recs[4].Values["lr"][1])
}

// A replica whose state no checkpoint holds (Unrestorable, a worker
// script's) is not rolled back, even through a wrapper and with a
// checkpoint directory: the window stops every rank.
func TestUnrestorableReplicaDoesNotRollBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checkpoints")
	all := map[int][]int{0: {3}, 1: {3}}
	r := runRanks(t, ranksSpec{world: 2, lr: constLR, nan: all, tweak: func(rank int, o *Options, rep *toyReplica) {
		o.Checkpoint, o.CheckpointDir, o.MaxRollbacks, o.DivergenceFactor = saver(rank, 2, dir, o.Controller, rep), dir, 3, 10
		o.Replica = wrapped{unrestorable{rep}}
	}})
	for rank, err := range r.errs {
		require.ErrorIs(t, err, ErrAllUnhealthy, "rank %d", rank)
		assert.Contains(t, err.Error(), "this run does not roll back (no checkpoint holds its training state")
	}
	for rank, rep := range r.reps {
		assert.Len(t, rep.calls, 4, "rank %d stops in window 3", rank)
	}
}

type unrestorable struct{ *toyReplica }

func (unrestorable) Unrestorable() {}

// wrapped hides the replica it wraps but for Unwrap, as the fault suite's
// injector does.
type wrapped struct{ Replica }

func (w wrapped) Unwrap() Replica { return w.Replica }

// saver is the real checkpoint.Saver for rank of ranks (rank 0 writes).
func saver(rank, ranks int, dir string, ctrl *controller.Controller, rep *toyReplica) *checkpoint.Saver {
	s := &checkpoint.Saver{Dir: dir, Every: 1, Keep: 2, Rank: rank, Ranks: ranks, ParamCount: toyParams,
		Buffer: func() []float32 { return rep.buf }}
	if rank == 0 {
		s.Controller = func(ctx context.Context) ([]byte, error) { b, _, err := ctrl.SaveState(ctx); return b, err }
	}
	return s
}

// Without a rollback (no checkpoint directory), or without a checkpoint
// to go back to, a window where every rank is NaN stops every rank with
// ErrAllUnhealthy.
func TestEveryRankUnhealthyWithoutACheckpointStopsEveryRank(t *testing.T) {
	all := map[int][]int{0: {1}, 1: {1}, 2: {1}}
	r := runRanks(t, ranksSpec{world: 3, lr: constLR, nan: all})
	for rank, err := range r.errs {
		require.ErrorIs(t, err, ErrAllUnhealthy, "rank %d", rank)
		assert.Contains(t, err.Error(), "in window 1 (steps 2-4): training diverged everywhere, and this run does not roll back")
	}

	dir := filepath.Join(t.TempDir(), "checkpoints")
	first := map[int][]int{0: {0}, 1: {0}, 2: {0}}
	r = runRanks(t, ranksSpec{world: 3, lr: constLR, nan: first, tweak: func(rank int, o *Options, rep *toyReplica) {
		s := saver(rank, 3, dir, o.Controller, rep)
		s.StartsApart = true // no step-0 checkpoint
		o.Checkpoint, o.CheckpointDir, o.MaxRollbacks = s, dir, 3
	}})
	for rank, err := range r.errs {
		require.ErrorIs(t, err, ErrAllUnhealthy, "rank %d", rank)
		require.ErrorIs(t, err, ErrNoCheckpoint, "rank %d", rank)
	}
}

// Replicas of two ranks: each replica's ranks average their gradients and
// stay identical, the converge runs across the replicas only (a slice per
// position), the signal is per replica, and a replica with one NaN rank is
// left out and reset as a whole.
func TestGroupedConvergeAcrossReplicas(t *testing.T) {
	r := runRanks(t, ranksSpec{world: 4, g: 2, lr: constLR, nan: map[int][]int{3: {2}},
		tweak: func(rank int, o *Options, _ *toyReplica) { o.Converge = o.Groups.Cross.(enginetest.Comm) }})
	for rank, err := range r.errs {
		require.NoError(t, err, "rank %d: %s", rank, r.logs[rank])
	}
	recs := r.windows()
	require.Len(t, recs, 6)
	for k, rec := range recs[:5] {
		after := r.afterCall(k)
		if k != 2 {
			assert.Equal(t, after[0], after[1], "window %d: replica 0's ranks agree", k)
			assert.Equal(t, after[2], after[3], "window %d: replica 1's ranks agree", k)
		}
		want := converged(after[0], after[2])
		if k == 2 {
			want = converged(after[0], nil)
		}
		for rank, rep := range r.reps {
			assert.Equal(t, want, rep.calls[k+1].before, "window %d, rank %d", k, rank)
		}
		for rep := range 2 {
			l0, l1 := r.reps[2*rep].calls[k].loss, r.reps[2*rep+1].calls[k].loss
			if k != 2 || rep == 0 {
				assert.Equal(t, metrics.Float((l0+l1)/2), rec.Losses[rep], "window %d: replica %d's loss is its ranks' mean", k, rep)
			}
			assert.Equal(t, r.reps[2*rep].calls[k].lr, r.reps[2*rep+1].calls[k].lr, "window %d: a replica's ranks share its value", k)
		}
	}
	assert.NotEqual(t, r.reps[0].calls[0].after, r.reps[0].calls[0].before, "trained")
	assert.Equal(t, []bool{true, false}, recs[2].Healthy)
	require.Len(t, recs[2].Events, 1)
	assert.Contains(t, recs[2].Events[0].Message, "replica 1 (ranks 2-3) had a non-finite loss or parameters in window 2")
	for p, n := range r.w.Cross {
		assert.Equal(t, 6, n.Count(enginetest.Converge), "position %d converges once a window", p)
	}
	assert.Zero(t, r.w.World.Count(enginetest.Converge), "nothing converges across the world")
	for rep, n := range r.w.Replicas {
		assert.Equal(t, 2*12, n.Count(enginetest.AllreduceFloat32), "replica %d: a gradient and its count per step", rep)
		assert.Equal(t, 6, n.Count(enginetest.AllgathervF32), "replica %d: the slices put together once a window", rep)
	}
}

// Sharded replicas (FSDP2 inside a replica): each rank converges its whole
// buffer with the ranks at its position, and nothing is put together
// inside the replica afterwards.
func TestShardedConvergeAveragesEachPosition(t *testing.T) {
	r := runRanks(t, ranksSpec{world: 4, g: 2, lr: constLR,
		tweak: func(rank int, o *Options, _ *toyReplica) {
			o.Groups.Sharded, o.Converge = true, o.Groups.Cross.(enginetest.Comm)
		}})
	for rank, err := range r.errs {
		require.NoError(t, err, "rank %d: %s", rank, r.logs[rank])
	}
	require.Len(t, r.windows(), 6)
	for k := range 5 {
		after := r.afterCall(k)
		for rank, rep := range r.reps {
			pos := rank % 2
			assert.Equal(t, converged(after[pos], after[pos+2]), rep.calls[k+1].before, "window %d, rank %d: its position's mean", k, rank)
		}
	}
	for p, n := range r.w.Cross {
		assert.Equal(t, 6, n.Count(enginetest.Converge), "position %d converges once a window", p)
	}
	for rep, n := range r.w.Replicas {
		assert.Equal(t, 2*12, n.Count(enginetest.AllreduceFloat32), "replica %d: a gradient and its count per step, no slice exchange", rep)
	}
}

// One rank's stop request stops every rank after the same window, each
// checkpointing (forced) before returning ErrStopped.
func TestStopOnOneRankStopsEveryRank(t *testing.T) {
	cks := make([]*recCheckpointer, 3)
	r := runRanks(t, ranksSpec{world: 3, lr: constLR, tweak: func(rank int, o *Options, _ *toyReplica) {
		cks[rank] = &recCheckpointer{}
		o.Checkpoint = cks[rank]
		if rank == 2 {
			polls := 0
			o.Stop = func() bool { polls++; return polls >= 2 }
		}
	}})
	for rank, err := range r.errs {
		require.ErrorIs(t, err, ErrStopped, "rank %d", rank)
		assert.Equal(t, 4, r.res[rank].Steps)
		assert.Len(t, r.reps[rank].calls, 2)
		assert.Equal(t, []ckptCall{{window: 0, step: 2}, {window: 1, step: 4, force: true}}, cks[rank].calls, "rank %d", rank)
	}
	assert.Len(t, r.windows(), 2)
}

// A stop on one rank, then a resume of every rank from the checkpoint the
// stop wrote, ends bit-identical to the run that was never stopped: in
// the search pass, in the window where the explorers commit, and in the
// main pass.
func TestStopThenResumeIsBitExact(t *testing.T) {
	spec := func(dir string) ranksSpec {
		return ranksSpec{world: 3, lr: commitLR, tweak: func(rank int, o *Options, rep *toyReplica) {
			o.Checkpoint, o.CheckpointDir, o.MaxRollbacks, o.Restart = saver(rank, 3, dir, o.Controller, rep), dir, 1, rep.restart
		}}
	}
	whole := runRanks(t, spec(filepath.Join(t.TempDir(), "checkpoints")))
	for rank, err := range whole.errs {
		require.NoError(t, err, "rank %d", rank)
	}
	for _, stopAt := range []int{0, 1, 3} { // the search pass is windows 0 and 1
		t.Run(fmt.Sprintf("window %d", stopAt), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "checkpoints")
			s := spec(dir)
			tweak := s.tweak
			s.tweak = func(rank int, o *Options, rep *toyReplica) {
				tweak(rank, o, rep)
				polls := 0
				o.Stop = func() bool { polls++; return rank == 1 && polls > stopAt }
			}
			stopped := runRanks(t, s)
			for rank, err := range stopped.errs {
				require.ErrorIs(t, err, ErrStopped, "rank %d", rank)
			}
			s = spec(dir)
			s.setup = func(ctx context.Context, rank int, o *Options) error {
				got, _, err := Restore(ctx, RestoreOptions{Comm: o.Comm, Dir: dir, Replica: o.Replica, Controller: o.Controller, Log: o.Log})
				if err != nil {
					return err
				}
				o.StartStep, o.StartPass, o.StartGuard = got.State.Step, got.State.Pass, got.State.Guard
				return nil
			}
			resumed := runRanks(t, s)
			for rank, err := range resumed.errs {
				require.NoError(t, err, "rank %d: %s", rank, resumed.logs[rank])
				assert.Equal(t, plan.PassMain, resumed.res[rank].Pass)
				assert.Equal(t, whole.res[rank], resumed.res[rank], "rank %d", rank)
			}
		})
	}
}

type ckptCall struct {
	atStart            bool
	pass, window, step int
	force              bool
}

// recCheckpointer records the engine's checkpoint calls.
type recCheckpointer struct{ calls []ckptCall }

func (c *recCheckpointer) AtStart(_ context.Context, pass int, _ checkpoint.Guard) {
	c.calls = append(c.calls, ckptCall{atStart: true, pass: pass})
}

func (c *recCheckpointer) AfterConverge(_ context.Context, pass, window, step int, _ checkpoint.Guard, force bool) error {
	c.calls = append(c.calls, ckptCall{pass: pass, window: window, step: step, force: force})
	return nil
}

// scriptReplica is a toy replica as a worker script's looks to the engine:
// its learning rates multiply the script's own peak rate.
type scriptReplica struct{ *toyReplica }

func (scriptReplica) PeakLR() float64 { return 0.002 }

// commitLR searches until a third of the run, then commits and restarts.
const commitLR = `{"schedule":0.05,"auto":{"enabled":false,"commit":"restart","until":0.3}}`

// When the explorers commit, every rank restores its step-0 state
// (Options.Restart), gets a main-pass step-0 checkpoint, and trains the
// main pass from step 0 at the committed value, the same on every rank.
func TestCommitRestartsEveryRankForTheMainPass(t *testing.T) {
	cks := make([]*recCheckpointer, 3)
	r := runRanks(t, ranksSpec{world: 3, lr: commitLR, tweak: func(rank int, o *Options, rep *toyReplica) {
		cks[rank] = &recCheckpointer{}
		o.Checkpoint, o.CheckpointDir, o.MaxRollbacks, o.Restart = cks[rank], t.TempDir(), 1, rep.restart
		o.Replica = scriptReplica{rep} // a worker script's, with its own peak rate
	}})
	for rank, err := range r.errs {
		require.NoError(t, err, "rank %d: %s", rank, r.logs[rank])
	}
	var search int
	for _, rec := range metrics.Of[metrics.CommitRecord](r.recs) {
		search = rec.Step / 2
		lr := rec.Committed["lr"]
		assert.Equal(t, metrics.Float(0.002), lr.ScriptPeakLR)
		assert.InDelta(t, 0.002*float64(lr.Value), float64(lr.PeakLR), 1e-15, "the peak the multiplier implies")
	}
	require.Positive(t, search, "a commit record")
	for rank, rep := range r.reps {
		assert.Equal(t, 1, rep.restarts, "rank %d", rank)
		assert.Equal(t, plan.PassMain, r.res[rank].Pass)
		require.Len(t, rep.calls, search+6)
		main := rep.calls[search:]
		assert.Equal(t, 0, main[0].start)
		assert.Equal(t, make([]float32, toyParams+1), main[0].before, "rank %d: the main pass starts from the step-0 state", rank)
		assert.Equal(t, r.reps[0].calls[search].lr, main[0].lr, "no spread in the main pass")
		assert.Equal(t, ckptCall{atStart: true, pass: plan.PassMain}, cks[rank].calls[search+1], "rank %d", rank)
	}
}

// With a main-pass window of 3T (Options.MainWindow) the main pass trains
// in windows of 6 steps, while evaluations and checkpoints keep their
// cadence in T-step windows (every 3: at steps 6 and 12, as with T-step
// windows), and the main pass ends at the same parameters as with T-step
// windows: in gradients mode every rank holds the same parameters, so the
// converge has nothing to average.
func TestMainPassInLongerWindows(t *testing.T) {
	run := func(mainWindow int) (*ranksRun, []*recCheckpointer) {
		cks := make([]*recCheckpointer, 2)
		return runRanks(t, ranksSpec{world: 2, lr: commitLR, mainWindow: mainWindow, tweak: func(rank int, o *Options, rep *toyReplica) {
			cks[rank] = &recCheckpointer{}
			o.Checkpoint, o.CheckpointDir, o.Restart, o.EvalEvery, o.Sync = cks[rank], t.TempDir(), rep.restart, 3, SyncGradients
		}}), cks
	}
	short, _ := run(0)
	long, cks := run(6)
	for rank, err := range long.errs {
		require.NoError(t, err, "rank %d: %s", rank, long.logs[rank])
		require.NoError(t, short.errs[rank])
		assert.Equal(t, short.res[rank].Checksum, long.res[rank].Checksum, "rank %d: the same parameters", rank)
	}
	var mainEnds, evals []int
	for _, rec := range long.windows() {
		if rec.Pass == plan.PassMain {
			mainEnds = append(mainEnds, rec.Step)
			if rec.Eval != nil {
				evals = append(evals, rec.Step)
			}
		}
	}
	assert.Equal(t, []int{6, 12}, mainEnds, "two main windows of 6 steps")
	assert.Equal(t, []int{6, 12}, evals, "evaluated every 3 T-step windows")
	var mainCkpts []ckptCall
	for _, c := range cks[0].calls {
		if c.pass == plan.PassMain && !c.atStart {
			mainCkpts = append(mainCkpts, c)
		}
	}
	require.Len(t, mainCkpts, 2)
	assert.Equal(t, ckptCall{pass: plan.PassMain, window: 2, step: 6}, mainCkpts[0], "the cadence counts T-step windows")
	assert.Equal(t, 12, mainCkpts[1].step)
}

// Without Options.Restart every rank refuses the main pass alike; a
// Restart that fails on one rank fails that rank, and its peers find it
// gone at the next collective instead of hanging (under MPI: until the
// watchdog or mpirun ends them).
func TestCommitWithoutARestart(t *testing.T) {
	r := runRanks(t, ranksSpec{world: 3, lr: commitLR})
	for rank, err := range r.errs {
		require.ErrorContains(t, err, "the explorers committed, but this workload cannot restore its step-0 state", "rank %d", rank)
	}
	boom := errors.New("boom")
	r = runRanks(t, ranksSpec{world: 3, lr: commitLR, tweak: func(rank int, o *Options, rep *toyReplica) {
		o.Restart = rep.restart
		if rank == 1 {
			o.Restart = func(context.Context) error { return boom }
		}
	}})
	require.ErrorIs(t, r.errs[1], boom)
	assert.ErrorContains(t, r.errs[1], "restoring the step-0 state for the main pass")
	assert.ErrorIs(t, r.errs[0], enginetest.ErrRankGone)
	assert.ErrorIs(t, r.errs[2], enginetest.ErrRankGone)
}

// A collective that fails on one rank fails every rank with the phase's
// error: the failing rank with its own, the others with their peer's.
func TestCollectiveFailuresReachEveryRank(t *testing.T) {
	boom := errors.New("boom")
	for name, tc := range map[string]struct {
		rank int
		kind enginetest.Kind
		nth  int
		want string
	}{
		"plan broadcast": {0, enginetest.BcastMessage, 2, "broadcast plan of window 2"},
		"gather":         {2, enginetest.AllgatherFloat64, 1, "gather window losses"},
		"converge":       {1, enginetest.AllreduceFloat32, 3, "converge allreduce of window 3"},
		"evaluation":     {1, enginetest.AllreduceFloat64, 0, "evaluate after window 5"},
	} {
		t.Run(name, func(t *testing.T) {
			r := runRanks(t, ranksSpec{world: 3, lr: constLR, fail: func(c enginetest.Call) error {
				if c.Rank == tc.rank && c.Kind == tc.kind && c.KindSeq == tc.nth {
					return boom
				}
				return nil
			}})
			for rank, err := range r.errs {
				require.ErrorContains(t, err, tc.want, "rank %d", rank)
				if rank == tc.rank {
					assert.ErrorIs(t, err, boom)
				} else {
					assert.ErrorIs(t, err, enginetest.ErrPeerFailed, "rank %d", rank)
				}
			}
		})
	}
}
