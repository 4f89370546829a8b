package tests

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/watchdog"
	"github.com/hdet-dev/hdet/slurm"
)

// hostPIDs lists the processes running on a test bed host, leaving out its
// slurmd when keepSlurmd is set.
func hostPIDs(t *testing.T, host string, keepSlurmd bool) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "pids", host).Output()
	require.NoError(t, err)
	var pids []string
	for _, p := range strings.Fields(string(out)) {
		comm, _ := os.ReadFile("/proc/" + p + "/comm")
		if keepSlurmd && strings.TrimSpace(string(comm)) == "slurmd" {
			continue
		}
		pids = append(pids, p)
	}
	return pids
}

func signalPIDs(t *testing.T, sig string, pids []string) {
	t.Helper()
	if len(pids) > 0 {
		_ = exec.Command("kill", append([]string{"-" + sig}, pids...)...).Run() // some may have exited
	}
}

// link sets a host's port on the bridge up or down.
func link(t *testing.T, host, state string) {
	t.Helper()
	port := "hdbr0v" + strings.TrimPrefix(host, "hdnode")
	out, err := exec.Command("ip", "link", "set", port, state).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// waitBack waits until host reaches the launcher's side of the bridge over
// TCP again, as orted must to report in: after a link comes back up the
// first connections can still fail ("ORTE was unable to reliably start one
// or more daemons"), and an operator resumes once the host answers.
func waitBack(t *testing.T, tb *testbed, host string) {
	t.Helper()
	env, err := os.ReadFile(filepath.Join(tb.state, "cluster.env"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^NC_BR_IP=(\S+)$`).FindSubmatch(env)
	require.NotNil(t, m, "no NC_BR_IP in cluster.env:\n%s", env)
	ln, err := net.Listen("tcp", string(m[1])+":0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	probe := "exec 3<>/dev/tcp/" + strings.Replace(ln.Addr().String(), ":", "/", 1)
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for {
		out, err := exec.Command("ip", "netns", "exec", host, "timeout", "2", "bash", "-c", probe).CombinedOutput()
		if err == nil {
			t.Logf("%s reached the launcher %.1f s after its link came back", host, time.Since(start).Seconds())
			return
		}
		require.True(t, time.Now().Before(deadline), "%s did not reach %s within 30 s: %v %s", host, ln.Addr(), err, out)
		time.Sleep(200 * time.Millisecond)
	}
}

// waitPhase waits until a rank's heartbeat says it is in phase, polling
// every millisecond (a converge lasts milliseconds).
func waitPhase(ctx context.Context, runDir string, rank int, phase string) bool {
	for ctx.Err() == nil {
		if b, err := watchdog.ReadBeat(filepath.Join(runDir, "heartbeats", "rank-"+strconv.Itoa(rank))); err == nil && b.Window >= 2 && b.Phase == phase {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// fault is one way hdnode3 goes away, under one launcher.
type hostFault struct {
	name   string
	srun   bool
	hit    func(t *testing.T) (restore func()) // applied once the run is in its third window
	resume [2]int                              // hosts x ranks each for the resume
	// quiet: the launcher may end the job without naming the host (a killed
	// host's rsh agent exits: "ORTE was unable to reliably start ... daemons").
	quiet bool
}

// TestMultiHostLostHost: a host killed, frozen (SIGSTOP and its link down)
// or cut off mid-converge ends the job in bounded time with a failure code;
// the last checkpoint resumes, with the same command or on fewer hosts.
func TestMultiHostLostHost(t *testing.T) {
	tb := startTestbed(t, 3, true)
	freeze := func(t *testing.T) func() {
		pids := hostPIDs(t, "hdnode3", false)
		signalPIDs(t, "STOP", pids)
		link(t, "hdnode3", "down")
		return func() { link(t, "hdnode3", "up"); signalPIDs(t, "CONT", pids) }
	}
	faults := []hostFault{
		{name: "killed host, mpirun", hit: func(t *testing.T) func() {
			signalPIDs(t, "KILL", hostPIDs(t, "hdnode3", true))
			return func() {}
		}, resume: [2]int{3, 2}, quiet: true},
		{name: "frozen host, mpirun", hit: freeze, resume: [2]int{3, 2}},
		{name: "frozen host, srun", srun: true, hit: freeze, resume: [2]int{2, 2}},
		{name: "link down mid-converge, mpirun", resume: [2]int{2, 3}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) { lostHost(t, tb, f) })
	}
}

func lostHost(t *testing.T, tb *testbed, f hostFault) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// Checkpoints every 2 windows; the watchdog shorter under srun, where it
	// is what ends the job, longer under mpirun, whose keepalives come first.
	wd := "30s"
	if f.srun {
		wd = "15s"
	}
	conf := cfg("local", lrDropout) + "\n"
	args, runDir := hdetArgs(t, t.TempDir(), conf, "--set", "train.steps=200", "--set", "run.checkpoint_every=2",
		"--set", "train.watchdog="+wd, "--set", "workload.hidden=[128]")
	launch := func(hosts, perHost int) *exec.Cmd {
		if f.srun {
			return tb.srun(ctx, t, hosts, perHost, append([]string{"--nodelist", strings.Join(tb.hosts[:hosts], ",")}, args...)...)
		}
		return tb.mpirun(ctx, t, hosts, perHost, append(strings.Fields(slurm.MpirunKeepalive), args...)...)
	}
	cmd := launch(3, 2)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	for windowsDone(runDir) < 3 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	var restore func()
	if f.hit != nil {
		restore = f.hit(t)
	} else {
		require.True(t, waitPhase(ctx, runDir, 4, "converge"), "rank 4 never seen in the converge")
		link(t, "hdnode3", "down")
		restore = func() { link(t, "hdnode3", "up") }
	}
	start := time.Now()
	err := cmd.Wait()
	exit := time.Since(start)
	restore()
	signalPIDs(t, "KILL", hostPIDs(t, "hdnode3", true)) // what the frozen host still held
	t.Logf("%s: job ended %.1f s after the fault (%v)", f.name, exit.Seconds(), err)
	require.Error(t, err, "the job must fail:\n%s", out.String())
	text := out.String()
	if f.srun {
		assert.Contains(t, text, "silent: ranks 4, 5 on hdnode3", "the watchdog names the host")
	} else if !f.quiet {
		assert.Contains(t, text, "hdnode3", "mpirun names the lost host")
	}
	ckpts, _ := filepath.Glob(filepath.Join(runDir, "checkpoints", "ckpt-*.hdet"))
	require.NotEmpty(t, ckpts, "%s", text)

	waitBack(t, tb, "hdnode3")
	if f.srun { // slurmctld may have set the node down while it was frozen
		tb.repairSlurm(t)
	}
	r := runOn(launch(f.resume[0], f.resume[1]), runDir)
	require.NoError(t, r.err, "resume on %d hosts x %d:\n%s", f.resume[0], f.resume[1], r.stderr)
	assert.Contains(t, r.stderr, "resuming from checkpoint")
	assert.Equal(t, 20, windowsDone(runDir))
}
