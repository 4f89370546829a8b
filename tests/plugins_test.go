package tests

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/plugins"
)

// pluginDir builds the built-in explorers, the worked example and the test
// explorer (which never goes to bin/plugins) into a fresh plugin directory,
// named as `make build` names them.
func pluginDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, pkg := range map[string]string{
		"lr":              "./cmd/hdet-explorer-lr",
		"dropout":         "./cmd/hdet-explorer-dropout",
		"weight-decay":    "./cmd/hdet-explorer-weight-decay",
		"label-smoothing": "./examples/explorer-label-smoothing",
		"test":            "./plugins/internal/testexplorer",
	} {
		copyExecutable(t, buildBinary(t, pkg), filepath.Join(dir, plugins.BinaryPrefix+name))
	}
	return dir
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o755))
}

// explorerPIDs lists live (non-zombie) processes whose executable is in dir.
func explorerPIDs(t *testing.T, dir string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || filepath.Dir(exe) != dir {
			continue // gone, a zombie (no exe link), or not ours
		}
		pids = append(pids, pid)
	}
	return pids
}

// alive reports whether pid is a running (non-zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// requireGone waits up to 10 s for every pid to be gone, and for no process
// of dir to be left.
func requireGone(t *testing.T, dir string, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := map[int]bool{}
		for _, p := range append(pids, explorerPIDs(t, dir)...) {
			if alive(p) {
				left[p] = true
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for p := range left {
				_ = syscall.Kill(p, syscall.SIGKILL) // leave no orphan behind a failed test
			}
			t.Fatalf("explorer processes still running: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eventLog collects the explorer's events.
type eventLog struct {
	mu     sync.Mutex
	events []plugins.Event
}

func (l *eventLog) add(e plugins.Event) { l.mu.Lock(); l.events = append(l.events, e); l.mu.Unlock() }

func (l *eventLog) kinds() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var k []string
	for _, e := range l.events {
		k = append(k, e.Kind+":"+e.Op)
	}
	return k
}

func openTest(t *testing.T, dir string, cfg string, timeout time.Duration) (*plugins.Explorer, *eventLog) {
	t.Helper()
	return openBinary(t, filepath.Join(dir, "hdet-explorer-test"), cfg, timeout)
}

// openBinary opens and initialises an explorer binary (or a wrapper of the
// test explorer).
func openBinary(t *testing.T, binary string, cfg string, timeout time.Duration) (*plugins.Explorer, *eventLog) {
	t.Helper()
	ev := &eventLog{}
	x, err := plugins.Open(context.Background(), plugins.Spec{Name: "test", Binary: binary, Timeout: timeout}, zerolog.Nop(), ev.add)
	require.NoError(t, err)
	t.Cleanup(func() { _ = x.Close() })
	require.NoError(t, x.Init(context.Background(), hparam.Setup{Name: "test", Config: []byte(cfg), Ranks: 2, TotalSteps: 20, WindowSteps: 2, Seed: 1}))
	return x, ev
}

// window runs Plan and Observe for window k (losses include a NaN) and
// returns the explorer's next base, which the test explorer sets to the
// number of windows it has observed.
func window(x hparam.Explorer, k int) (float64, error) {
	ctx := context.Background()
	if _, err := x.Plan(ctx, hparam.WindowRequest{Window: k, Start: 2 * k, Steps: 2}); err != nil {
		return 0, err
	}
	f, err := x.Observe(ctx, hparam.Observation{Window: k, Values: []float64{1, 2}, Losses: []float64{0.5, math.NaN()}})
	return f.Base, err
}

func TestExplorerCrashOnceIsRestartedWithItsState(t *testing.T) {
	dir := pluginDir(t)
	for _, tc := range []struct{ name, failIn, mode string }{
		{"exit in plan", "plan", "exit"},
		{"exit in observe", "observe", "exit"},
		{"error in observe", "observe", "error"},
		{"hang in plan", "plan", "hang"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			once := filepath.Join(t.TempDir(), "failed-once")
			cfg := fmt.Sprintf(`{"fail_at_window":3,"fail_in":%q,"mode":%q,"once_file":%q}`, tc.failIn, tc.mode, once)
			x, ev := openTest(t, dir, cfg, 2*time.Second)
			first := x.Pid()
			for k := 0; k < 6; k++ {
				base, err := window(x, k)
				require.NoError(t, err, "window %d", k)
				assert.Equal(t, float64(k+1), base, "window %d: the restarted explorer must continue from its saved state", k)
			}
			assert.Equal(t, 1, x.Restarts())
			assert.Equal(t, []string{"restarted:" + tc.failIn}, ev.kinds())
			assert.NotEqual(t, first, x.Pid())
			assert.False(t, alive(first), "the crashed or stuck process is gone")
			require.NoError(t, x.Close())
			requireGone(t, dir, first)
		})
	}
}

// An explorer killed again and again (an OOM killer, an operator), between
// windows and between a window's Plan and Observe, is restarted from its
// last state each time rather than given up on at the second kill (which
// would freeze its hyperparameter and change the model): every window's
// answer is the one an explorer left alone gives.
func TestExplorerKilledRepeatedlyIsRestartedEachTime(t *testing.T) {
	dir := pluginDir(t)
	x, ev := openTest(t, dir, `{}`, 5*time.Second)
	ctx := context.Background()
	var killed []int
	kill := func() {
		pid := x.Pid()
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		killed = append(killed, pid)
		for alive(pid) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	for k := 0; k < 8; k++ {
		if k == 2 || k == 3 || k == 6 {
			kill() // before the window's Plan
		}
		_, err := x.Plan(ctx, hparam.WindowRequest{Window: k, Start: 2 * k, Steps: 2})
		require.NoError(t, err, "window %d", k)
		if k == 4 || k == 6 {
			kill() // between Plan and Observe
		}
		f, err := x.Observe(ctx, hparam.Observation{Window: k, Values: []float64{1, 2}, Losses: []float64{0.5, 0.7}})
		require.NoError(t, err, "window %d", k)
		assert.Equal(t, float64(k+1), f.Base, "window %d: the restarted explorer continues from its saved state", k)
	}
	assert.Equal(t, 5, x.Restarts())
	assert.Equal(t, []string{"restarted:plan", "restarted:plan", "restarted:observe", "restarted:plan", "restarted:observe"}, ev.kinds())
	require.NoError(t, x.Close())
	requireGone(t, dir, killed...)
}

// TestProbeAndOffsetFieldsCrossAPluginProcess sends the probe flag, probe
// losses (NaN for an unhealthy rank) and the estimate and offset through a
// real explorer process, which echoes them.
func TestProbeAndOffsetFieldsCrossAPluginProcess(t *testing.T) {
	dir := pluginDir(t)
	ctx := context.Background()
	for _, probe := range []bool{true, false} {
		x, err := plugins.Open(ctx, plugins.Spec{Name: "test", Binary: filepath.Join(dir, "hdet-explorer-test")}, zerolog.Nop(), nil)
		require.NoError(t, err)
		require.NoError(t, x.Init(ctx, hparam.Setup{Name: "test", Config: []byte("{}"), Ranks: 3, TotalSteps: 20, WindowSteps: 2, Probe: probe}))
		p, err := x.Plan(ctx, hparam.WindowRequest{Window: 0, Start: 0, Steps: 2})
		require.NoError(t, err)
		assert.Equal(t, probe, p.Probe, "Setup.Probe in, WindowPlan.Probe out")
		var probes []float64
		if probe {
			probes = []float64{0.5, math.NaN(), math.Inf(1)}
		}
		f, err := x.Observe(ctx, hparam.Observation{Window: 0, Values: []float64{1, 2, 3}, Losses: []float64{1, math.NaN(), 2}, Probe: probes})
		require.NoError(t, err)
		assert.Equal(t, float64(len(probes)), f.Offset)
		if probe {
			require.Len(t, f.Weights, 3)
			assert.Equal(t, 0.5, f.Weights[0])
			assert.True(t, math.IsNaN(f.Weights[1]), "the unhealthy rank's probe loss stays NaN both ways")
			assert.True(t, math.IsInf(f.Weights[2], 1))
			assert.Equal(t, 1.0, f.Estimate, "one NaN reached the explorer")
		} else {
			assert.Empty(t, f.Weights)
		}
		require.NoError(t, x.Close())
	}
	requireGone(t, dir)
}

// A restarted process that fails the same call again (killed as it
// starts, or killed again at once) gets another restart: the explorer
// continues from its state, its hyperparameter not frozen.
func TestExplorerFailingRightAfterItsRestartIsRestartedAgain(t *testing.T) {
	dir := pluginDir(t)
	once := filepath.Join(t.TempDir(), "failures")
	x, ev := openTest(t, dir, fmt.Sprintf(`{"fail_at_window":3,"once_file":%q,"times":2}`, once), 5*time.Second)
	for k := 0; k < 6; k++ {
		base, err := window(x, k)
		require.NoError(t, err, "window %d", k)
		assert.Equal(t, float64(k+1), base, "window %d: the explorer continues from its saved state", k)
	}
	assert.Equal(t, []string{"restarted:plan", "restarted:plan"}, ev.kinds())
	require.NoError(t, x.Close())
}

// An explorer that fails the same call after every restart is given up
// on: frozen, with a failed event.
func TestExplorerCrashingAtEveryRestartFailsForGood(t *testing.T) {
	dir := pluginDir(t)
	x, ev := openTest(t, dir, `{"fail_at_window":3}`, 5*time.Second)
	first := x.Pid()
	for k := 0; k < 3; k++ {
		_, err := window(x, k)
		require.NoError(t, err)
	}
	_, err := window(x, 3)
	require.ErrorIs(t, err, plugins.ErrExplorerFailed)
	assert.Equal(t, []string{"restarted:plan", "restarted:plan", "restarted:plan", "failed:plan"}, ev.kinds())

	// It stays failed, without starting anything.
	_, err = x.Plan(context.Background(), hparam.WindowRequest{Window: 4, Steps: 2})
	assert.ErrorIs(t, err, plugins.ErrExplorerFailed)
	_, err = x.SaveState(context.Background())
	assert.ErrorIs(t, err, plugins.ErrExplorerFailed)
	assert.Equal(t, 0, x.Pid())
	requireGone(t, dir, first)
}

// An explorer that refuses its input (hparam.ErrInvalid, gRPC's
// InvalidArgument) is not restarted, which would only replay the same
// input, and its own words reach the host.
func TestExplorerRefusalIsNotRetried(t *testing.T) {
	dir := pluginDir(t)
	x, ev := openTest(t, dir, `{"fail_at_window":1,"fail_in":"observe","mode":"refuse"}`, 5*time.Second)
	first := x.Pid()
	_, err := window(x, 0)
	require.NoError(t, err)
	_, err = window(x, 1)
	require.ErrorIs(t, err, plugins.ErrExplorerFailed)
	require.ErrorIs(t, err, hparam.ErrInvalid)
	assert.Equal(t, "invalid value: test explorer: refusing as configured", err.Error())
	assert.Equal(t, []string{"failed:observe"}, ev.kinds())
	assert.Equal(t, 0, x.Restarts())
	requireGone(t, dir, first)
}

func TestTamperedExplorerIsRefused(t *testing.T) {
	dir := pluginDir(t)
	good := filepath.Join(dir, "hdet-explorer-label-smoothing")
	sum, err := plugins.FileSHA256(good)
	require.NoError(t, err)

	x, err := plugins.Open(context.Background(), plugins.Spec{Binary: good, Checksum: "sha256:" + sum}, zerolog.Nop(), nil)
	require.NoError(t, err, "the pinned binary starts")
	require.NoError(t, x.Close())

	tampered := filepath.Join(dir, "hdet-explorer-tampered")
	copyExecutable(t, good, tampered)
	f, err := os.OpenFile(tampered, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte{0})
	require.NoError(t, err)
	require.NoError(t, f.Close())

	_, err = plugins.Open(context.Background(), plugins.Spec{Binary: tampered, Checksum: sum}, zerolog.Nop(), nil)
	require.ErrorIs(t, err, plugins.ErrChecksumMismatch)
	assert.True(t, plugins.IsConfigError(err))
	assert.Contains(t, err.Error(), sum)

	hdet := buildBinary(t, "./cmd/hdet")
	out, code := runHdet(t, hdet, "plugins", "check", "--sha256", sum, tampered)
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "does not match its pinned SHA-256")
	requireGone(t, dir)
}

func TestSeveralInstancesOfOneExplorerAreSeparateProcesses(t *testing.T) {
	dir := pluginDir(t)
	ctx := context.Background()
	cfg := map[string]string{"lr/hidden": `{"schedule":{"max_lr":0.01}}`, "lr/output": `{"schedule":{"max_lr":0.001}}`}
	pids := map[int]bool{}
	bases := map[string]float64{}
	for _, name := range []string{"lr/hidden", "lr/output"} {
		x, err := plugins.Open(ctx, plugins.Spec{Name: name, Binary: filepath.Join(dir, "hdet-explorer-lr")}, zerolog.Nop(), nil)
		require.NoError(t, err)
		defer x.Close()
		require.NoError(t, x.Init(ctx, hparam.Setup{Name: name, Config: []byte(cfg[name]), Ranks: 4, TotalSteps: 100, WindowSteps: 10, Seed: 7}))
		p, err := x.Plan(ctx, hparam.WindowRequest{Window: 0, Start: 0, Steps: 10})
		require.NoError(t, err)
		pids[x.Pid()] = true
		bases[name] = p.Base[9]
	}
	assert.Len(t, pids, 2, "one process per instance")
	assert.InDelta(t, 10, bases["lr/hidden"]/bases["lr/output"], 1e-9, "each instance follows its own config")
}

func TestExplorerIgnoresGroupSignals(t *testing.T) {
	dir := pluginDir(t)
	x, ev := openTest(t, dir, `{}`, 5*time.Second)
	pid := x.Pid()
	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		require.NoError(t, syscall.Kill(pid, sig))
	}
	time.Sleep(300 * time.Millisecond) // let a default action (death) happen if it were going to
	require.True(t, alive(pid), "SIGUSR1/SIGTERM/SIGINT/SIGHUP must not stop an explorer; hdet decides")
	base, err := window(x, 0)
	require.NoError(t, err)
	assert.Equal(t, 1.0, base)
	assert.Empty(t, ev.kinds())
	assert.Equal(t, pid, x.Pid())
}

// wrappers writes two wrapper scripts for explorer into a directory of
// their own, one that execs it and one that does not (so the shell stays
// the group's leader with the explorer as its child).
func wrappers(t *testing.T, explorer string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	w := map[string]string{}
	for name, line := range map[string]string{"exec": "exec %q \"$@\"", "no exec": "%q \"$@\""} {
		path := filepath.Join(dir, plugins.BinaryPrefix+strings.ReplaceAll(name, " ", "-"))
		require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"+fmt.Sprintf(line, explorer)+"\n"), 0o755))
		w[name] = path
	}
	return w
}

// readPID waits up to 10 s for a pid file a process writes.
func readPID(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil {
			return pid
		}
		require.True(t, time.Now().Before(deadline), "no pid in %s", path)
		time.Sleep(20 * time.Millisecond)
	}
}

// childConfig is the test explorer's config that makes it start a child
// it never ends, and the file where the child's pid appears.
func childConfig(t *testing.T) (string, string) {
	file := filepath.Join(t.TempDir(), "child.pid")
	return fmt.Sprintf(`{"child_pid_file":%q}`, file), file
}

func TestNoExplorerOutlivesItsHost(t *testing.T) {
	dir := pluginDir(t)
	host := buildBinary(t, "./plugins/internal/testhost")
	explorer := filepath.Join(dir, "hdet-explorer-test")
	wrap := wrappers(t, explorer)

	// start runs the host in its own process group, as a shell runs a job,
	// and returns it with its explorer's pid and the pid of the child the
	// explorer started.
	start := func(t *testing.T, binary string) (*exec.Cmd, int, int) {
		cfg, pidFile := childConfig(t)
		cmd := exec.Command(host, binary, cfg)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil { // stderr is safe to read once the host is gone
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("no pid line from the host: %v; its stderr: %s", err, stderr.String())
		}
		pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
		require.NoError(t, err, line)
		require.True(t, alive(pid))
		child := readPID(t, pidFile)
		require.True(t, alive(child))
		return cmd, pid, child
	}

	for _, binary := range []string{explorer, wrap["exec"], wrap["no exec"]} {
		t.Run("normal end/"+filepath.Base(binary), func(t *testing.T) {
			cfg, pidFile := childConfig(t)
			x, _ := openBinary(t, binary, cfg, 5*time.Second)
			base, err := window(x, 0)
			require.NoError(t, err, "the explorer works through %s", binary)
			assert.Equal(t, 1.0, base)
			pid, child := x.Pid(), readPID(t, pidFile)
			require.True(t, alive(child))
			require.NoError(t, x.Close())
			requireGone(t, dir, pid, child)
		})
	}
	t.Run("the explorer's own exit", func(t *testing.T) {
		cfg, pidFile := childConfig(t)
		once := filepath.Join(t.TempDir(), "failed-once")
		x, _ := openBinary(t, explorer, strings.TrimSuffix(cfg, "}")+fmt.Sprintf(`,"fail_at_window":0,"once_file":%q}`, once), 5*time.Second)
		pid, child := x.Pid(), readPID(t, pidFile)
		_, err := x.Plan(context.Background(), hparam.WindowRequest{Window: 0, Steps: 2})
		require.NoError(t, err, "restarted once")
		require.NotEqual(t, pid, x.Pid())
		// The crashed explorer's child went with it (the restarted one lives on, so
		// the plugin directory is not searched).
		requireGone(t, t.TempDir(), pid, child)
	})
	t.Run("Ctrl-C to the process group", func(t *testing.T) {
		cmd, pid, child := start(t, explorer)
		require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT))
		require.NoError(t, cmd.Wait(), "the host closes its explorer and exits 0")
		requireGone(t, dir, pid, child)
	})
	for _, binary := range []string{explorer, wrap["exec"], wrap["no exec"]} {
		t.Run("SIGKILL of the host/"+filepath.Base(binary), func(t *testing.T) {
			cmd, pid, child := start(t, binary)
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			var exit *exec.ExitError
			require.True(t, errors.As(cmd.Wait(), &exit))
			requireGone(t, dir, pid, child)
		})
	}
}

// TestExplorerThatNeverShakesHandsIsKilledWithItsChildren: a plugin that
// hangs before the handshake while a child holds its stdout fails to open
// at the handshake deadline with a message, and leaves no process behind.
func TestExplorerThatNeverShakesHandsIsKilledWithItsChildren(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	script := filepath.Join(dir, "hdet-explorer-hang")
	require.NoError(t, os.WriteFile(script, []byte(fmt.Sprintf("#!/bin/sh\nsleep 300 &\necho $$ $! > %q\nsleep 300\n", pids)), 0o755))

	done := make(chan error, 1)
	go func() {
		_, err := plugins.Open(context.Background(), plugins.Spec{Name: "hang", Binary: script, Handshake: 2 * time.Second}, zerolog.Nop(), nil)
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Open hangs past its 2 s handshake deadline")
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no go-plugin handshake within 2s")
	assert.Contains(t, err.Error(), script)
	b, rerr := os.ReadFile(pids)
	require.NoError(t, rerr)
	var leader, child int
	_, serr := fmt.Sscan(string(b), &leader, &child)
	require.NoError(t, serr)
	requireGone(t, dir, leader, child)
}

// TestWrapperThatWritesToStdoutGetsAMessage: a wrapper that writes to
// stdout before the explorer's handshake fails with a message that says
// what to change, not go-plugin's guess about architectures.
func TestWrapperThatWritesToStdoutGetsAMessage(t *testing.T) {
	dir := pluginDir(t)
	script := filepath.Join(t.TempDir(), "hdet-explorer-chatty")
	require.NoError(t, os.WriteFile(script, []byte(fmt.Sprintf("#!/bin/sh\necho starting the explorer\nexec %q\n", filepath.Join(dir, "hdet-explorer-test"))), 0o755))
	_, err := plugins.Open(context.Background(), plugins.Spec{Binary: script, Handshake: 10 * time.Second}, zerolog.Nop(), nil)
	require.ErrorIs(t, err, plugins.ErrNotExplorer)
	assert.True(t, plugins.IsConfigError(err), "hdet exits 2: the config names a program that is not an explorer")
	assert.Contains(t, err.Error(), "exec /path/to/explorer")
	assert.NotContains(t, err.Error(), "not compiled for this architecture")
	requireGone(t, dir)
}

func TestPluginsListAndCheck(t *testing.T) {
	dir := pluginDir(t)
	hdet := buildBinary(t, "./cmd/hdet")

	out, code := runHdet(t, hdet, "plugins", "list", "--plugin-dir", dir)
	require.Equal(t, 0, code, out)
	for _, name := range []string{"lr", "dropout", "weight-decay", "label-smoothing", "test"} {
		path := filepath.Join(dir, plugins.BinaryPrefix+name)
		sum, err := plugins.FileSHA256(path)
		require.NoError(t, err)
		assert.Regexp(t, fmt.Sprintf(`(?m)^%s +\S+ +\S+ +%s +%s$`, name, sum, path), out)
	}

	// Every shipped explorer passes with no flags: it describes an example config.
	for _, name := range []string{"lr", "dropout", "weight-decay", "label-smoothing"} {
		out, code := runHdet(t, hdet, "plugins", "check", filepath.Join(dir, plugins.BinaryPrefix+name))
		assert.Equal(t, 0, code, "%s:\n%s", name, out)
		assert.Contains(t, out, "PASS:", name)
	}
	out, code = runHdet(t, hdet, "plugins", "check", "--plugin-dir", dir, "--config", `{"schedule":{"max_lr":0.5}}`, "lr")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, `config {"schedule":{"max_lr":0.5}}`, "--config replaces the example")
	out, code = runHdet(t, hdet, "plugins", "check", "--plugin-dir", dir, "--config", `{"schedule":{}}`, "lr")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "max_lr")
	out, code = runHdet(t, hdet, "plugins", "check", "--plugin-dir", dir, "--config", `{"schedule":0.1,"bounds":{"upper":2}}`, "dropout")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "bounds.upper: 2 is outside what dropout admits, [0, 1)")

	out, code = runHdet(t, hdet, "plugins", "check", "--plugin-dir", dir, "--config", `{"fail_at_window":0,"fail_in":"observe","mode":"error"}`, "test")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "FAIL:")

	out, code = runHdet(t, hdet, "plugins", "check", filepath.Join(dir, "nothing-here"))
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "not an executable")
	requireGone(t, dir)
}

// TestExplorerBinariesLinkOnlyTheContract: an explorer binary links the SDK
// and the contract, not the host's launcher, discovery and check.
func TestExplorerBinariesLinkOnlyTheContract(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./cmd/hdet-explorer-lr", "./cmd/hdet-explorer-dropout",
		"./cmd/hdet-explorer-weight-decay", "./examples/explorer-label-smoothing")
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	assert.Contains(t, deps, "github.com/hdet-dev/hdet/plugins/contract")
	assert.NotContains(t, deps, "github.com/hdet-dev/hdet/plugins")
	assert.NotContains(t, deps, "github.com/rs/zerolog", "the host's logging stays in the host")
}

// admitRun is a short run with the lr explorer and a dropout explorer
// block.
func admitRun(dropout string) string {
	return `
workload: {hidden: [32], batch_size: 32}
train: {steps: 60, window: 10, seed: 5}
run: {progress: none}
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    config: {schedule: {kind: onecycle, max_lr: 0.004}, auto: {commit: continue}}
  - name: dropout
` + dropout + "\n"
}

// An explorer whose bounds or schedule leave what its hyperparameter admits
// is refused before training, with exit 2 naming it, the field and what is
// allowed; built-in or plugin.
func TestExplorerOutsideTheAdmissibleRangeIsRefusedAtSetup(t *testing.T) {
	hdet, dir := hdetBinaries(t)
	data := mnistDir(t)
	test := buildBinary(t, "./plugins/internal/testexplorer")
	for _, tc := range []struct{ block, want string }{
		{"    plugin: hdet-explorer-dropout\n    config: {schedule: 1.5, bounds: {upper: 2}}", "bounds.upper: 2 is outside what dropout admits, [0, 1)"},
		{"    plugin: hdet-explorer-dropout\n    config: {schedule: 1.5}", "schedule: gives 1.5 at step 0, outside what dropout admits, [0, 1)"},
		{"    plugin: " + test + "\n    config: {plan: {base: 0.1, bounds: [0, 2]}}", "bounds.upper: 2 is outside what dropout admits, [0, 1)"},
	} {
		cfg := filepath.Join(t.TempDir(), "cfg.yaml")
		require.NoError(t, os.WriteFile(cfg, []byte(admitRun(tc.block)), 0o644))
		out, code := runHdet(t, hdet, "run", cfg, "--run-dir", filepath.Join(t.TempDir(), "run"), "--plugin-dir", dir, "--set", "workload.data="+data)
		assert.Equal(t, 2, code, out)
		assert.Contains(t, lastLine(out), "dropout")
		assert.Contains(t, lastLine(out), tc.want)
		assert.NotContains(t, out, "rpc error")
		assert.NotContains(t, out, "step 0 ", "refused before training")
	}
}

// A plugin that plans values its hyperparameter does not admit mid-run is
// clamped (a clamped event per window), then frozen; the run completes.
func TestExplorerOutsideTheAdmissibleRangeMidRunIsClamped(t *testing.T) {
	test := buildBinary(t, "./plugins/internal/testexplorer")
	r := runHDET(t, 2, admitRun("    plugin: "+test+"\n    config: {plan: {base: 0.1, bounds: [0, 0.5]}, bad: {from: 2, base: -0.3, bounds: [-1, 2]}}"))
	require.NoError(t, r.err, "the run completes with exit 0:\n%s", r.stderr)
	r.end(t)
	kinds := map[int][]string{}
	for _, rec := range metrics.Of[metrics.WindowRecord](r.records(t)) {
		for _, v := range rec.Values["dropout"] {
			assert.True(t, v >= 0 && v <= 0.5, "window %d: dropout %v", rec.Window, v)
		}
		for _, ev := range rec.Events {
			if ev.Param == "dropout" {
				kinds[rec.Window] = append(kinds[rec.Window], ev.Kind)
				assert.Contains(t, ev.Message, "outside what dropout admits, [0, 1)")
			}
		}
	}
	assert.Equal(t, map[int][]string{2: {metrics.EventClamped}, 3: {metrics.EventClamped}, 4: {metrics.EventFrozen}}, kinds)
}

// runHdet runs hdet and returns its combined output and exit code.
func runHdet(t *testing.T, hdet string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, hdet, args...)
	cmd.Env = append(os.Environ(), plugins.EnvPluginDir+"=")
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(b), exit.ExitCode()
	}
	require.NoError(t, err)
	return string(b), 0
}

// benchExplorer is the built-in lr explorer binary, built once.
func benchExplorer(b *testing.B) string {
	b.Helper()
	return buildBinary(b, "./cmd/hdet-explorer-lr")
}

// BenchmarkExplorerStart measures launching an explorer process through the
// handshake and mutual TLS, and closing it.
func BenchmarkExplorerStart(b *testing.B) {
	bin := benchExplorer(b)
	for b.Loop() {
		x, err := plugins.Open(context.Background(), plugins.Spec{Binary: bin}, zerolog.Nop(), nil)
		require.NoError(b, err)
		require.NoError(b, x.Close())
	}
}

// BenchmarkExplorerPlanObserve measures one window's round trip with a
// running explorer: Plan, then Observe (with the state save it implies), for
// 4 ranks and 100-step windows.
func BenchmarkExplorerPlanObserve(b *testing.B) {
	ctx := context.Background()
	x, err := plugins.Open(ctx, plugins.Spec{Binary: benchExplorer(b)}, zerolog.Nop(), nil)
	require.NoError(b, err)
	defer x.Close()
	require.NoError(b, x.Init(ctx, hparam.Setup{Name: "lr", Config: []byte(`{"schedule":{"max_lr":0.01}}`), Ranks: 4, TotalSteps: 1 << 30, WindowSteps: 100, Seed: 1}))
	k := 0
	for b.Loop() {
		_, err := x.Plan(ctx, hparam.WindowRequest{Window: k, Start: 100 * k, Steps: 100})
		require.NoError(b, err)
		_, err = x.Observe(ctx, hparam.Observation{Window: k, Values: []float64{1e-3, 2e-3, 3e-3, 4e-3}, Losses: []float64{1, 0.9, 1.1, math.NaN()}})
		require.NoError(b, err)
		k++
	}
}
