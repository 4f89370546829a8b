package session

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// windowSteps lists the steps of the window records in a run's
// metrics.jsonl, in file order, and counts its end records.
func windowSteps(t *testing.T, dir string) (steps []int, ends int) {
	t.Helper()
	recs, _, err := metrics.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	require.NoError(t, err)
	for _, r := range metrics.Of[metrics.WindowRecord](recs) {
		steps = append(steps, r.Step)
	}
	return steps, len(metrics.Of[metrics.EndRecord](recs))
}

// A launch that ended before any checkpoint was written (killed in setup
// right after its start record, or every write failed) leaves this run's
// own metrics.jsonl and no checkpoint: the same command starts the run over
// instead of refusing the directory forever. Another run's log is still
// refused.
func TestRelaunchWithoutACheckpointStartsOver(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	o, _, err := run(t, dir)
	require.NoError(t, err)
	want := o.Result.Checksum

	// As if the first launch had died after window 1, before any checkpoint.
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "checkpoints")))
	require.NoError(t, metrics.TruncateAfter(filepath.Join(dir, "metrics.jsonl"), 0, 20))
	_, _, err = run(t, dir, "train.seed=5")
	var ue *UsageError
	require.ErrorAs(t, err, &ue, "another run's log")
	assert.Contains(t, err.Error(), "already holds a run's metrics.jsonl and no checkpoint")

	o, _, err = run(t, dir)
	require.NoError(t, err)
	assert.Equal(t, want, o.Result.Checksum)
	steps, ends := windowSteps(t, dir)
	assert.Equal(t, []int{10, 20, 30, 40}, steps, "each window once")
	assert.Equal(t, 1, ends)
}

// A run trained to its end whose model.bin cannot be written (here: a
// directory in its way, as a full disk would refuse it) fails without
// leaving its final checkpoint, so the same command runs the last windows
// again and finishes, rather than refusing the run as finished.
func TestFinishThatFailsCanBeRelaunched(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	o, _, err := run(t, dir)
	require.NoError(t, err)
	want := o.Result.Checksum
	require.NoError(t, os.RemoveAll(dir))

	require.NoError(t, os.MkdirAll(filepath.Join(dir, "model.bin", "x"), 0o755))
	_, _, err = run(t, dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the run is not finished: launch the same command again")
	_, err = os.Stat(filepath.Join(dir, "checkpoints", "ckpt-000000000040.hdet"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the final checkpoint is gone")

	require.NoError(t, os.RemoveAll(filepath.Join(dir, "model.bin")))
	o, _, err = run(t, dir)
	require.NoError(t, err)
	assert.Equal(t, want, o.Result.Checksum)
	steps, ends := windowSteps(t, dir)
	assert.Equal(t, []int{10, 20, 30, 40}, steps, "each window once")
	assert.Equal(t, 1, ends)
}
