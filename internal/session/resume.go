package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/config"
	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/workload"
)

func (s *session) checkpointDir() string { return filepath.Join(s.cfg.Run.Dir, "checkpoints") }

// resume loads the newest valid checkpoint of the run directory, if any,
// on every rank (engine.Restore, the routine a rollback uses too), after
// checking it belongs to this run and fits this config.
func (s *session) resume(ctx context.Context) error {
	if st, ok := engine.As[workload.StateSaver](s.replica); ok {
		return s.resumeWorker(ctx, st)
	}
	return s.restore(ctx)
}

// restore loads the newest valid checkpoint into the replica and the
// controller (a fresh run when there is none).
func (s *session) restore(ctx context.Context) error {
	log := s.o.Log
	got, evs, err := engine.Restore(ctx, engine.RestoreOptions{Comm: s.o.World, Dir: s.checkpointDir(),
		Replica: s.replica, Controller: s.ctrl, Log: log, Check: s.compatible, OwnBuffer: s.sharded()})
	if errors.Is(err, checkpoint.ErrNone) {
		return s.fresh(got.Skipped)
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		return err
	}
	if err != nil {
		return Usagef("run.dir %s: %v", s.cfg.Run.Dir, err)
	}
	ck := got.State
	s.events = append(s.events, evs...)
	s.resumeAt, s.resumePass, s.resumeGuard, s.resumed = ck.Step, ck.Pass, ck.Guard, true
	if s.rank == 0 {
		if ck.Ranks != s.replicas() { // replicas: ranks when train.replica_size is 1
			log.Warn().Int("checkpoint_ranks", ck.Ranks).Int("ranks", s.replicas()).Msg("resuming with a different number of ranks (replicas): parameters are shared, the spread is recomputed")
		}
		log.Info().Str("path", got.Path).Int("pass", ck.Pass).Int("step", ck.Step).Msg("resuming from checkpoint")
	}
	return nil
}

// fresh checks that a run directory without a usable checkpoint can take a
// new run.
func (s *session) fresh(skipped []checkpoint.Skipped) error {
	if len(skipped) > 0 {
		return Usagef("run.dir %s: every checkpoint is damaged (newest: %v); move them away to start afresh", s.cfg.Run.Dir, skipped[0].Err)
	}
	// No checkpoint to resume, but another run's log: appending to it
	// would mix two runs in one metrics.jsonl. This run's own log, from a
	// launch that ended before its first checkpoint was written (killed
	// in setup, or every write failed on a full disk), is no other run's:
	// the run starts over and its windows are dropped from the log.
	mpath := filepath.Join(s.cfg.Run.Dir, "metrics.jsonl")
	if fi, err := os.Stat(mpath); err == nil && fi.Size() > 0 {
		if s.ownUnsavedLog(mpath) {
			s.restarted = true
			if s.rank == 0 {
				s.o.Log.Warn().Str("run_dir", s.cfg.Run.Dir).Msg("no checkpoint, but this run's own metrics.jsonl from a launch that ended before writing one: starting the run over")
			}
			return nil
		}
		return Usagef("run.dir %s already holds a run's metrics.jsonl and no checkpoint to resume from; use another run.dir or remove it", s.cfg.Run.Dir)
	}
	return nil
}

// workerFresh checks that a worker run's directory without a checkpoint
// can take the run from its beginning: empty, or this run's own unfinished
// log (the run starts over, and the windows it runs again are dropped from
// metrics.jsonl); a finished run, or another run's log, is refused. Rank 0 alone
// decides (it alone writes metrics.jsonl, and its config holds the
// script's explorers, which the hash covers).
func (s *session) workerFresh() error {
	if s.rank != 0 {
		return nil
	}
	mpath := filepath.Join(s.cfg.Run.Dir, "metrics.jsonl")
	if recs, _, err := metrics.ReadFile(mpath); err == nil && len(recs) > 0 && recs[len(recs)-1].Type() == metrics.TypeEnd {
		return Usagef("run.dir %s holds a finished run (metrics.jsonl ends with its end record); use another run.dir for a new run", s.cfg.Run.Dir)
	}
	return s.fresh(nil)
}

// ownUnsavedLog reports whether the metrics.jsonl at path was written by
// launches of this very run (every start record has this config's hash)
// that did not finish it.
func (s *session) ownUnsavedLog(path string) bool {
	hash, err := s.cfg.Hash()
	if err != nil {
		return false
	}
	recs, _, err := metrics.ReadFile(path)
	if err != nil {
		return false
	}
	for _, r := range recs {
		if _, end := r.(metrics.EndRecord); end {
			return false
		}
		if st, ok := r.(metrics.StartRecord); ok && st.ConfigHash != hash {
			return false
		}
	}
	return true
}

// compatible refuses a checkpoint written by another run, or for a config
// it cannot continue (docs/run-directory.md, "What may change on resume"), naming each field that differs
// with both values.
func (s *session) compatible(ck *checkpoint.State, path string) error {
	old, err := s.load(ck.Config, nil)
	if err != nil {
		return Usagef("checkpoint %s: its config does not load: %v", path, err)
	}
	if _, ok := engine.As[workload.Explorers](s.replica); ok && s.rank != 0 {
		// Only rank 0 merges the replica's explorers into its config
		// (openExplorers); its check compares them.
		old.Explorers = s.cfg.Explorers
	}
	why := configChanges(old, s.cfg)
	// FSDP2 shards differ by position: rank 0's are the checkpoint's
	// (setup compared the positions' shapes across the replicas).
	sameShape := !s.sharded() || s.rank == 0
	if sameShape && (ck.ParamCount != s.replica.ParamCount() || len(ck.Buffer) != len(s.replica.SyncBuffer(true))) {
		why = append(why, fmt.Sprintf("the parameter count (%d in the checkpoint, %d now)", ck.ParamCount, s.replica.ParamCount()))
	}
	if ck.Step == s.steps && len(why) == 0 {
		return Usagef("run.dir %s holds a finished run (its last checkpoint is at step %d of %d); use another run.dir for a new run", s.cfg.Run.Dir, ck.Step, s.steps)
	}
	if ck.Step > s.steps {
		why = append(why, fmt.Sprintf("the run length (the checkpoint is at step %d, the run has %d steps)", ck.Step, s.steps))
	}
	if len(why) > 0 {
		return Usagef("run.dir %s holds a checkpoint (%s) that does not fit this config: %s; use another run.dir to start afresh",
			s.cfg.Run.Dir, filepath.Base(path), strings.Join(why, "; "))
	}
	return nil
}

// configChanges lists the fields a checkpoint cannot survive a change of:
// the model's shape and optimizer, the run's seed and length, the window,
// the explorers and their spreads.
func configChanges(old, cur *config.Config) []string {
	var why []string
	field := func(name string, was, now any) {
		if a, b := jsonOf(was), jsonOf(now); a != b {
			why = append(why, fmt.Sprintf("%s (%s in the checkpoint, %s now)", name, a, b))
		}
	}
	if fmt.Sprint(old.Workload.Hidden) != fmt.Sprint(cur.Workload.Hidden) || old.Workload.Kind != cur.Workload.Kind {
		why = append(why, fmt.Sprintf("the model's shape (workload %s %v in the checkpoint, %s %v now)", old.Workload.Kind, old.Workload.Hidden, cur.Workload.Kind, cur.Workload.Hidden))
	}
	field("workload.optimizer", old.Workload.Optimizer, cur.Workload.Optimizer)
	if old.Train.Seed != cur.Train.Seed {
		why = append(why, fmt.Sprintf("train.seed (%d in the checkpoint, %d now): it is another run's", old.Train.Seed, cur.Train.Seed))
	}
	field("train.steps", old.Train.Steps, cur.Train.Steps)
	field("train.epochs", old.Train.Epochs, cur.Train.Epochs)
	field("train.window", old.Train.Window, cur.Train.Window)
	field("train.probe_examples", old.Train.ProbeExamples, cur.Train.ProbeExamples)
	field("explorers", explorerNames(old), explorerNames(cur))
	if len(old.Explorers) == len(cur.Explorers) {
		for i := range old.Explorers {
			field(fmt.Sprintf("explorers[%d] (%s).config.spread", i, cur.Explorers[i].Name), old.Explorers[i].Config["spread"], cur.Explorers[i].Config["spread"])
		}
	}
	return why
}

func explorerNames(c *config.Config) []string {
	out := make([]string, len(c.Explorers))
	for i, e := range c.Explorers {
		out[i] = e.Name + ":" + e.Plugin
	}
	return out
}

func jsonOf(v any) string {
	if str, ok := v.(string); ok {
		return str
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
