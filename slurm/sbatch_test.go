package slurm

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseTime(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"90":         90 * time.Minute,
		"5:30":       5*time.Minute + 30*time.Second,
		"24:00:00":   24 * time.Hour,
		"1-12":       36 * time.Hour,
		"2-01:30":    49*time.Hour + 30*time.Minute,
		"1-00:00:05": 24*time.Hour + 5*time.Second,
		"unlimited":  0,
		"INFINITE":   0,
	} {
		got, err := ParseTime(in)
		if assert.NoError(t, err, in) {
			assert.Equal(t, want, got, in)
		}
	}
	for _, in := range []string{"", "0", "00:00:00", "1h", "24:00:00:00", "-5", "1-", "a:b", " 10"} {
		_, err := ParseTime(in)
		assert.ErrorIs(t, err, ErrOption, "%q", in)
		if err != nil {
			assert.Contains(t, err.Error(), "--time", "%q", in)
		}
	}
}

func gpuJob() Job {
	return Job{
		Config: "/data/exp/mnist.yaml", Hdet: "/opt/hdet/bin/hdet", RunRoot: "/scratch/runs",
		JobName: "hdet-mnist", Partition: "gpu", Account: "proj42", Time: "24:00:00",
		Nodes: 2, GPUsPerNode: 8, Launcher: LauncherSrun, SignalLead: 300,
		Command: "hdet sbatch mnist.yaml --nodes 2",
	}
}

func TestScriptGPU(t *testing.T) {
	s, err := Script(gpuJob())
	require.NoError(t, err)
	for _, line := range []string{
		"#!/bin/bash",
		"#SBATCH --job-name=hdet-mnist",
		"#SBATCH --partition=gpu",
		"#SBATCH --account=proj42",
		"#SBATCH --time=24:00:00",
		"#SBATCH --nodes=2",
		"#SBATCH --ntasks-per-node=8",
		"#SBATCH --gpus-per-node=8",
		"#SBATCH --signal=B:USR1@300",
		"#SBATCH --requeue",
		"#SBATCH --open-mode=append",
		"#SBATCH --output=hdet-mnist-%j.out",
		"RUN_DIR='/scratch/runs'/$SLURM_JOB_ID",
		`srun --mpi=pmix --nodes=2 --ntasks-per-node=8 --gpus-per-node=8 "$HDET" run --run-dir "$RUN_DIR" "$CONFIG" &`,
		"trap 'forward USR1' USR1",
		`wait "$STEP_PID"`,
	} {
		assert.Contains(t, strings.Split(s, "\n"), line)
	}
	launch := s[strings.Index(s, "\nsrun --mpi"):]
	launch = launch[:strings.Index(launch[1:], "\n")+1]
	assert.NotContains(t, launch, "--gpu-bind", "tasks must keep every GPU of the node")
	assert.NotContains(t, launch, "--gpus-per-task")
	assert.NotContains(t, launch, "--kill-on-bad-exit")
	assert.NotContains(t, s, "--cpus-per-task")
	// The traps are in place before the step starts.
	assert.Less(t, strings.Index(s, "trap 'forward USR1'"), strings.Index(s, "\nsrun --mpi"))
	bashSyntax(t, s)
}

func TestScriptCPUWithMpirun(t *testing.T) {
	j := gpuJob()
	j.GPUsPerNode, j.NTasksPerNode, j.CPUsPerTask = 0, 4, 2
	j.Launcher, j.Partition, j.Account = LauncherMpirun, "", ""
	s, err := Script(j)
	require.NoError(t, err)
	lines := strings.Split(s, "\n")
	assert.Contains(t, lines, "#SBATCH --ntasks-per-node=4")
	assert.Contains(t, lines, "#SBATCH --cpus-per-task=2")
	assert.Contains(t, lines, `if [ "$(nproc)" -lt 4 ]; then export OMPI_MCA_mpi_yield_when_idle=1; fi`)
	assert.Contains(t, lines, `mpirun -np "$SLURM_NTASKS" --map-by ppr:4:node `+MpirunKeepalive+` "$HDET" run --run-dir "$RUN_DIR" "$CONFIG" &`)
	assert.NotContains(t, s, "gpus")
	assert.NotContains(t, s, "--partition")
	assert.NotContains(t, s, "--account")
	assert.NotContains(t, s, "srun ")
	bashSyntax(t, s)
}

func TestScriptQuotesPaths(t *testing.T) {
	j := gpuJob()
	j.Config = "/data/it's here/$(rm -rf ~).yaml"
	j.Command = "hdet sbatch x\n rm -rf / #"
	s, err := Script(j)
	require.NoError(t, err)
	assert.Contains(t, s, `CONFIG='/data/it'\''s here/$(rm -rf ~).yaml'`)
	assert.Contains(t, s, "# Written by: hdet sbatch x rm -rf / #\n", "the command line stays a comment")
	bashSyntax(t, s)
}

func TestValidateNamesEveryBadOption(t *testing.T) {
	cases := []struct {
		change func(*Job)
		want   string
	}{
		{func(j *Job) { j.Time = "soon" }, "--time"},
		{func(j *Job) { j.Nodes = 0 }, "--nodes 0"},
		{func(j *Job) { j.GPUsPerNode = -1 }, "--gpus-per-node -1"},
		{func(j *Job) { j.GPUsPerNode = 0 }, "--ntasks-per-node: required"},
		{func(j *Job) { j.NTasksPerNode = 4 }, "must equal --gpus-per-node 8"},
		{func(j *Job) { j.NTasksPerNode = -2 }, "--ntasks-per-node -2"},
		{func(j *Job) { j.CPUsPerTask = -1 }, "--cpus-per-task -1"},
		{func(j *Job) { j.Launcher = "aprun" }, `--launcher "aprun"`},
		{func(j *Job) { j.SignalLead = 0 }, "--signal-lead 0"},
		{func(j *Job) { j.Time = "5" }, "--signal-lead 300: must be shorter than --time 5"},
		{func(j *Job) { j.Partition = "gpu debug" }, `--partition "gpu debug"`},
		{func(j *Job) { j.Account = "a\n#SBATCH --x" }, "--account"},
		{func(j *Job) { j.JobName = "" }, "--job-name"},
		{func(j *Job) { j.Config = "mnist.yaml" }, `CONFIG "mnist.yaml": must be an absolute path`},
		{func(j *Job) { j.Hdet = "bin/hdet" }, `--hdet "bin/hdet"`},
		{func(j *Job) { j.RunRoot = "/runs\n" }, "--run-root"},
	}
	for _, c := range cases {
		j := gpuJob()
		c.change(&j)
		_, err := Script(j)
		if assert.ErrorIs(t, err, ErrOption, c.want) {
			assert.Contains(t, err.Error(), c.want)
		}
	}
	// Several problems are reported together.
	j := gpuJob()
	j.Nodes, j.Launcher = 0, "x"
	err := j.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--nodes")
	assert.Contains(t, err.Error(), "--launcher")

	j = gpuJob()
	j.Time = "UNLIMITED"
	assert.NoError(t, j.Validate(), "no limit: any signal lead")
	j.NTasksPerNode = 8
	assert.NoError(t, j.Validate(), "--ntasks-per-node equal to the GPUs is fine")
	j.Hdet = "hdet"
	assert.NoError(t, j.Validate(), "a bare name is looked up on PATH")
}

// bashSyntax checks s with bash -n.
func bashSyntax(t *testing.T, s string) {
	t.Helper()
	cmd := exec.Command("bash", "-n")
	cmd.Stdin = strings.NewReader(s)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "bash -n: %s", out)
}

func TestDefaultJobNameIsValid(t *testing.T) {
	for in, want := range map[string]string{
		"my run.yaml":           "hdet-my-run",
		"/a/b/mnist.yaml":       "hdet-mnist",
		"x$(rm -rf).yml":        "hdet-x--rm--rf-",
		"été.yaml":              "hdet--t-",
		strings.Repeat("a", 99): "hdet-" + strings.Repeat("a", 59),
	} {
		got := DefaultJobName(in)
		assert.Equal(t, want, got, in)
		assert.Regexp(t, wordRE, got)
	}
}

// Replica groups: --nodes 2 --gpus-per-node 8 --replica-size 8 makes a
// replica of each node (block distribution, consecutive ranks together)
// and hands G to hdet.
func TestScriptReplicaFillsNode(t *testing.T) {
	j := gpuJob()
	j.ReplicaSize = 8
	s, err := Script(j)
	require.NoError(t, err)
	lines := strings.Split(s, "\n")
	assert.Contains(t, lines, "#SBATCH --ntasks-per-node=8")
	assert.Contains(t, lines, `srun --mpi=pmix --nodes=2 --ntasks-per-node=8 --distribution=block:block --gpus-per-node=8 "$HDET" run --run-dir "$RUN_DIR" --set train.replica_size=8 "$CONFIG" &`)
	assert.Contains(t, s, "# Replica groups: 8 ranks per replica, 2 replicas.")
	bashSyntax(t, s)

	j.Launcher = LauncherMpirun
	s, err = Script(j)
	require.NoError(t, err)
	assert.Contains(t, strings.Split(s, "\n"), `mpirun -np "$SLURM_NTASKS" --map-by ppr:8:node --rank-by slot `+MpirunKeepalive+` "$HDET" run --run-dir "$RUN_DIR" --set train.replica_size=8 "$CONFIG" &`)
	bashSyntax(t, s)

	// A replica over two whole nodes.
	j.ReplicaSize = 16
	s, err = Script(j)
	require.NoError(t, err)
	assert.Contains(t, s, "fill 2 whole nodes")
}

func TestScriptReplicaSizeMustDivide(t *testing.T) {
	for g, want := range map[int]string{
		3:  "--replica-size 3 does not divide the job's 16 tasks (2 nodes x 8 tasks per node)",
		-1: "--replica-size -1: want 1 or more",
		32: "--replica-size 32 does not divide the job's 16 tasks",
		16: "",
		4:  "",
		1:  "",
	} {
		j := gpuJob()
		j.ReplicaSize = g
		_, err := Script(j)
		if want == "" {
			assert.NoError(t, err, "G=%d", g)
			continue
		}
		require.ErrorIs(t, err, ErrOption, "G=%d", g)
		assert.Contains(t, err.Error(), want)
	}
	j := gpuJob()
	j.Nodes, j.GPUsPerNode, j.ReplicaSize = 3, 4, 6 // 12 tasks divide by 6, but a replica would be 1.5 nodes
	_, err := Script(j)
	require.ErrorIs(t, err, ErrOption)
	assert.Contains(t, err.Error(), "straddle")
}

// --sync states the job's train.sync in the script, with why; without it
// the config's stands.
func TestScriptSyncMode(t *testing.T) {
	j := gpuJob()
	j.ReplicaSize, j.Sync = 8, SyncLocal
	s, err := Script(j)
	require.NoError(t, err)
	assert.Contains(t, strings.Split(s, "\n"), `srun --mpi=pmix --nodes=2 --ntasks-per-node=8 --distribution=block:block --gpus-per-node=8 "$HDET" run --run-dir "$RUN_DIR" --set train.replica_size=8 --set train.sync=local "$CONFIG" &`)
	assert.Contains(t, s, "# train.sync local: nothing crosses between replicas inside a window")
	bashSyntax(t, s)

	j.ReplicaSize, j.Sync, j.Launcher = 0, SyncGradients, LauncherMpirun
	s, err = Script(j)
	require.NoError(t, err)
	assert.Contains(t, strings.Split(s, "\n"), `mpirun -np "$SLURM_NTASKS" --map-by ppr:8:node `+MpirunKeepalive+` "$HDET" run --run-dir "$RUN_DIR" --set train.sync=gradients "$CONFIG" &`)
	assert.Contains(t, s, "# train.sync gradients:")
	bashSyntax(t, s)

	j.Sync = ""
	s, err = Script(j)
	require.NoError(t, err)
	assert.NotContains(t, s, "train.sync", "the config's mode")

	j.Sync = "ring"
	_, err = Script(j)
	require.ErrorIs(t, err, ErrOption)
	assert.Contains(t, err.Error(), `--sync "ring": want local or gradients`)
}

// A PyTorch worker job: no config needed, the command after --worker --
// quoted word by word, replica groups laid out as for the built-in workload.
func TestScriptWorkerWithReplicaGroups(t *testing.T) {
	j := gpuJob()
	j.Config, j.ReplicaSize = "", 2
	j.Worker = []string{"/envs/llm/bin/python", "train.py", "--lr", "it's 3e-4"}
	s, err := Script(j)
	require.NoError(t, err)
	assert.NotContains(t, s, "CONFIG=")
	assert.Contains(t, s, "# The script resumes at hdet's last checkpoint when it gives hdet its state\n# (hdet.attach(..., state={...})); else it starts over: docs/pytorch.md#resume.")
	assert.Contains(t, strings.Split(s, "\n"), `srun --mpi=pmix --nodes=2 --ntasks-per-node=8 --distribution=block:block --gpus-per-node=8 "$HDET" run --run-dir "$RUN_DIR" --set train.replica_size=2 --worker -- '/envs/llm/bin/python' 'train.py' '--lr' 'it'\''s 3e-4' &`)
	bashSyntax(t, s)

	j.Worker = nil
	_, err = Script(j)
	assert.ErrorIs(t, err, ErrOption)
	assert.ErrorContains(t, err, "a config file is needed unless a worker command follows --worker --")
}
