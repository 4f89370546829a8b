package session

// A worker run resumes at hdet's checkpoint: at each checkpoint every rank's
// script saves its state first (bridge SAVE), and a relaunch starts the
// script from that state, in the checkpoint's pass (docs/pytorch.md#resume).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hdet-dev/hdet/internal/bridge"
	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/workload"
	"github.com/hdet-dev/hdet/mpi/reduce"
)

// resumeWorker is resume for a worker run: the checkpoint the worker was
// started at, else the run from step 0 (a checkpoint without the script's
// state is started over, with a warning).
func (s *session) resumeWorker(ctx context.Context, st workload.StateSaver) error {
	pass, step, ok := st.StartedAt()
	if !ok {
		return s.workerOver(st)
	}
	// FSDP2 shards differ by position, and a checkpoint holds rank 0's:
	// each rank keeps the shards its worker resumed (and copied into the
	// buffer at READY), which it saved from the converged buffer
	// (restore's OwnBuffer).
	if err := s.restore(ctx); err != nil {
		return err
	}
	if s.resumePass != pass || s.resumeAt != step {
		return fmt.Errorf("the worker was started at step %d of the %s pass, but the checkpoint restored is at step %d of the %s pass: did another launch write into %s?",
			step, bridge.PassName(pass), s.resumeAt, bridge.PassName(s.resumePass), s.cfg.Run.Dir)
	}
	return nil
}

// workerOver starts a worker run from step 0. A checkpoint of this run
// whose script state is missing (the script did not give hdet its state)
// is said so, and removed with the state files: a later relaunch must not
// resume it.
func (s *session) workerOver(st workload.StateSaver) error {
	if s.rank != 0 {
		return nil
	}
	ck, path, _, err := checkpoint.Latest(s.checkpointDir())
	if err != nil {
		return s.workerFresh()
	}
	if err := s.compatible(ck, path); err != nil {
		return err
	}
	why := "this script does not give hdet its state (attach(..., state=...))"
	if st.Resumable() {
		why = "not every rank's script state was saved with it (the launch that wrote it had a script without state=, or fewer ranks)"
	}
	s.o.Log.Warn().Int("pass", ck.Pass).Int("step", ck.Step).Str("run_dir", s.cfg.Run.Dir).
		Msg(fmt.Sprintf("hdet's checkpoint is at step %d of the %s pass, but %s: the run starts over from step 0; %s", ck.Step, bridge.PassName(ck.Pass), why, "docs/pytorch.md#resume"))
	if err := errors.Join(removeCheckpoints(s.checkpointDir()), st.RemoveStates()); err != nil {
		return fmt.Errorf("starting the run over: %w", err)
	}
	s.restarted = true
	return nil
}

// removeCheckpoints removes a run's checkpoints.
func removeCheckpoints(dir string) error {
	names, err := checkpoint.List(dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			return err
		}
	}
	return nil
}

// workerCheckpointer is the engine's Checkpointer in a worker run whose
// script is resumable: when rank 0's Saver says a checkpoint is due, every
// rank's script saves its state, and only once all have does rank 0 write
// hdet's checkpoint; then each rank removes the state files no kept
// checkpoint refers to.
type workerCheckpointer struct {
	s     *session
	st    workload.StateSaver
	saver *checkpoint.Saver
	comm  World
}

// AtStart is the Saver's (the engine calls it only for runs that roll back,
// which worker runs do not).
func (c workerCheckpointer) AtStart(ctx context.Context, pass int, g checkpoint.Guard) {
	c.saver.AtStart(ctx, pass, g)
}

// saveStates has every rank's script save its state for the checkpoint at
// step, and reports whether a disk refused one: that checkpoint then fails
// as a refused write of hdet's own does (retried at the next cadence, the
// run stopped after run.checkpoint_max_failing); any other failure stops
// the run.
func (c workerCheckpointer) saveStates(ctx context.Context, pass, step int) (bool, error) {
	err := c.st.SaveStateAt(ctx, pass, step)
	refused := []float64{0}
	if errors.Is(err, workload.ErrStateRefused) {
		c.s.o.Log.Warn().Err(err).Int("step", step).Msg("the script's state could not be written: this checkpoint is skipped, the previous one stays valid")
		refused[0], err = 1, nil
	}
	if err := agree(c.comm, err); err != nil {
		return false, err
	}
	if err := c.comm.AllreduceFloat64(refused, reduce.Max); err != nil {
		return false, err
	}
	return refused[0] > 0, nil
}

func (c workerCheckpointer) AfterConverge(ctx context.Context, pass, window, step int, g checkpoint.Guard, force bool) error {
	s := c.s
	due := []float64{0}
	if s.rank == 0 && c.saver.Due(window, force) {
		due[0] = 1
	}
	if err := c.comm.AllreduceFloat64(due, reduce.Max); err != nil || due[0] == 0 {
		return err
	}
	refused := false
	if step < s.steps { // the run's end is never resumed: the script need not save it
		var err error
		if refused, err = c.saveStates(ctx, pass, step); err != nil {
			return err
		}
	}
	ok := []float64{1}
	var failed error // rank 0's: why checkpoints stop the run
	if s.rank == 0 {
		var written bool
		if refused {
			failed = c.saver.Failed(step, errors.New("a rank's script could not write its state (that rank's log says why)"))
		} else {
			written, failed = c.saver.Save(ctx, pass, window, step, g)
		}
		if failed != nil {
			ok[0] = -1
		} else if !written {
			ok[0] = 0
		}
	}
	// After rank 0's write (and its removal of old checkpoints), every
	// rank sees the kept ones.
	if err := c.comm.AllreduceFloat64(ok, reduce.Min); err != nil {
		return err
	}
	if ok[0] < 0 { // every rank knows: they end together, so rank 0's reason is printed before any abort
		if failed != nil {
			return agreedError{failed}
		}
		return agreedError{errors.New("no checkpoint could be written for run.checkpoint_max_failing (rank 0 says why)")}
	}
	if err := c.st.PruneStates(); err != nil {
		s.o.Log.Warn().Err(err).Msg("could not remove old worker state files")
	}
	return nil
}
