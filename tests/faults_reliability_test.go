package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/runlock"
	"github.com/hdet-dev/hdet/internal/signals"
	"github.com/hdet-dev/hdet/internal/testenv"
)

// lockedBuffer is an output buffer read while the process still writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// started is an mpirun -np 4 hdet run going on in the background.
type started struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan error
}

// start launches the fault run with extra mpirun options (before hdet) and
// hdet flags.
func (f faultRun) start(t *testing.T, mpiOpts []string, args ...string) *started {
	t.Helper()
	hdet, plugins := hdetBinaries(t)
	full := append(mpiOpts, hdet, "run", f.cfgPath, "--run-dir", f.runDir, "--plugin-dir", plugins, "--set", "workload.data="+mnistDir(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	s := &started{cmd: mpirunCmd(ctx, t, 4, append(full, args...)...), stderr: &lockedBuffer{}, done: make(chan error, 1)}
	s.cmd.Stderr = s.stderr
	require.NoError(t, s.cmd.Start())
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { _ = s.cmd.Process.Kill() })
	return s
}

// waitFor waits until cond holds, failing if the run ends first.
func (s *started) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		select {
		case err := <-s.done:
			s.done <- err
			t.Fatalf("the run ended (%v) before %s:\n%s", err, what, s.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 2 minutes:\n%s", what, s.stderr.String())
		}
	}
}

// wait returns the run's exit code.
func (s *started) wait(t *testing.T) int {
	t.Helper()
	select {
	case err := <-s.done:
		if err == nil {
			return 0
		}
		return exitCode(err)
	case <-time.After(3 * time.Minute):
		t.Fatalf("the run did not end:\n%s", s.stderr.String())
	}
	return -1
}

var pausedRE = regexp.MustCompile(`hdet: test pause at (\w+) \(pid (\d+)\)`)

// paused waits for every rank to report the test pause and returns their pids.
func (s *started) paused(t *testing.T, point string) []int {
	t.Helper()
	var pids []int
	s.waitFor(t, "4 ranks paused at "+point, func() bool {
		pids = pids[:0]
		for _, m := range pausedRE.FindAllStringSubmatch(s.stderr.String(), -1) {
			if m[1] == point {
				pid, _ := strconv.Atoi(m[2])
				pids = append(pids, pid)
			}
		}
		return len(pids) == 4
	})
	return pids
}

func pauseAt(point string) []string { return []string{"-x", signals.PauseEnv + "=" + point} }

// TestFaultsLockAndSignals: the run-directory lock and signals during setup
// (issue 16, items 1 and 2), counted in the fault suite's summary.
func TestFaultsLockAndSignals(t *testing.T) {
	testenv.NeedTool(t, "mpirun")
	mnistDir(t)

	fault(t, "lock: second launch into a training run dir -> exit 2 naming the holder, first unharmed", func(t *testing.T) {
		f := newFaultRun(t, faultCfg)
		first := f.start(t, pauseAt("explorers"))
		first.paused(t, "explorers") // rank 0 holds the lock from config loading on
		second := f.run(t)
		assert.Equal(t, 2, exitCode(second.err), second.stderr)
		host, _ := os.Hostname()
		assert.Regexp(t, `run.dir \S+ is in use by another hdet run \(pid \d+ on host `+regexp.QuoteMeta(host)+`, started 20\d\d-`, second.stderr)
		require.NoError(t, first.cmd.Process.Signal(syscall.SIGUSR1))
		assert.Equal(t, 3, first.wait(t), first.stderr.String())
		_, err := os.Stat(filepath.Join(f.runDir, "metrics.jsonl"))
		assert.ErrorIs(t, err, os.ErrNotExist, "neither run wrote a metrics record")
		r := f.run(t)
		require.NoError(t, r.err, r.stderr)
		assert.Len(t, metrics.Of[metrics.StartRecord](r.records(t)), 1, "one start record")
		assert.Equal(t, 10, windowsDone(f.runDir))
	})

	fault(t, "lock: stale lock file of a dead process -> taken over, run finishes", func(t *testing.T) {
		f := newFaultRun(t, faultCfg)
		dead := exec.Command("true")
		require.NoError(t, dead.Run())
		require.NoError(t, os.WriteFile(filepath.Join(f.runDir, runlock.FileName),
			[]byte(`{"host":"gone","pid":`+strconv.Itoa(dead.Process.Pid)+`,"start":"2026-01-01T00:00:00Z"}`), 0o644))
		r := f.run(t)
		require.NoError(t, r.err, r.stderr)
		assert.Contains(t, r.stderr, "taking over the run directory's lock from a run that is gone")
		assert.Contains(t, r.stderr, "pid "+strconv.Itoa(dead.Process.Pid)+" on host gone")
		b, err := os.ReadFile(filepath.Join(f.runDir, runlock.FileName))
		require.NoError(t, err)
		assert.Empty(t, b, "a clean end leaves no holder named")
	})

	fault(t, "lock: rank 0 (the holder) killed (SIGKILL) -> relaunch takes the lock over and resumes", func(t *testing.T) {
		f := newFaultRun(t, faultCfg)
		s := f.start(t, nil, "--set", "train.watchdog=10m")
		s.waitFor(t, "3 windows", func() bool { return windowsDone(f.runDir) >= 3 })
		pid := rankPIDs(t, f.runDir)[0]
		require.NotZero(t, pid)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		assert.NotEqual(t, 0, s.wait(t), "a job whose rank 0 died fails")
		requireNoRankLeft(t, f.runDir, 4, "")
		r := f.run(t)
		require.NoError(t, r.err, r.stderr)
		assert.Contains(t, r.stderr, "taking over the run directory's lock")
		assert.Contains(t, r.stderr, "resuming from checkpoint")
		assert.Equal(t, 100, r.end(t).Step)
		assert.Equal(t, 10, windowsDone(f.runDir), "each window recorded once")
	})

	for _, point := range []string{"mpi", "data", "explorers"} {
		fault(t, "signal: USR1 to mpirun while ranks set up ("+point+") -> exit 3, nothing trained, relaunch runs", func(t *testing.T) {
			f := newFaultRun(t, faultCfg)
			s := f.start(t, pauseAt(point))
			s.paused(t, point)
			require.NoError(t, s.cmd.Process.Signal(syscall.SIGUSR1))
			assert.Equal(t, 3, s.wait(t), s.stderr.String())
			assert.Contains(t, s.stderr.String(), "a signal arrived during setup: stopping before training")
			assert.Equal(t, 0, windowsDone(f.runDir), "no window trained")
			if point != "explorers" {
				return // one relaunch suffices
			}
			r := f.run(t)
			require.NoError(t, r.err, r.stderr)
			assert.Equal(t, 100, r.end(t).Step)
		})
	}

	fault(t, "signal: TERM to every rank while plugins start -> exit 3, nothing trained", func(t *testing.T) {
		f := newFaultRun(t, faultCfg)
		s := f.start(t, pauseAt("explorers"))
		for _, pid := range s.paused(t, "explorers") {
			require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
		}
		assert.Equal(t, 3, s.wait(t), s.stderr.String())
		assert.Contains(t, s.stderr.String(), "a signal arrived during setup")
		assert.Equal(t, 0, windowsDone(f.runDir))
	})

	fault(t, "signal: USR1 to one rank only, during data loading -> every rank stops, exit 3", func(t *testing.T) {
		f := newFaultRun(t, faultCfg)
		s := f.start(t, pauseAt("data"))
		pids := s.paused(t, "data")
		require.NoError(t, syscall.Kill(pids[len(pids)-1], syscall.SIGUSR1))
		assert.Equal(t, 3, s.wait(t), s.stderr.String())
		assert.Equal(t, 0, windowsDone(f.runDir))
		assert.False(t, strings.Contains(s.stderr.String(), "starting HDET run"), "no rank started training")
	})
}
