package bridge

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/hdet-dev/hdet/internal/workload"
)

func TestStateCheckpoint(t *testing.T) {
	assert.Equal(t, checkpoint.FileName(plan.PassSearch, 40), stateCheckpoint("search-step-40.pt"))
	assert.Equal(t, checkpoint.FileName(plan.PassMain, 0), stateCheckpoint("main-step-0.pt"))
	for _, n := range []string{"main-step-0.pt.tmp", "other-step-1.pt", "main-step-x.pt", "search-40.pt", "ckpt.pt"} {
		assert.Empty(t, stateCheckpoint(n), n)
	}
}

// The state files kept are those of the checkpoints kept; the rest go,
// temporary files of a killed save included.
func TestPruneStates(t *testing.T) {
	dir, states := t.TempDir(), t.TempDir()
	for _, n := range []string{checkpoint.FileName(plan.PassSearch, 20), checkpoint.FileName(plan.PassMain, 10)} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), nil, 0o644))
	}
	for _, n := range []string{"search-step-10.pt", "search-step-20.pt", "main-step-10.pt", "main-step-20.pt.tmp", "main-step-20.pt"} {
		require.NoError(t, os.WriteFile(filepath.Join(states, n), nil, 0o644))
	}
	require.NoError(t, pruneStates(dir, states))
	entries, err := os.ReadDir(states)
	require.NoError(t, err)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	assert.ElementsMatch(t, []string{"search-step-20.pt", "main-step-10.pt"}, left)
}

// A replica prunes its own rank's state directory against the run's
// checkpoints, and removes every rank's when the run starts over.
func TestReplicaPrunesAndRemovesItsStates(t *testing.T) {
	run := t.TempDir()
	ckpts := filepath.Join(run, "checkpoints")
	require.NoError(t, os.MkdirAll(ckpts, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ckpts, checkpoint.FileName(plan.PassSearch, 20)), nil, 0o644))
	for _, rank := range []int{0, 1} {
		dir := StateDir(run, rank)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for _, n := range []string{StateFile(plan.PassSearch, 10), StateFile(plan.PassSearch, 20)} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, n), nil, 0o644))
		}
	}
	r := replica{runDir: run, env: workload.Env{CheckpointDir: ckpts, World: rankOf{rank: 1}}}
	require.NoError(t, r.PruneStates())
	assert.NoFileExists(t, filepath.Join(StateDir(run, 1), StateFile(plan.PassSearch, 10)))
	assert.FileExists(t, filepath.Join(StateDir(run, 1), StateFile(plan.PassSearch, 20)))
	assert.FileExists(t, filepath.Join(StateDir(run, 0), StateFile(plan.PassSearch, 10)), "another rank's are its own to prune")
	require.NoError(t, r.RemoveStates())
	assert.NoDirExists(t, filepath.Join(run, "worker"))
	assert.FileExists(t, filepath.Join(ckpts, checkpoint.FileName(plan.PassSearch, 20)))
}

// rankOf is a workload.Comm that knows only its rank.
type rankOf struct {
	workload.Comm
	rank int
}

func (r rankOf) Rank() int { return r.rank }
