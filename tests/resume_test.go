package tests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// A run long enough to be signalled mid-run on a fast machine: the signal
// comes after 3 windows.
const (
	longSteps   = "800"
	longWindows = 80
)

// windowsDone counts the window records in a run's metrics.jsonl so far.
func windowsDone(runDir string) int {
	recs, _, err := metrics.ReadFile(filepath.Join(runDir, "metrics.jsonl"))
	if err != nil {
		return 0
	}
	return len(metrics.Of[metrics.WindowRecord](recs))
}

// A run stopped by SIGUSR1 checkpoints, exits with code 3, and resumed ends
// with parameters bit-identical to the same run left alone.
func TestSignalCheckpointResumeIsBitExact(t *testing.T) {
	conf := cfg("local", lrDropout) + "\n"
	long := []string{"--set", "train.steps=" + longSteps}
	whole := runHDET(t, 4, conf, long...)
	require.NoError(t, whole.err, whole.stderr)
	want := whole.end(t).Checksum

	hdet, plugins := hdetBinaries(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))
	runDir := filepath.Join(dir, "run")
	args := append([]string{hdet, "run", path, "--run-dir", runDir, "--plugin-dir", plugins, "--set", "workload.data=" + mnistDir(t)}, long...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := mpirunCmd(ctx, t, 4, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	for windowsDone(runDir) < 3 {
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGUSR1)) // mpirun forwards it to every rank
	err := cmd.Wait()
	require.Error(t, err, "a stopped run exits non-zero")
	assert.Contains(t, stderr.String(), "stopped by a signal after checkpointing")
	stoppedAt := windowsDone(runDir)
	require.Less(t, stoppedAt, longWindows, "the run stopped before its end")
	ckpts, _ := filepath.Glob(filepath.Join(runDir, "checkpoints", "ckpt-*.hdet"))
	require.NotEmpty(t, ckpts)

	cmd = mpirunCmd(ctx, t, 4, args...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "resuming from checkpoint")
	resumed := hdetRun{dir: runDir}
	assert.Equal(t, want, resumed.end(t).Checksum, "resumed at window %d", stoppedAt)
	assert.Equal(t, longWindows, windowsDone(runDir), "metrics.jsonl holds each window once")
}
