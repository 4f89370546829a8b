package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hdet-dev/hdet/internal/testenv"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/checkpoint"
	"github.com/hdet-dev/hdet/internal/faults"
	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/watchdog"
)

// The fault suite: every failure hdet must survive or end cleanly, each a
// real `mpirun -np 4 hdet run` on a tiny model. TestMain prints one line
// per fault and a closing "N passed, N failed" line.

// faultCfg is a tiny run: 10 windows of 10 steps, a checkpoint after each.
var faultCfg = `
workload: {hidden: [32], batch_size: 32}
train: {steps: 100, window: 10, seed: 3, sync: local}
run: {progress: none, checkpoint_every: 1}
` + lrDropout

var faultResults struct {
	sync.Mutex
	lines          []string
	passed, failed int
}

// fault runs one fault scenario as a subtest and records its outcome.
func fault(t *testing.T, name string, fn func(t *testing.T)) {
	t.Run(name, func(t *testing.T) {
		t.Cleanup(func() {
			outcome := "PASS"
			switch {
			case t.Failed():
				outcome = "FAIL"
			case t.Skipped():
				outcome = "SKIP"
			}
			faultResults.Lock()
			defer faultResults.Unlock()
			faultResults.lines = append(faultResults.lines, fmt.Sprintf("fault %-72s %s", name, outcome))
			switch outcome {
			case "PASS":
				faultResults.passed++
			case "FAIL":
				faultResults.failed++
			}
		})
		fn(t)
	})
}

func TestMain(m *testing.M) {
	// The pinned checksums are OpenBLAS's Haswell kernels', which hdet asks
	// for unless the environment names other kernels: a developer's own
	// OPENBLAS_CORETYPE must not change what the suite expects.
	_ = os.Unsetenv("OPENBLAS_CORETYPE")
	code := m.Run()
	printFaultSummary(os.Stdout)
	os.Exit(code)
}

func printFaultSummary(w io.Writer) {
	faultResults.Lock()
	defer faultResults.Unlock()
	if len(faultResults.lines) == 0 {
		return
	}
	fmt.Fprintln(w, "fault suite:")
	for _, l := range faultResults.lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintf(w, "%d passed, %d failed\n", faultResults.passed, faultResults.failed)
}

// hitBy is the argument that injects an in-process fault of faults.Kinds
// into a run (withFaults): hitBy("nan", "2@3") is HDET_FAULTS=nan=2@3, its
// rank and window as the kind is written (Self.EveryRank: the window only).
// Each in-process kind has a case of the suite that hits by it
// (TestEveryInProcessKindHasAFaultCase).
func hitBy(kind, at string) string { return faultsEnv + kind + "=" + at }

// showsAfter asserts what faults.Kinds says a run shows after a fault of
// kind: that it finished (Outcome.Lives) or failed with Outcome.Exit, and
// that its log has Outcome.Log.
func showsAfter(t *testing.T, r hdetRun, kind string) {
	t.Helper()
	k, ok := faults.Lookup(kind)
	require.True(t, ok, "%s is a row of faults.Kinds", kind)
	if k.Lives {
		require.NoError(t, r.err, r.stderr)
	} else {
		require.Error(t, r.err, "a %s fault ends the run", kind)
	}
	if k.Exit != 0 {
		assert.Equal(t, k.Exit, exitCode(r.err), r.stderr)
	}
	assert.Contains(t, r.stderr, k.Log)
}

// faultRun is a run directory the scenario controls (to mount on it or
// relaunch in it), with the config written beside it.
type faultRun struct {
	runDir, cfgPath string
}

func newFaultRun(t *testing.T, cfg string) faultRun {
	t.Helper()
	dir := t.TempDir()
	f := faultRun{runDir: filepath.Join(dir, "run"), cfgPath: filepath.Join(dir, "config.in.yaml")}
	require.NoError(t, os.WriteFile(f.cfgPath, []byte(cfg), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(f.runDir, "checkpoints"), 0o755))
	return f
}

// cmd prepares mpirun -np 4 hdet run in this run directory.
func (f faultRun) cmd(t *testing.T, ctx context.Context, stderr *bytes.Buffer, args ...string) *exec.Cmd {
	t.Helper()
	_, plugins := hdetBinaries(t)
	hdet, args, env := withFaults(t, args)
	full := append([]string{hdet, "run", f.cfgPath, "--run-dir", f.runDir, "--plugin-dir", plugins, "--set", "workload.data=" + mnistDir(t)}, args...)
	cmd := mpirunCmd(ctx, t, 4, full...)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = stderr
	return cmd
}

// run runs it to the end.
func (f faultRun) run(t *testing.T, args ...string) hdetRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := f.cmd(t, ctx, &errb, args...)
	cmd.Stdout = &out
	err := cmd.Run()
	return hdetRun{dir: f.runDir, stdout: out.String(), stderr: errb.String(), err: err}
}

func exitCode(err error) int {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	return -1
}

// rankPIDs reads every rank's pid from the watchdog's heartbeats.
func rankPIDs(t *testing.T, runDir string) map[int]int {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(runDir, "heartbeats", "rank-*[0-9]"))
	require.NoError(t, err)
	pids := map[int]int{}
	for _, p := range paths {
		b, err := watchdog.ReadBeat(p)
		require.NoError(t, err)
		pids[b.Rank] = b.PID
	}
	return pids
}

// requireNoRankLeft checks that no process of the run of n ranks is left,
// hdet or explorer, waiting up to 10 s; with a worker's traceDir, no
// script's Python either.
func requireNoRankLeft(t *testing.T, runDir string, n int, traceDir string) {
	t.Helper()
	pids := rankPIDs(t, runDir)
	require.Len(t, pids, n, "every rank wrote a heartbeat")
	hdet, _ := hdetBinaries(t)
	var list []int
	for _, p := range pids {
		list = append(list, p)
	}
	if traceDir != "" {
		scripts := len(list)
		for rank := range n {
			for _, rec := range readTrace(t, traceDir, rank) {
				if rec.PID > 0 {
					list = append(list, rec.PID)
				}
			}
		}
		require.Greater(t, len(list), scripts, "the scripts traced their pids")
	}
	requireGone(t, filepath.Dir(hdet), list...)
}

// windowRecords returns the run's window records in file order.
func windowRecords(t *testing.T, r hdetRun) []metrics.WindowRecord {
	return r.windows(t)
}

// windowPasses is every record of window k, in order: one per pass, so a
// window that rolled back and ran again has two.
func windowPasses(t *testing.T, r hdetRun, k int) []metrics.WindowRecord {
	var out []metrics.WindowRecord
	for _, rec := range windowRecords(t, r) {
		if rec.Window == k {
			out = append(out, rec)
		}
	}
	return out
}

// rolledBack checks a run that rolled back once in window k and finished:
// the window's two passes, the failed one ending with a rollback event
// that says want, and the re-run, every rank healthy at half the learning
// rate. It returns both passes.
func rolledBack(t *testing.T, r hdetRun, k int, want string) (failed, again metrics.WindowRecord) {
	t.Helper()
	require.NoError(t, r.err, r.stderr)
	passes := windowPasses(t, r, k)
	require.Len(t, passes, 2, "window %d failed, then ran again", k)
	failed, again = passes[0], passes[1]
	require.NotEmpty(t, failed.Events)
	last := failed.Events[len(failed.Events)-1]
	assert.Equal(t, metrics.EventRollback, last.Kind)
	assert.Contains(t, last.Message, want)
	assert.InDelta(t, 0.5*float64(failed.Base["lr"]), float64(again.Base["lr"]), 1e-12, "the re-run window's learning rate is halved")
	assert.Equal(t, []bool{true, true, true, true}, again.Healthy)
	assert.Equal(t, 100, r.end(t).Step)
	return failed, again
}

// mountTmpfs mounts a tmpfs with opts on dir for the test. Mounting needs
// root: without it the test skips on a developer box and fails under CI.
func mountTmpfs(t *testing.T, dir, opts string) {
	t.Helper()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput()
	if err != nil {
		testenv.Need(t, fmt.Errorf("cannot mount a tmpfs (needs root): mount -t tmpfs -o %s: %w: %s", opts, err, out), testenv.GetRoot)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

func TestFaults(t *testing.T) {
	testenv.NeedTool(t, "mpirun")
	mnistDir(t)

	fault(t, "hang: a rank stopped (SIGSTOP) -> watchdog aborts naming it", func(t *testing.T) {
		f := newFaultRun(t, faultCfg)
		r := f.run(t, "--set", "train.watchdog=5s", hitBy("stop", "2@3"))
		showsAfter(t, r, "stop")
		assert.Contains(t, r.stderr, "longer than train.watchdog (5s)")
		assert.Contains(t, r.stderr, `"late_ranks":[2]`)
		assert.Regexp(t, `late: rank 2 \(pid \d+ on [^)]+\): (not responding|behind)`, r.stderr)
		assert.Contains(t, r.stderr, "MPI_ABORT was invoked")
		requireNoRankLeft(t, f.runDir, 4, "")
	})

	fault(t, "rank killed (SIGKILL) -> job ends, relaunch resumes", func(t *testing.T) {
		f := newFaultRun(t, faultCfg)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var stderr bytes.Buffer
		// Rank 2 stops itself in window 3 so the kill lands mid-run; the
		// watchdog is far off, so it is mpirun that must end the job.
		cmd := f.cmd(t, ctx, &stderr, "--set", "train.watchdog=10m", hitBy("stop", "2@3"))
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var victim int
		for victim == 0 {
			select {
			case err := <-done:
				t.Fatalf("the run ended before rank 2 stopped: %v\n%s", err, stderr.String())
			case <-time.After(50 * time.Millisecond):
			}
			if pid := rankPIDs(t, f.runDir)[2]; pid != 0 && procState(pid) == 'T' {
				victim = pid
			}
		}
		require.NoError(t, syscall.Kill(victim, syscall.SIGKILL))
		killed := time.Now()
		select {
		case err := <-done:
			require.Error(t, err, "a job with a dead rank must fail")
			t.Logf("mpirun exited %d, %.1fs after the kill", exitCode(err), time.Since(killed).Seconds())
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			t.Fatalf("mpirun still running a minute after rank 2 was killed:\n%s", stderr.String())
		}
		assert.Contains(t, stderr.String(), "exited on signal 9")
		requireNoRankLeft(t, f.runDir, 4, "")

		r := f.run(t)
		require.NoError(t, r.err, r.stderr)
		assert.Regexp(t, `"step":30,[^\n]*"message":"resuming from checkpoint"`, r.stderr)
		assert.Equal(t, 100, r.end(t).Step)
		assert.Equal(t, 10, windowsDone(f.runDir), "each window recorded once")
	})

	fault(t, "NaN rank -> left out of the average, run finishes", func(t *testing.T) {
		r := newFaultRun(t, faultCfg).run(t, hitBy("nan", "1@2"), "--debug-collectives")
		showsAfter(t, r, "nan")
		for rank := range 4 {
			// --debug-collectives: every rank logs each collective with its duration.
			assert.Regexp(t, fmt.Sprintf(`"rank":%d,"collective":"allgather","window":9,"phase":"gather","seconds":[0-9.e-]+`, rank), r.stderr)
		}
		for _, rec := range windowRecords(t, r) {
			assert.Equal(t, rec.Window < 2, rec.Healthy[1], "window %d", rec.Window)
		}
		assert.False(t, math.IsNaN(float64(r.end(t).Eval.Loss)))
	})

	fault(t, "divergent rank (finite loss x1000) -> treated as NaN", func(t *testing.T) {
		r := newFaultRun(t, faultCfg).run(t, hitBy("diverge", "3@4"))
		showsAfter(t, r, "diverge")
		diverged := 0
		for _, rec := range windowRecords(t, r) {
			assert.Equal(t, rec.Window < 4, rec.Healthy[3], "window %d", rec.Window)
			for _, e := range rec.Events {
				if e.Kind == metrics.EventUnhealthy && strings.Contains(e.Message, "diverged") {
					require.NotNil(t, e.Rank)
					assert.Equal(t, 3, *e.Rank)
					diverged++
				}
			}
		}
		assert.Equal(t, 6, diverged, "windows 4..9")
		assert.Contains(t, r.stderr, "(the healthy ranks' median; the previous window's when lower, but not below the best one's): diverged")
		assert.Greater(t, float64(r.end(t).Eval.Accuracy), 0.5)
	})

	fault(t, "every rank unhealthy -> rollback with halved lr, run finishes", func(t *testing.T) {
		r := newFaultRun(t, faultCfg).run(t, hitBy("nan_all", "4"))
		showsAfter(t, r, "nan_all")
		failed, again := rolledBack(t, r, 4, "rolled back to the checkpoint at step 40 with learning rates scaled by 0.5 (rollback 1 of at most 3)")
		assert.Equal(t, float64(failed.Base["dropout"]), float64(again.Base["dropout"]), "other hyperparameters are untouched")
		assert.Contains(t, r.stdout, "report: ", "the report takes the repeated window")
		summary, err := os.ReadFile(filepath.Join(r.dir, "report", "summary.md"))
		require.NoError(t, err)
		assert.Contains(t, string(summary), "| rollback |", "and keeps the failed pass's rollback event")
	})

	fault(t, "every rank unhealthy in the first window -> rollback to the step-0 checkpoint", func(t *testing.T) {
		r := newFaultRun(t, faultCfg).run(t, hitBy("nan_all", "0"))
		showsAfter(t, r, "nan_all")
		rolledBack(t, r, 0, "rolled back to the checkpoint at step 0 with learning rates scaled by 0.5")
	})

	fault(t, "all losses jump together (finite x100) -> rollback with halved lr", func(t *testing.T) {
		r := newFaultRun(t, faultCfg).run(t, hitBy("blowup_all", "4"))
		showsAfter(t, r, "blowup_all")
		failed, _ := rolledBack(t, r, 4, "rolled back to the checkpoint at step 40")
		kinds := []string{}
		for _, e := range failed.Events {
			kinds = append(kinds, e.Kind)
		}
		assert.Equal(t, []string{metrics.EventUnhealthy, metrics.EventRollback}, kinds)
		assert.Contains(t, failed.Events[0].Message, "times the previous window's")
		assert.Contains(t, failed.Events[0].Message, "training blew up everywhere")
	})

	fault(t, "every rank unhealthy, no rollbacks left -> clear error", func(t *testing.T) {
		f := newFaultRun(t, faultCfg)
		r := f.run(t, hitBy("nan_all", "4"), "--set", "train.max_rollbacks=0")
		require.Error(t, r.err)
		assert.Equal(t, 1, exitCode(r.err))
		assert.Contains(t, r.stderr, "every rank is unhealthy in window 4 (steps 40-50): training diverged everywhere after 0 rollbacks (train.max_rollbacks 0)")
		ck, _, skipped, err := checkpoint.Latest(filepath.Join(f.runDir, "checkpoints"))
		require.NoError(t, err, "the last checkpoint stays valid")
		assert.Empty(t, skipped)
		assert.Equal(t, 40, ck.Step)
	})

	fault(t, "explorer crashes at every restart -> its hyperparameter frozen, run finishes", func(t *testing.T) {
		cfg := strings.Replace(faultCfg, lrDropout, `
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    config: {schedule: {kind: onecycle, max_lr: 0.004}}
  - name: weight_decay
    plugin: hdet-explorer-test
    config: {fail_at_window: 3}
`, 1)
		r := newFaultRun(t, cfg).run(t, "--plugin-dir", pluginDir(t))
		require.NoError(t, r.err, r.stderr)
		frozen := 0
		for _, rec := range windowRecords(t, r) {
			for _, e := range rec.Events {
				if e.Kind == metrics.EventFrozen {
					assert.Equal(t, "weight_decay", e.Param)
					assert.Equal(t, 3, rec.Window)
					frozen++
				}
			}
		}
		assert.Equal(t, 1, frozen)
		assert.Contains(t, r.stderr, "frozen at")
		assert.Equal(t, 100, r.end(t).Step)
	})

	fault(t, "read-only checkpoint dir -> warnings, run finishes", func(t *testing.T) {
		f := newFaultRun(t, faultCfg)
		mountTmpfs(t, filepath.Join(f.runDir, "checkpoints"), "ro,size=1m")
		r := f.run(t)
		require.NoError(t, r.err, r.stderr)
		assert.Equal(t, 10, strings.Count(r.stderr, "checkpoint failed; the previous one stays valid; retrying at the next cadence"), "one warning per window, each a retry")
		assert.Contains(t, r.stderr, "the step-0 checkpoint failed")
		assert.Contains(t, r.stderr, "read-only file system")
		assert.Equal(t, 100, r.end(t).Step)
	})

	fault(t, "read-only checkpoint dir past run.checkpoint_max_failing -> stops", func(t *testing.T) {
		f := newFaultRun(t, faultCfg)
		mountTmpfs(t, filepath.Join(f.runDir, "checkpoints"), "ro,size=1m")
		r := f.run(t, "--set", "run.checkpoint_max_failing=1ms")
		require.Error(t, r.err)
		assert.Equal(t, 1, exitCode(r.err))
		assert.Contains(t, r.stderr, "(run.checkpoint_max_failing 1ms)")
		assert.Less(t, windowsDone(f.runDir), 10, "the run stopped early")
	})

	fault(t, "disk full (ENOSPC) -> previous checkpoints intact, warnings, run finishes", func(t *testing.T) {
		f := newFaultRun(t, faultCfg)
		dir := filepath.Join(f.runDir, "checkpoints")
		// Room for three checkpoints of this model (about 305 kB each: steps
		// 0, 10 and 20), not four.
		mountTmpfs(t, dir, "size=1100k")
		r := f.run(t)
		require.NoError(t, r.err, r.stderr)
		assert.Contains(t, r.stderr, "no space left on device")
		assert.Equal(t, 8, strings.Count(r.stderr, "checkpoint failed; the previous one stays valid"), "windows 2..9")
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		assert.Equal(t, []string{"ckpt-000000000000.hdet", "ckpt-000000000010.hdet", "ckpt-000000000020.hdet"}, names, "no partial file left")
		ck, _, skipped, err := checkpoint.Latest(dir)
		require.NoError(t, err)
		assert.Empty(t, skipped, "the checkpoints written before the disk filled are intact")
		assert.Equal(t, 20, ck.Step)
		assert.Equal(t, 100, r.end(t).Step)
	})
}

// Every in-process kind of faults.Kinds has a case of the fault suite
// that hits a run by it.
func TestEveryInProcessKindHasAFaultCase(t *testing.T) {
	suite, err := os.ReadFile("faults_test.go")
	require.NoError(t, err)
	for _, k := range faults.Kinds {
		if k.Where == faults.InProcess {
			assert.Contains(t, string(suite), fmt.Sprintf("hitBy(%q, ", k.Name), "a fault case of %s", k.Name)
		}
	}
}

// procState is a process's state letter from /proc (R, S, T, Z...), 0 when gone.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}
