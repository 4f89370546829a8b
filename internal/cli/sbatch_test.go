package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sbatchIn runs `hdet sbatch args...` in dir and returns the exit code,
// stdout and stderr.
func sbatchIn(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	t.Chdir(dir)
	var out, errb bytes.Buffer
	s := Streams{Out: &out, Err: &errb}
	code := exitCode(s, "sbatch", runSbatch(s, args))
	return code, out.String(), errb.String()
}

func writeConfig(t *testing.T, dir string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mnist.yaml"), []byte("steps: 10\n"), 0o644))
}

func TestSbatchFlagsAfterConfigAndAbsolutePaths(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir)
	code, out, stderr := sbatchIn(t, dir, "mnist.yaml", "--nodes", "2", "--gpus-per-node", "4",
		"--time", "1-00:00:00", "--partition", "debug", "--account", "acct", "--hdet", "bin/hdet")
	require.Equal(t, ExitOK, code, stderr)
	lines := strings.Split(out, "\n")
	assert.Contains(t, lines, "#SBATCH --nodes=2")
	assert.Contains(t, lines, "#SBATCH --gpus-per-node=4")
	assert.Contains(t, lines, "#SBATCH --ntasks-per-node=4")
	assert.Contains(t, lines, "#SBATCH --time=1-00:00:00")
	assert.Contains(t, lines, "#SBATCH --partition=debug")
	assert.Contains(t, lines, "#SBATCH --account=acct")
	assert.Contains(t, lines, "#SBATCH --job-name=hdet-mnist", "named after the config")
	assert.Contains(t, lines, "#SBATCH --signal=B:USR1@300")
	assert.Contains(t, lines, "CONFIG='"+filepath.Join(dir, "mnist.yaml")+"'")
	assert.Contains(t, lines, "HDET='"+filepath.Join(dir, "bin/hdet")+"'")
	assert.Contains(t, lines, "RUN_DIR='"+filepath.Join(dir, "runs")+"'/$SLURM_JOB_ID")
	assert.Contains(t, lines, "# Written by: hdet sbatch mnist.yaml --nodes 2 --gpus-per-node 4 --time 1-00:00:00 --partition debug --account acct --hdet bin/hdet")
}

func TestSbatchDefaultsToThisBinaryAndPathLookup(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir)
	self, err := os.Executable()
	require.NoError(t, err)
	code, out, stderr := sbatchIn(t, dir, "--time", "10", "--ntasks-per-node", "4", "mnist.yaml")
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, out, "HDET='"+self+"'\n")

	// A bare name is looked up on the nodes' PATH, as the user wrote it.
	code, out, stderr = sbatchIn(t, dir, "--time", "10", "--ntasks-per-node", "4", "--hdet", "hdet",
		"--launcher", "mpirun", "--signal-lead", "60", "--run-root", "/scratch/r", "mnist.yaml")
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, out, "HDET='hdet'\n")
	assert.Contains(t, out, "RUN_DIR='/scratch/r'/$SLURM_JOB_ID\n")
	assert.Contains(t, out, "#SBATCH --signal=B:USR1@60\n")
	assert.Contains(t, out, `mpirun -np "$SLURM_NTASKS"`)
}

func TestSbatchUsageErrors(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "adir"), 0o755))
	ok := []string{"--time", "1:00:00", "--gpus-per-node", "8"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--time", "1:00:00"}, "want one CONFIG.yaml"},
		{[]string{"mnist.yaml", "other.yaml", "--time", "1:00:00"}, "want one CONFIG.yaml"},
		{[]string{"mnist.yaml", "--gpus-per-node", "8"}, "--time is required"},
		{append([]string{"missing.yaml"}, ok...), `CONFIG "missing.yaml"`},
		{append([]string{"adir"}, ok...), "not a regular file"},
		{[]string{"mnist.yaml", "--time", "tomorrow", "--gpus-per-node", "8"}, "--time \"tomorrow\""},
		{append([]string{"mnist.yaml", "--nodes", "0"}, ok...), "--nodes 0"},
		{append([]string{"mnist.yaml", "--nodes", "two"}, ok...), "-nodes"},
		{append([]string{"mnist.yaml", "--gpus-per-node", "-8"}, "--time", "1:00:00"), "--gpus-per-node -8"},
		{[]string{"mnist.yaml", "--time", "1:00:00"}, "--ntasks-per-node: required"},
		{append([]string{"mnist.yaml", "--ntasks-per-node", "3"}, ok...), "must equal --gpus-per-node 8"},
		{append([]string{"mnist.yaml", "--cpus-per-task", "-1"}, ok...), "--cpus-per-task -1"},
		{append([]string{"mnist.yaml", "--launcher", "torchrun"}, ok...), `--launcher "torchrun"`},
		{append([]string{"mnist.yaml", "--signal-lead", "3600"}, ok...), "--signal-lead 3600: must be shorter than --time"},
		{append([]string{"mnist.yaml", "--partition", "a;b"}, ok...), `--partition "a;b"`},
		{append([]string{"mnist.yaml", "--job-name", "my job"}, ok...), `--job-name "my job"`},
		{append([]string{"mnist.yaml", "--bogus"}, ok...), "-bogus"},
	}
	for _, c := range cases {
		code, out, stderr := sbatchIn(t, dir, c.args...)
		assert.Equal(t, ExitUsage, code, "%q: %s", c.args, stderr)
		assert.Contains(t, stderr, c.want, "%q", c.args)
		assert.Empty(t, out, "%q: no script on error", c.args)
	}
}

func TestSbatchDoubleDashEndsFlags(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "--odd.yaml"), []byte("steps: 1\n"), 0o644))
	code, out, stderr := sbatchIn(t, dir, "--time", "10", "--ntasks-per-node", "2", "--", "--odd.yaml")
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, out, "CONFIG='"+filepath.Join(dir, "--odd.yaml")+"'\n")
}

func TestSbatchSync(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir)
	code, out, stderr := sbatchIn(t, dir, "mnist.yaml", "--time", "10", "--ntasks-per-node", "4", "--sync", "local")
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, out, ` --set train.sync=local "$CONFIG" &`)
	code, out, stderr = sbatchIn(t, dir, "mnist.yaml", "--time", "10", "--ntasks-per-node", "4", "--sync", "allreduce")
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, stderr, `--sync "allreduce": want local or gradients`)
	assert.Empty(t, out)
}

func TestSbatchWorker(t *testing.T) {
	dir := t.TempDir()
	code, out, stderr := sbatchIn(t, dir, "--time", "10", "--ntasks-per-node", "4", "--replica-size", "2", "--worker", "--", "python", "train.py", "--steps", "100")
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, out, ` --set train.replica_size=2 --worker -- 'python' 'train.py' '--steps' '100' &`)
	assert.Contains(t, out, "#SBATCH --job-name=hdet-train")
	code, _, stderr = sbatchIn(t, dir, "--time", "10", "--ntasks-per-node", "4", "--worker")
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, stderr, "--worker needs the worker's command after --")
}
