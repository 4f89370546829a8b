package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/testenv"
)

// testbed is scripts/testbed.sh's fake cluster: hosts made of network
// namespaces on this machine, with a multi-node Slurm when asked.
type testbed struct {
	script string
	setup  []string // the environment scripts/testbed.sh runs with
	state  string
	env    []string // os.Environ plus the bed's env.sh (and Slurm's)
	hosts  []string
}

const testbedState = "/tmp/hdet-testbed"

// startTestbed takes the bed's lock (one test process at a time on a
// machine), brings up hosts fake hosts and tears everything down when the
// test ends, passed or failed. It needs root: it skips on a developer box
// without it and fails under CI.
func startTestbed(t *testing.T, hosts int, slurm bool) *testbed {
	t.Helper()
	testenv.NeedRoot(t, "the multi-host test bed (network namespaces)")
	for _, tool := range []string{"ip", "nsenter", "unshare", "flock", "mpirun"} {
		testenv.NeedTool(t, tool)
	}
	lock, err := os.OpenFile("/tmp/hdet-testbed.lock", os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	require.NoError(t, syscall.Flock(int(lock.Fd()), syscall.LOCK_EX))
	script := filepath.Join(repoRoot(t), "scripts", "testbed.sh")
	env := append(os.Environ(), "HDET_TESTBED_HOSTS="+strconv.Itoa(hosts), "HDET_TESTBED_STATE="+testbedState)
	t.Cleanup(func() {
		cmd := exec.Command(script, "down")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("testbed.sh down: %v\n%s", err, out)
		}
		_ = lock.Close() // releases the lock
	})
	args := []string{"up"}
	if slurm {
		args = append(args, "--slurm")
	}
	cmd := exec.Command(script, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "testbed.sh up:\n%s", out)
	source := ". " + testbedState + "/env.sh"
	if slurm {
		source += "; . " + testbedState + "/slurm/env.sh"
	}
	dump, err := exec.Command("bash", "-c", source+"; env -0").Output()
	require.NoError(t, err)
	tb := &testbed{script: script, setup: env, state: testbedState}
	for _, kv := range bytes.Split(dump, []byte{0}) {
		if len(kv) > 0 {
			tb.env = append(tb.env, string(kv))
		}
	}
	for i := 1; i <= hosts; i++ {
		tb.hosts = append(tb.hosts, fmt.Sprintf("hdnode%d", i))
	}
	return tb
}

// repairSlurm restarts the bed's Slurm daemons or nodes that are down.
func (tb *testbed) repairSlurm(t *testing.T) {
	t.Helper()
	cmd := exec.Command(tb.script, "slurm")
	cmd.Env = tb.setup
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "testbed.sh slurm:\n%s", out)
}

// hostfile writes an Open MPI hostfile of the first n hosts with slots each.
func (tb *testbed) hostfile(t *testing.T, n, slots int) string {
	t.Helper()
	var b strings.Builder
	for _, h := range tb.hosts[:n] {
		fmt.Fprintf(&b, "%s slots=%d\n", h, slots)
	}
	p := filepath.Join(t.TempDir(), "hostfile")
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	return p
}

// mpirun prepares mpirun over the first hosts hosts, slots ranks each.
func (tb *testbed) mpirun(ctx context.Context, t *testing.T, hosts, slots int, args ...string) *exec.Cmd {
	t.Helper()
	full := append([]string{"--hostfile", tb.hostfile(t, hosts, slots), "-np", strconv.Itoa(hosts * slots), "--bind-to", "none"}, args...)
	cmd := exec.CommandContext(ctx, "mpirun", full...)
	cmd.Env = tb.env
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// srun prepares srun --mpi=pmix over hosts nodes, perNode tasks each.
func (tb *testbed) srun(ctx context.Context, t *testing.T, hosts, perNode int, args ...string) *exec.Cmd {
	t.Helper()
	full := append([]string{"--mpi=pmix", "-N", strconv.Itoa(hosts), "--ntasks-per-node=" + strconv.Itoa(perNode)}, args...)
	cmd := exec.CommandContext(ctx, "srun", full...)
	cmd.Env = tb.env
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// slurm is the bed's Slurm seen through the single-node cluster's helpers.
func (tb *testbed) slurm() *slurmCluster {
	return &slurmCluster{dir: filepath.Join(tb.state, "slurm"), env: tb.env}
}

var selfCheckLine = regexp.MustCompile(`rank (\d+)/(\d+) on (\S+) \(local rank`)

// ranksByHost parses --self-check output into host -> ranks, failing unless
// every one of n ranks reported once.
func ranksByHost(t *testing.T, out string, n int) map[string][]int {
	t.Helper()
	hosts := map[string][]int{}
	seen := map[int]bool{}
	for _, m := range selfCheckLine.FindAllStringSubmatch(out, -1) {
		r, _ := strconv.Atoi(m[1])
		require.Equal(t, strconv.Itoa(n), m[2], out)
		require.False(t, seen[r], "rank %d twice:\n%s", r, out)
		seen[r] = true
		hosts[m[3]] = append(hosts[m[3]], r)
	}
	require.Len(t, seen, n, out)
	for _, rs := range hosts {
		sort.Ints(rs)
	}
	return hosts
}

// runOn runs one hdet command line (already wrapped in mpirun or srun) with
// a deadline, returning the outputs as an hdetRun.
func runOn(cmd *exec.Cmd, runDir string) hdetRun {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return hdetRun{dir: runDir, stdout: out.String(), stderr: errb.String(), err: err}
}

// hdetArgs is `hdet run CONFIG` with the run directory, the plugins and the
// data, for a config written into dir.
func hdetArgs(t *testing.T, dir, conf string, extra ...string) (args []string, runDir string) {
	t.Helper()
	hdet, plugins := hdetBinaries(t)
	path := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))
	runDir = filepath.Join(dir, "run")
	return append([]string{hdet, "run", path, "--run-dir", runDir, "--plugin-dir", plugins, "--set", "workload.data=" + mnistDir(t)}, extra...), runDir
}
