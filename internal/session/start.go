package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hdet-dev/hdet/internal/atomicfile"
	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/workload"
)

// start applies a warm start (every rank, fresh runs) and opens the run
// directory with its start record (rank 0).
func (s *session) start(ctx context.Context) error {
	if !s.resumed {
		if err := s.warmStart(); err != nil {
			return err
		}
	}
	if s.rank != 0 {
		return nil
	}
	return s.openRunDir(ctx)
}

// warmStart puts train.warm_start's model, with this replica's noise, into
// the parameters, when the config names one.
func (s *session) warmStart() error {
	cfg := s.cfg
	if cfg.Train.WarmStart == "" {
		return nil
	}
	theta0, err := checkpoint.ReadModel(cfg.Train.WarmStart, s.replica.ParamCount())
	if err != nil {
		return Usagef("train.warm_start: %v", err)
	}
	engine.WarmStart(s.replica.SyncBuffer(false)[:s.replica.ParamCount()], theta0, cfg.Train.WarmNoise, cfg.Train.Seed, s.lay.Replica(s.rank)) // a replica's ranks start alike
	if s.rank == 0 {
		s.o.Log.Info().Str("model", cfg.Train.WarmStart).Float64("nu", cfg.Train.WarmNoise).Msg("warm noisy start")
	}
	return nil
}

// restoreStart puts every rank back at its step-0 state for the main pass
// (engine.Options.Restart): the replica's own (workload.Restarter), and
// the warm start again where its parameters were drawn anew.
func (s *session) restoreStart(ctx context.Context) error {
	r, ok := engine.As[workload.Restarter](s.replica)
	if !ok {
		return errors.New("this workload cannot go back to its step-0 state")
	}
	drawn, err := r.RestartMainPass(ctx)
	if err != nil || !drawn {
		return err
	}
	return s.warmStart()
}

func (s *session) openRunDir(ctx context.Context) error {
	cfg := s.cfg
	if err := os.MkdirAll(cfg.Run.Dir, 0o755); err != nil {
		return runDirError(err, cfg.Run.Dir)
	}
	b, err := cfg.YAML()
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(cfg.Run.Dir, "config.yaml"), b); err != nil {
		return runDirError(err, cfg.Run.Dir)
	}
	// What launches killed mid-write left (rank 0 holds the lock: no one
	// else writes here); on a small disk it is room the run needs.
	for _, dir := range []string{cfg.Run.Dir, s.checkpointDir()} {
		if gone, err := atomicfile.RemoveStale(dir); err != nil {
			s.o.Log.Warn().Err(err).Str("dir", dir).Msg("could not remove temporary files left by an earlier launch")
		} else if len(gone) > 0 {
			s.o.Log.Info().Strs("files", gone).Str("dir", dir).Msg("removed temporary files left by an earlier launch")
		}
	}
	mpath := filepath.Join(cfg.Run.Dir, "metrics.jsonl")
	if s.resumed || s.restarted {
		// Windows after the checkpoint will run again: drop their records.
		if err := metrics.TruncateAfter(mpath, s.resumePass, s.resumeAt); err != nil {
			return fmt.Errorf("metrics.jsonl: %w", err)
		}
	}
	mw, err := metrics.OpenWriter(mpath)
	if err != nil {
		return runDirError(err, cfg.Run.Dir)
	}
	s.mw = mw
	s.closers = append(s.closers, func() { _ = mw.Close() })
	rec, err := s.startRecord(ctx)
	if err != nil {
		return err
	}
	return mw.Write(rec)
}

// runDirError says why the run directory could not be written. A full disk
// (or quota) and a failing device are not what the user typed: they are
// runtime errors (exit 1), and a full one names the room left and says the
// same command resumes once there is room. Anything else (a path that is a
// file, no permission) is a usage error.
func runDirError(err error, dir string) error {
	switch {
	case errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("run.dir: %w; nothing written is lost: launch the same command again once there is room", atomicfile.NoSpace(err, dir))
	case errors.Is(err, syscall.EIO):
		return fmt.Errorf("run.dir: %w", err)
	}
	return Usagef("run.dir: %v", err)
}

// startRecord describes the run: its shape and, for each explored
// hyperparameter, the spread and bounds in force, which the first plan
// carries (the controller hands the same plan to the loop, and its events
// go into the first window's record).
func (s *session) startRecord(ctx context.Context) (metrics.StartRecord, error) {
	cfg := s.cfg
	hash, err := cfg.Hash()
	if err != nil {
		return metrics.StartRecord{}, err
	}
	plan, evs, err := s.ctrl.Plan(ctx)
	if err != nil {
		return metrics.StartRecord{}, Usagef("explorers: plan of window %d: %v", s.resumeAt/cfg.Train.Window, err)
	}
	s.events = append(s.events, evs...)
	var params []metrics.Param
	for i, d := range s.ctrl.Descriptors() {
		pp := plan.Params[i]
		params = append(params, metrics.Param{Name: pp.Name, Scale: string(d.Scale), Spread: string(pp.Spread.Kind),
			Alpha: pp.Spread.Alpha, Lower: pp.Bounds.Lower, Upper: pp.Bounds.Upper})
	}
	rec := metrics.StartRecord{Time: now(), Ranks: s.replicas(), TotalSteps: s.steps,
		WindowSteps: cfg.Train.Window, SyncMode: cfg.Train.Sync, Hyperparameters: params, ConfigHash: hash, ResumedFrom: s.resumeAt}
	if s.lay.Size > 1 { // ranks is then the replicas' count; the window records are per replica
		rec.ReplicaSize, rec.WorldSize = s.lay.Size, s.lay.World
	}
	return rec, nil
}

func now() float64 { return float64(time.Now().UnixMilli()) / 1e3 }
