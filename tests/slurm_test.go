package tests

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hdet-dev/hdet/internal/testenv"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slurmCluster is a single-node Slurm cluster that scripts/slurm-cluster.sh
// brought up for one test.
type slurmCluster struct {
	dir string
	env []string // os.Environ plus SLURM_CONF and what mpirun needs as root
	// patience bounds each waitFor (0: a minute); a test whose job starts
	// PyTorch workers sets more.
	patience time.Duration
}

// startSlurm brings up a cluster in a temporary directory and tears it down
// when the test ends, passed or failed. Without Slurm it skips on a developer
// box; under CI the script installs Slurm's packages.
func startSlurm(t *testing.T) *slurmCluster {
	t.Helper()
	if !testenv.CI() { // under CI the script installs them
		for _, tool := range []string{"slurmctld", "slurmd", "munged", "sbatch"} {
			testenv.NeedTool(t, tool)
		}
	}
	script := filepath.Join(repoRoot(t), "scripts", "slurm-cluster.sh")
	c := &slurmCluster{dir: t.TempDir()}
	t.Cleanup(func() {
		if out, err := exec.Command(script, "down", c.dir).CombinedOutput(); err != nil {
			t.Errorf("slurm-cluster.sh down: %v\n%s", err, out)
		}
	})
	out, err := exec.Command(script, "up", c.dir).CombinedOutput()
	require.NoError(t, err, "slurm-cluster.sh up:\n%s", out)
	c.env = append(os.Environ(), "SLURM_CONF="+filepath.Join(c.dir, "slurm.conf"),
		"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	return c
}

// run runs a Slurm client command in dir and returns its combined output,
// failing the test (with the controller's log) when it fails.
func (c *slurmCluster) run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, c.env
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %q:\n%s\n%s", name, args, out, c.logs())
	return string(out)
}

// logs is the end of the daemons' logs, for failure messages.
func (c *slurmCluster) logs() string {
	var b strings.Builder
	for _, f := range []string{"slurmctld.log", "slurmd.log"} {
		data, _ := os.ReadFile(filepath.Join(c.dir, "log", f))
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "--- %s (end)\n%s", f, data)
	}
	return b.String()
}

// job returns the fields of `scontrol show job -o ID` (JobState, Restarts,
// ExitCode, ...).
func (c *slurmCluster) job(t *testing.T, id string) map[string]string {
	t.Helper()
	f := map[string]string{}
	for _, kv := range strings.Fields(c.run(t, "", "scontrol", "show", "job", "-o", id)) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			f[k] = v
		}
	}
	return f
}

// waitFor polls cond every 200 ms until it holds, failing after c.patience
// (default a minute, a generous bound: each step takes about a second here).
func (c *slurmCluster) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(cmp.Or(c.patience, time.Minute))
	for !cond() {
		if time.Now().After(deadline) {
			sq := exec.Command("squeue", "-a")
			sq.Env = c.env
			out, _ := sq.CombinedOutput()
			t.Fatalf("timed out waiting for %s\nsqueue:\n%s\n%s", what, out, c.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitState waits until job id is in one of states and returns its fields.
func (c *slurmCluster) waitState(t *testing.T, id string, states ...string) map[string]string {
	t.Helper()
	var f map[string]string
	c.waitFor(t, "job "+id+" to be "+strings.Join(states, "|"), func() bool {
		f = c.job(t, id)
		for _, s := range states {
			if f["JobState"] == s {
				return true
			}
		}
		return false
	})
	return f
}

// waitRequeued waits until job id, signalled to checkpoint and requeue,
// is pending again until its begin time (once the first run's batch script
// is gone: updating the start time earlier races its exit) or has ended,
// and returns its fields.
func (c *slurmCluster) waitRequeued(t *testing.T, id string) map[string]string {
	t.Helper()
	var f map[string]string
	c.waitFor(t, "job "+id+" requeued or ended", func() bool {
		f = c.job(t, id)
		switch f["JobState"] {
		case "PENDING":
			return f["Reason"] == "BeginTime"
		case "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL":
			return true
		}
		return false // RUNNING, COMPLETING, REQUEUED, ...
	})
	return f
}

// startNow lets a requeued job start again without Slurm's two-minute wait,
// once the node has cleaned up after its first run: a launch onto a node
// still killing the old step fails. The requeue revoked the job's
// credential at a whole second, and slurmd refuses a new credential made
// in that same second (ctime <= revoked), failing the job with exit 1, so
// the update waits for the next second after the node is idle.
func (c *slurmCluster) startNow(t *testing.T, id string) {
	t.Helper()
	c.waitFor(t, "the node to be idle", func() bool {
		return strings.TrimSpace(c.run(t, "", "sinfo", "-h", "-o", "%T")) == "idle"
	})
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
	c.run(t, "", "scontrol", "update", "JobId="+id, "StartTime=now")
}

// mnistConfig is examples/mnist.yaml, the config the must-show script uses.
func mnistConfig(t *testing.T) string {
	t.Helper()
	return filepath.Join(repoRoot(t), "examples", "mnist.yaml")
}

// sbatchScript runs `hdet sbatch args...` in dir and writes the script to
// dir/name.
func sbatchScript(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(buildBinary(t, "./cmd/hdet"), append([]string{"sbatch"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "hdet sbatch %q: %s", args, stderr.String())
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, out, 0o644))
	return p
}

// TestSlurmSbatchScriptsPassTestOnly: what `hdet sbatch` writes is accepted
// by the real sbatch, GPUs and all, on the test cluster.
func TestSlurmSbatchScriptsPassTestOnly(t *testing.T) {
	c := startSlurm(t)
	dir := t.TempDir()
	cfg := mnistConfig(t)
	for name, args := range map[string][]string{
		"gpu.sbatch":    {cfg, "--nodes", "1", "--gpus-per-node", "8", "--time", "24:00:00", "--partition", "debug"},
		"cpu.sbatch":    {cfg, "--nodes", "1", "--ntasks-per-node", "4", "--cpus-per-task", "2", "--time", "2:00:00", "--partition", "debug"},
		"mpirun.sbatch": {cfg, "--ntasks-per-node", "4", "--time", "30", "--launcher", "mpirun"},
	} {
		script := sbatchScript(t, dir, name, args...)
		out := c.run(t, dir, "sbatch", "--test-only", script)
		assert.Contains(t, out, "to start at", "%s: %s", name, out)
	}
	// The check is real: more GPUs than the node has are refused.
	script := sbatchScript(t, dir, "toomany.sbatch", cfg, "--gpus-per-node", "16", "--time", "1:00:00", "--partition", "debug")
	cmd := exec.Command("sbatch", "--test-only", script)
	cmd.Dir, cmd.Env = dir, c.env
	out, err := cmd.CombinedOutput()
	assert.Error(t, err, "16 GPUs on an 8-GPU node: %s", out)

	// The committed examples that fit one node pass too.
	for _, ex := range []string{"mnist-1node-8gpu.sbatch", "mnist-cpu-mpirun.sbatch"} {
		out := c.run(t, dir, "sbatch", "--test-only", filepath.Join(repoRoot(t), "examples", "slurm", ex))
		assert.Contains(t, out, "to start at", "%s: %s", ex, out)
	}
}

// TestSlurmExamplesAreCurrent: examples/slurm/*.sbatch are exactly what
// `hdet sbatch` writes today for the command line recorded in each.
func TestSlurmExamplesAreCurrent(t *testing.T) {
	root := repoRoot(t)
	examples, err := filepath.Glob(filepath.Join(root, "examples", "slurm", "*.sbatch"))
	require.NoError(t, err)
	require.NotEmpty(t, examples)
	for _, ex := range examples {
		data, err := os.ReadFile(ex)
		require.NoError(t, err)
		text := string(data)
		line, _, _ := strings.Cut(strings.SplitN(text, "\n", 3)[1], "\n")
		cmdline, ok := strings.CutPrefix(line, "# Written by: hdet sbatch ")
		require.True(t, ok, "%s: second line %q", ex, line)
		// The examples were written at the repository root, whose absolute
		// path they hold; compare as if written here.
		_, after, ok := strings.Cut(text, "\nCONFIG='")
		require.True(t, ok, ex)
		cfgPath, _, _ := strings.Cut(after, "'")
		oldRoot := strings.TrimSuffix(cfgPath, "/examples/mnist.yaml")
		mnistConfig(t) // the examples name examples/mnist.yaml; it must exist
		got := sbatchScript(t, root, filepath.Base(ex)+".new", strings.Fields(cmdline)...)
		t.Cleanup(func() { os.Remove(got) })
		gotText, err := os.ReadFile(got)
		require.NoError(t, err)
		assert.Equal(t, strings.ReplaceAll(text, oldRoot+"/", root+"/"), string(gotText),
			"%s is stale: regenerate it with `hdet sbatch %s`", filepath.Base(ex), cmdline)
	}
}

type slurmProbe struct {
	Rank, Size, LocalRank int
	Env                   struct {
		JobID, StepID            string
		ProcID, LocalID, NTasks  int
		GPUs, CUDAVisibleDevices []string
		PMIxNamespace            string
	}
	SrunTask bool
	CheckErr string
}

func parseProbes(t *testing.T, out string) map[int]slurmProbe {
	t.Helper()
	got := map[int]slurmProbe{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "{") {
			continue
		}
		var p slurmProbe
		require.NoError(t, json.Unmarshal(sc.Bytes(), &p), sc.Text())
		got[p.Rank] = p
	}
	return got
}

// TestSlurmSrunTasksSeeSlurmAndMPI: four tasks started by srun --mpi=pmix
// form one MPI world whose ranks match SLURM_PROCID/LOCALID/NTASKS, and each
// sees all eight (stand-in) GPUs of the node.
func TestSlurmSrunTasksSeeSlurmAndMPI(t *testing.T) {
	c := startSlurm(t)
	probe := buildBinary(t, "./tests/slurmprobe")
	out := c.run(t, t.TempDir(), "srun", "--mpi=pmix", "-n", "4", "--gpus-per-node=8", probe)
	got := parseProbes(t, out)
	require.Len(t, got, 4, out)
	gpus := []string{"0", "1", "2", "3", "4", "5", "6", "7"}
	for rank, p := range got {
		assert.Equal(t, 4, p.Size)
		assert.True(t, p.SrunTask, "rank %d", rank)
		assert.Empty(t, p.CheckErr, "rank %d", rank)
		assert.Equal(t, rank, p.Env.ProcID)
		assert.Equal(t, rank, p.Env.LocalID)
		assert.Equal(t, 4, p.Env.NTasks)
		assert.NotEmpty(t, p.Env.JobID)
		assert.Equal(t, "0", p.Env.StepID)
		assert.Equal(t, gpus, p.Env.GPUs, "SLURM_STEP_GPUS of rank %d", rank)
		assert.Equal(t, gpus, p.Env.CUDAVisibleDevices, "CUDA_VISIBLE_DEVICES of rank %d", rank)
	}
	// hdet version runs as a plain srun step too.
	out = c.run(t, "", "srun", "-n", "4", buildBinary(t, "./cmd/hdet"), "version")
	assert.Equal(t, 4, strings.Count(out, "hdet "), out)
}

// TestSlurmMpirunInsideAllocation: ranks that mpirun starts inside a batch
// job inherit the batch script's SLURM_PROCID; slurm.Env must not mistake
// them for srun tasks, and Check must not report a mismatch.
func TestSlurmMpirunInsideAllocation(t *testing.T) {
	c := startSlurm(t)
	probe := buildBinary(t, "./tests/slurmprobe")
	dir := t.TempDir()
	id := strings.TrimSpace(c.run(t, dir, "sbatch", "--parsable", "-n", "4", "-o", "mpirun-%j.out",
		"--wrap", "mpirun "+probe))
	f := c.waitState(t, id, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
	out, err := os.ReadFile(filepath.Join(dir, "mpirun-"+id+".out"))
	require.NoError(t, err)
	require.Equal(t, "COMPLETED", f["JobState"], "%s", out)
	got := parseProbes(t, string(out))
	require.Len(t, got, 4, "%s", out)
	for rank, p := range got {
		assert.Equal(t, 4, p.Size)
		assert.False(t, p.SrunTask, "rank %d", rank)
		assert.Empty(t, p.CheckErr, "rank %d", rank)
		assert.Equal(t, id, p.Env.JobID)
		assert.Equal(t, 0, p.Env.ProcID, "inherited from the batch script")
	}
}

// TestSlurmBatchSignalRequeueResume drives a generated script through what a
// preempted hdet job goes through, with slurmprobe standing in for `hdet run`:
// submit; `scancel --signal=USR1 --batch` reaches the script, whose trap
// passes it to every task; rank 0 requeues the job (slurm.Requeue); the job
// runs again under the same id with SLURM_RESTART_COUNT=1 in the same run
// directory, appending to the same output file, and completes. Both
// launchers pass the signal on: srun and mpirun inside the allocation.
func TestSlurmBatchSignalRequeueResume(t *testing.T) {
	for _, launcher := range []string{"srun", "mpirun"} {
		t.Run(launcher, func(t *testing.T) { testSignalRequeueResume(t, launcher) })
	}
}

func testSignalRequeueResume(t *testing.T, launcher string) {
	c := startSlurm(t)
	probe := buildBinary(t, "./tests/slurmprobe")
	dir := t.TempDir()
	script := sbatchScript(t, dir, "job.sbatch", mnistConfig(t), "--gpus-per-node", "4", "--time", "10:00",
		"--signal-lead", "60", "--partition", "debug", "--job-name", "probe", "--launcher", launcher,
		"--hdet", probe, "--run-root", filepath.Join(dir, "runs"))
	id := strings.TrimSpace(c.run(t, dir, "sbatch", "--parsable", script))
	runDir := filepath.Join(dir, "runs", id)
	exists := func(name string) func() bool {
		return func() bool {
			for r := range 4 {
				if _, err := os.Stat(filepath.Join(runDir, fmt.Sprintf("%s.%d", name, r))); err != nil {
					return false
				}
			}
			return true
		}
	}
	c.waitFor(t, "4 tasks to start", exists("started"))

	c.run(t, "", "scancel", "--signal=USR1", "--batch", id)
	c.waitFor(t, "the tasks to get the signal", exists("signal"))

	// The requeued job waits about two minutes before it may start again
	// unless told otherwise.
	f := c.waitState(t, id, "PENDING")
	assert.Equal(t, "1", f["Restarts"])
	c.startNow(t, id)
	f = c.waitState(t, id, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
	log, err := os.ReadFile(filepath.Join(dir, "probe-"+id+".out"))
	require.NoError(t, err)
	require.Equal(t, "COMPLETED", f["JobState"], "%s", log)
	assert.Equal(t, "0:0", f["ExitCode"])

	for r := range 4 {
		procid := strconv.Itoa(r)
		if launcher == "mpirun" {
			procid = "0" // the batch script's, inherited
		}
		for name, want := range map[string]string{
			"signal":  "restart=0 procid=" + procid + " cuda=0,1,2,3\n",
			"resumed": "restart=1 procid=" + procid + " cuda=0,1,2,3\n",
		} {
			got, err := os.ReadFile(filepath.Join(runDir, fmt.Sprintf("%s.%d", name, r)))
			if assert.NoError(t, err) {
				assert.Equal(t, want, string(got), "%s.%d", name, r)
			}
		}
	}
	text := string(log)
	assert.Contains(t, text, "hdet: job "+id+", restart 0,")
	assert.Contains(t, text, "hdet: job "+id+", restart 1,", "--open-mode=append keeps the first run's lines")
	assert.Contains(t, text, "hdet: SIGUSR1 at ")
	assert.Equal(t, 4, strings.Count(text, "got user defined signal 1"), "%s", text)
	assert.Contains(t, text, "hdet: step exited with status 0")
}
