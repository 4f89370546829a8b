package bridge

// The script's saved states beside hdet's checkpoints: one file per
// checkpoint and rank (RUN_DIR/worker/rank-R/<pass>-step-S.pt), kept as
// long as the checkpoint it goes with (docs/pytorch.md#resume).

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/plan"
)

// PruneStates removes this rank's state files that no checkpoint kept
// refers to (workload.StateSaver).
func (r replica) PruneStates() error {
	return pruneStates(r.env.CheckpointDir, StateDir(r.runDir, r.env.World.Rank()))
}

// RemoveStates removes every rank's state files: the run starts over.
func (r replica) RemoveStates() error {
	return os.RemoveAll(filepath.Join(r.runDir, "worker"))
}

// pruneStates removes the worker state files (and temporary files) in
// stateDir that no checkpoint in dir refers to.
func pruneStates(dir, stateDir string) error {
	names, err := checkpoint.List(dir)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !slices.Contains(names, stateCheckpoint(e.Name())) {
			errs = append(errs, os.Remove(filepath.Join(stateDir, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// stateCheckpoint is the name of the checkpoint a state file goes with,
// "" for a name that is no state file's.
func stateCheckpoint(name string) string {
	rest, ok := strings.CutSuffix(name, ".pt")
	passName, stepStr, found := strings.Cut(rest, "-step-")
	step, err := strconv.Atoi(stepStr)
	if !ok || !found || err != nil {
		return ""
	}
	for _, pass := range []int{plan.PassSearch, plan.PassMain} {
		if PassName(pass) == passName {
			return checkpoint.FileName(pass, step)
		}
	}
	return ""
}
