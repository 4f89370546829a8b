package tests

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/faults"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/testenv"
)

// hdetBinaries builds hdet and the built-in explorers into one folder, which
// is then both the binary's folder and the plugin directory.
func hdetBinaries(t testing.TB) (hdet, pluginDir string) {
	t.Helper()
	for _, e := range []string{"lr", "dropout", "weight-decay"} {
		buildBinary(t, "./cmd/hdet-explorer-"+e)
	}
	hdet = buildBinary(t, "./cmd/hdet")
	return hdet, filepath.Dir(hdet)
}

// faultsEnv is the argument that asks withFaults for test-only faults:
// faultsEnv+"nan=2@3", or hitBy("nan", "2@3") (see package internal/faults).
const faultsEnv = faults.Env + "="

// withFaults takes a faultsEnv argument out of an hdet command line and
// returns the binary to run: hdet-faults (built with -tags faults and
// testTags) and the environment that sets the faults on every rank, or the
// hdet of hdetBinaries.
func withFaults(t testing.TB, args []string) (bin string, rest, env []string) {
	t.Helper()
	hdet, _ := hdetBinaries(t)
	for i, a := range args {
		if strings.HasPrefix(a, faultsEnv) {
			rest = append(append(rest, args[:i]...), args[i+1:]...)
			return buildTagged(t, "./cmd/hdet", "hdet-faults", "faults,"+testTags), rest, []string{a}
		}
	}
	return hdet, args, nil
}

// mnistDir is the MNIST folder `make data` fills; tests that train on it
// skip without it on a developer box and fail under CI.
func mnistDir(t testing.TB) string {
	t.Helper()
	return testenv.NeedMNIST(t)
}

// hdetRun is one `mpirun -np n hdet run` with its outputs.
type hdetRun struct {
	dir            string
	stdout, stderr string
	err            error
}

// runHDET writes cfg to a file and runs it on n ranks with the extra flags.
func runHDET(t testing.TB, n int, cfg string, args ...string) hdetRun {
	t.Helper()
	_, plugins := hdetBinaries(t)
	hdet, args, env := withFaults(t, args)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.in.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o644))
	runDir := filepath.Join(dir, "run")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	full := append([]string{hdet, "run", path, "--run-dir", runDir, "--plugin-dir", plugins, "--set", "workload.data=" + mnistDir(t)}, args...)
	cmd := mpirunCmd(ctx, t, n, full...)
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return hdetRun{dir: runDir, stdout: out.String(), stderr: errb.String(), err: err}
}

// records reads the run's metrics.jsonl.
func (r hdetRun) records(t testing.TB) []metrics.Record {
	t.Helper()
	recs, truncated, err := metrics.ReadFile(filepath.Join(r.dir, "metrics.jsonl"))
	require.NoError(t, err)
	require.False(t, truncated)
	return recs
}

// end is the run's end record.
func (r hdetRun) end(t testing.TB) metrics.EndRecord {
	t.Helper()
	recs := r.records(t)
	require.NotEmpty(t, recs)
	last, ok := recs[len(recs)-1].(metrics.EndRecord)
	require.True(t, ok, "the run did not finish:\n%s", r.stderr)
	return last
}

// windows are the run's window records.
func (r hdetRun) windows(t testing.TB) []metrics.WindowRecord {
	return metrics.Of[metrics.WindowRecord](r.records(t))
}
