package session

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hdet-dev/hdet/device"
	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/controller"
	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/progress"
	"github.com/hdet-dev/hdet/internal/report"
	"github.com/hdet-dev/hdet/internal/workload"
	"github.com/hdet-dev/hdet/mpi/reduce"
	"github.com/hdet-dev/hdet/slurm"
)

// train runs the window loop, then ends the run: on a stop, the requeue
// under Slurm; after the last window, the worker's exit, model.bin, the end
// record and the closing lines (rank 0). A script that fails after the
// last window (its exit after STOP) fails the job, but after all of that.
func (s *session) train(ctx context.Context) (Outcome, error) {
	opts, err := s.engineOptions()
	if err != nil {
		return Outcome{}, err
	}
	if s.rank == 0 {
		s.o.Log.Info().Str("config", s.o.Source).Int("ranks", s.o.World.Size()).Int("replicas", s.replicas()).Int("steps", s.steps).Int("window", s.cfg.Train.Window).
			Str("sync", string(s.sync)).Strs("explored", s.ctrl.Names()).Str("run_dir", s.cfg.Run.Dir).
			Int("start_step", s.resumeAt).Fields(s.slurm.Fields()).Msg("starting HDET run")
	}
	start := time.Now()
	res, err := engine.Run(ctx, opts)
	s.wd.Stop() // the window loop's collectives are over
	if errors.Is(err, engine.ErrStopped) {
		s.stopped(res)
	}
	// The final parameters, before the worker (and with it the buffer) goes;
	// after a failure there are none to keep (a worker that failed to start
	// for the main pass has no buffer).
	var params []float32
	if err == nil {
		params = slices.Clone(s.replica.SyncBuffer(false)[:s.replica.ParamCount()])
	}
	var scriptErr error // the script's own end, after the last window: it loses none of the run
	if err == nil {
		scriptErr = s.endReplica()
	} else if errors.Is(err, engine.ErrStopped) {
		err = errors.Join(err, s.endReplica())
	}
	out := Outcome{Result: res}
	if err == nil && s.rank == 0 {
		out, err = s.finish(res, params, time.Since(start))
	}
	if err != nil {
		return out, errors.Join(err, scriptErr)
	}
	return s.endScripts(out, scriptErr)
}

// endScripts lets every rank of a worker run learn whether a script failed
// after the run (its exit after STOP). If one did, rank 0 writes the report
// before the ranks part: a rank that exits non-zero makes mpirun end the
// others, and the report must not go with them.
func (s *session) endScripts(out Outcome, scriptErr error) (Outcome, error) {
	if _, ok := engine.As[workload.Finisher](s.replica); !ok {
		return out, nil
	}
	if err := agree(s.o.World, scriptErr); err == nil || !Agreed(err) {
		return out, err // no script failed, or the ranks could not tell
	}
	if out.Report != nil {
		_ = out.Report() // it logs its own failure: the run stands without it
		out.Report = nil
	}
	if err := agree(s.o.World, nil); err != nil || scriptErr == nil { // the report is out
		return out, errors.Join(err, scriptErr)
	}
	return out, &AfterRunError{Err: fmt.Errorf("the run finished (model.bin, metrics.jsonl and the report are in %s), "+
		"then the script failed after hdet's STOP: %w", s.cfg.Run.Dir, scriptErr)}
}

func (s *session) engineOptions() (engine.Options, error) {
	w, tc := s.o.World, s.cfg.Train
	saver, err := s.saver()
	if err != nil {
		return engine.Options{}, err
	}
	var prog engine.Progress
	if s.rank == 0 {
		mode, err := progress.ParseMode(s.cfg.Run.Progress)
		if err != nil {
			return engine.Options{}, err
		}
		prog = progress.New(s.o.Out, mode, s.resumePass, s.resumeAt) // under mpirun a rank's stdout is a pty when mpirun's is
	}
	var ckpt engine.Checkpointer = saver
	if st, ok := engine.As[workload.StateSaver](s.replica); ok && st.Resumable() {
		ckpt = workerCheckpointer{s: s, st: st, saver: saver, comm: w}
	}
	return engine.Options{
		Comm: s.wd.Comm(w), Replica: s.replica, Controller: s.ctrl, Groups: s.groups(),
		Steps: s.steps, Window: tc.Window, MainWindow: s.mainWindow(), Sync: s.sync, EvalEvery: tc.EvalEvery, StartStep: s.resumeAt, StartPass: s.resumePass, StartGuard: s.resumeGuard,
		Restart:  s.restoreStart,
		Converge: s.wd.Converger(hostBuffer{s.converge}), Metrics: s.mw, Progress: prog, Checkpoint: ckpt, Stop: s.o.Stop,
		Log: s.o.Log, Watch: s.wd, Events: s.events,
		DivergenceFactor: tc.DivergenceFactor, MaxRollbacks: tc.MaxRollbacks, CheckpointDir: saver.Dir,
	}, nil
}

func (s *session) saver() (*checkpoint.Saver, error) {
	cfgYAML, err := s.cfg.YAML()
	if err != nil {
		return nil, err
	}
	w, rc, log := s.o.World, s.cfg.Run, s.o.Log
	saver := &checkpoint.Saver{
		Dir: s.checkpointDir(), Every: rc.CheckpointEvery,
		Interval: time.Duration(rc.CheckpointMinutes * float64(time.Minute)), Keep: rc.Keep,
		Rank: w.Rank(), Ranks: s.replicas(), Config: cfgYAML, ParamCount: s.replica.ParamCount(),
		Buffer: func() []float32 { return s.replica.SyncBuffer(true) }, Log: log,
		MaxFailing:  time.Duration(rc.CheckpointMaxFailing),
		StartsApart: s.cfg.Train.WarmStart != "" && s.cfg.Train.WarmNoise > 0,
	}
	if s.rank == 0 {
		saver.BeforeWrite = s.mw.Sync
		saver.Controller = func(ctx context.Context) ([]byte, error) {
			b, evs, err := s.ctrl.SaveState(ctx)
			for _, e := range evs {
				log.Warn().Str("param", e.Param).Msg(e.String())
			}
			return b, err
		}
	}
	return saver, nil
}

// stopped (rank 0) says how to resume and, under Slurm, requeues the job.
func (s *session) stopped(res engine.Result) {
	if s.rank != 0 {
		return
	}
	msg := "stopped by a signal after checkpointing; launch the same command again to resume"
	if st, ok := engine.As[workload.StateSaver](s.replica); ok && !st.Resumable() {
		msg = "stopped by a signal after checkpointing; launch the same command again to run it again from step 0 (the script does not give hdet its state, attach(..., state=...): docs/pytorch.md#resume)"
	}
	s.o.Log.Warn().Int("step", res.Steps).Msg(msg)
	s.requeue()
}

// requeue (rank 0) puts the Slurm job back in the queue after a signal
// stopped the run, unless --no-requeue.
func (s *session) requeue() {
	log := s.o.Log
	if !s.slurm.InSlurm() || s.o.NoRequeue {
		return
	}
	if err := slurm.Requeue(context.Background(), s.slurm.JobID); err != nil {
		log.Error().Err(err).Msg("requeue failed")
	} else {
		log.Info().Str("job", s.slurm.JobID).Msg("job requeued")
	}
}

// finish (rank 0) writes model.bin and the end record, prints the closing
// lines and hands back the report for after MPI_Finalize.
func (s *session) finish(res engine.Result, params []float32, wall time.Duration) (Outcome, error) {
	dir := s.cfg.Run.Dir
	err := checkpoint.WriteModel(filepath.Join(dir, "model.bin"), params)
	if err == nil {
		err = s.mw.Write(metrics.EndRecord{Time: now(), Step: res.Steps,
			Eval:     &metrics.Eval{Loss: metrics.Float(res.TestLoss), Accuracy: metrics.Float(res.TestAccuracy)},
			Checksum: res.Checksum, WallSeconds: wall.Seconds()})
	}
	if err != nil {
		return Outcome{Result: res}, s.unfinished(res.Pass, res.Steps, err)
	}
	s.printCommitted(res.LRScale)
	if math.IsNaN(res.TestAccuracy) { // a worker script that gave no evaluate function
		fmt.Fprintf(s.o.Out, "finished %d steps on %d ranks\nrun directory: %s\n", res.Steps, s.o.World.Size(), dir)
	} else {
		fmt.Fprintf(s.o.Out, "test accuracy %.4f, test loss %.4f after %d steps on %d ranks\nrun directory: %s\n",
			res.TestAccuracy, res.TestLoss, res.Steps, s.o.World.Size(), dir)
	}
	out, log := s.o.Out, s.o.Log
	return Outcome{Result: res, Report: func() error {
		index, err := report.Write(dir, "", report.Options{CSV: true})
		if err != nil {
			// The run itself succeeded; `hdet report` can be run again later.
			log.Warn().Err(err).Msg("writing the report failed")
			return nil
		}
		fmt.Fprintf(out, "report: %s\n", index)
		return nil
	}}, nil
}

// printCommitted (rank 0) says what a run that committed trained its main
// pass at: each value (a learning rate with the rollbacks' halving
// lrScale), how far the search moved it from the config's, and why an
// explorer kept the config's value where it did.
func (s *session) printCommitted(lrScale float64) {
	cs := s.ctrl.Commitments()
	if cs == nil {
		return
	}
	descs := s.ctrl.Descriptors()
	parts := make([]string, len(cs))
	for i, c := range cs {
		c = engine.ScaleCommit(c, lrScale)
		parts[i] = s.committedPart(c, descs[i].Scale)
		if c.Note != "" { // the no-harm rule's verdict: why it kept the script's value, or the move's t (docs/design.md §1.2)
			parts[i] += " (" + c.Note + ")"
		}
	}
	fmt.Fprintf(s.o.Out, "committed after a search pass of %d steps: %s\n", s.ctrl.SearchEnd(), strings.Join(parts, ", "))
}

// committedPart is one hyperparameter's part of printCommitted's line.
func (s *session) committedPart(c controller.ParamCommit, sc hparam.Scale) string {
	if p, ok := engine.As[engine.PeakLR](s.replica); ok && hparam.IsLR(c.Name) && !c.Frozen {
		// a multiplier of the script's own rate: what to write into it
		peak := p.PeakLR()
		return fmt.Sprintf("%s x%.3g: peak lr %.3g -> %.3g (x%.3g)", c.Name, c.Value, peak, peak*c.Value, c.Value)
	}
	if c.Frozen {
		return fmt.Sprintf("%s %.3g (frozen)", c.Name, c.Value)
	}
	moved := fmt.Sprintf("x%.3g", math.Exp(c.Offset))
	if sc != hparam.Log {
		moved = fmt.Sprintf("%+.3g", c.Offset)
	}
	return fmt.Sprintf("%s %.3g (%s the schedule's)", c.Name, c.Value, moved)
}

// unfinished (rank 0) handles a run trained to its end whose model.bin or
// end record could not be written (a full disk): its last checkpoint, at
// the final step, would make a relaunch refuse the run as finished, so it
// is removed, and the relaunch runs the last windows again from the one
// before and writes both.
func (s *session) unfinished(pass, step int, err error) error {
	last := filepath.Join(s.checkpointDir(), checkpoint.FileName(pass, step))
	if rerr := os.Remove(last); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return fmt.Errorf("%w; removing the final checkpoint %s also failed (%v): move it away before launching again", err, last, rerr)
	}
	return fmt.Errorf("%w; the run is not finished: launch the same command again to run its last windows and write them", err)
}

// hostBuffer is the converge on the host slice through one of device's
// allreducers.
type hostBuffer struct{ a device.Allreducer }

func (h hostBuffer) AllreduceSum(buf []float32) error {
	return h.a.Allreduce(device.HostBuffer(buf), reduce.Sum)
}
