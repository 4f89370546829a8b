package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// multiSteps is the length of the multi-host training runs: 30 windows.
const multiSteps = "300"

// TestMultiHost runs hdet across the test bed's 3 hosts (2 ranks each)
// under mpirun --hostfile and srun --mpi=pmix -N 3: the self-check, a run
// bit-identical to the same 6 ranks on one host, a checkpoint resumed on 2
// hosts, and a job written by `hdet sbatch --nodes 3` run by sbatch.
func TestMultiHost(t *testing.T) {
	tb := startTestbed(t, 3, true)
	conf := cfg("local", lrDropout) + "\n"
	steps := []string{"--set", "train.steps=" + multiSteps}
	ref := runHDET(t, 6, conf, steps...) // one host, 6 ranks
	require.NoError(t, ref.err, ref.stderr)
	want := ref.end(t).Checksum

	t.Run("self-check", func(t *testing.T) {
		// The bed's PMIx tree fence is not a barrier across its nodes, and
		// Open MPI 4.1 then crashes in MPI_Init now and then under srun
		// (scripts/testbed/slurm-multi-up.sh): the bed must ask for the ring.
		cmd := exec.Command("scontrol", "show", "config")
		cmd.Env = tb.env
		conf, err := cmd.Output()
		require.NoError(t, err)
		assert.Regexp(t, `PMIxCollFence\s*=\s*ring`, string(conf))
		hdet, _ := hdetBinaries(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for name, cmd := range map[string]func() ([]byte, error){
			"mpirun": tb.mpirun(ctx, t, 3, 2, hdet, "run", "--self-check").CombinedOutput,
			"srun":   tb.srun(ctx, t, 3, 2, hdet, "run", "--self-check").CombinedOutput,
		} {
			out, err := cmd()
			require.NoError(t, err, "%s: %s", name, out)
			hosts := ranksByHost(t, string(out), 6)
			t.Logf("%s: ranks by host %v", name, hosts)
			assert.Equal(t, map[string][]int{"hdnode1": {0, 1}, "hdnode2": {2, 3}, "hdnode3": {4, 5}}, hosts, name)
		}
	})

	t.Run("train equals one host", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		args, runDir := hdetArgs(t, t.TempDir(), conf, steps...)
		r := runOn(tb.mpirun(ctx, t, 3, 2, args...), runDir)
		require.NoError(t, r.err, r.stderr)
		assert.Equal(t, want, r.end(t).Checksum, "mpirun over 3 hosts")
		args, runDir = hdetArgs(t, t.TempDir(), conf, steps...)
		r = runOn(tb.srun(ctx, t, 3, 2, args...), runDir)
		require.NoError(t, r.err, r.stderr)
		assert.Equal(t, want, r.end(t).Checksum, "srun -N 3")
	})

	t.Run("checkpoint on 3 hosts, resume on 2", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		args, runDir := hdetArgs(t, t.TempDir(), conf, steps...)
		cmd := tb.mpirun(ctx, t, 3, 2, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		for windowsDone(runDir) < 3 && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGUSR1)) // mpirun passes it to every host's ranks
		require.Error(t, cmd.Wait(), "a stopped run exits non-zero")
		require.Contains(t, stderr.String(), "stopped by a signal after checkpointing")
		stoppedAt := windowsDone(runDir)
		require.Less(t, stoppedAt, 30)
		// The same 6 ranks on 2 hosts, under Slurm this time.
		r := runOn(tb.srun(ctx, t, 2, 3, args...), runDir)
		require.NoError(t, r.err, r.stderr)
		assert.Contains(t, r.stderr, "resuming from checkpoint")
		assert.Equal(t, want, r.end(t).Checksum, "stopped after window %d", stoppedAt)
	})

	t.Run("hdet sbatch --nodes 3", func(t *testing.T) {
		_, f, r := sbatchMulti(t, tb, conf, "multi")
		assert.Equal(t, "hdnode[1-3]", f["NodeList"])
		assert.Equal(t, want, r.end(t).Checksum, "%s", r.stdout)
	})
}

// sbatchMulti submits conf as `hdet sbatch --nodes 3 --ntasks-per-node 2`
// (extra flags after) under the bed's multi-node Slurm, with the test's
// step count and data path written in, waits for the job to complete and
// returns the script, its scontrol fields and its run (stdout: the job's log).
func sbatchMulti(t *testing.T, tb *testbed, conf, name string, extra ...string) (string, map[string]string, hdetRun) {
	t.Helper()
	c := tb.slurm()
	hdet, plugins := hdetBinaries(t)
	dir := t.TempDir()
	config := filepath.Join(dir, name+".yaml")
	job := strings.NewReplacer("steps: 80,", "steps: "+multiSteps+",",
		"batch_size: 32}", "batch_size: 32, data: "+mnistDir(t)+"}").Replace(conf)
	require.NoError(t, os.WriteFile(config, []byte(job), 0o644))
	args := append([]string{config, "--nodes", "3", "--ntasks-per-node", "2"}, extra...)
	script := sbatchScript(t, dir, "job.sbatch", append(args,
		"--time", "10:00", "--signal-lead", "60", "--hdet", hdet, "--run-root", filepath.Join(dir, "runs"))...)
	body, err := os.ReadFile(script)
	require.NoError(t, err)
	c.env = append(c.env, "HDET_PLUGIN_DIR="+plugins)
	id := strings.TrimSpace(c.run(t, dir, "sbatch", "--parsable", script))
	f := c.waitState(t, id, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
	log, err := os.ReadFile(filepath.Join(dir, "hdet-"+name+"-"+id+".out"))
	require.NoError(t, err)
	require.Equal(t, "COMPLETED", f["JobState"], "job %v\n%s", f, log)
	t.Logf("job %s ran on %s", id, f["NodeList"])
	return string(body), f, hdetRun{dir: filepath.Join(dir, "runs", id), stdout: string(log)}
}
