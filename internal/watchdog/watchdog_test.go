package watchdog

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/engine"
	"github.com/hdet-dev/hdet/internal/testenv"
	"github.com/hdet-dev/hdet/mpi/reduce"
)

func beatAt(rank, window int, phase, op string, age time.Duration, now time.Time) *Beat {
	return &Beat{Rank: rank, PID: 100 + rank, Host: "n", Window: window, Step: 10 * window, Phase: phase, Op: op,
		Since: unix(now.Add(-age)), Time: unix(now.Add(-age))}
}

func TestLateNamesStaleAndBehindRanks(t *testing.T) {
	now := time.Now()
	fresh := time.Duration(0)
	beats := []*Beat{
		beatAt(0, 3, engine.PhaseGather, "allgather", fresh, now),
		beatAt(1, 3, engine.PhaseTrain, "", fresh, now),       // alive but stuck in training
		beatAt(2, 3, engine.PhaseTrain, "", time.Minute, now), // stopped: its beat is old
		nil, // never wrote one
	}
	late, why := Late(beats, []error{nil, nil, nil, os.ErrNotExist}, now, 5*time.Second)
	assert.Equal(t, []int{1, 2, 3}, late)
	assert.Contains(t, why, "rank 1 (pid 101 on n): behind, at window 3, step 30, phase train")
	assert.Contains(t, why, "rank 2 (pid 102 on n): not responding, last heartbeat 60.0s ago")
	assert.Contains(t, why, "rank 3: no heartbeat")
	assert.NotContains(t, why, "rank 0")
}

func TestLateWithEveryoneInTheSameCollective(t *testing.T) {
	now := time.Now()
	beats := []*Beat{beatAt(0, 2, engine.PhaseConverge, "converge allreduce", 0, now), beatAt(1, 2, engine.PhaseConverge, "converge allreduce", 0, now)}
	late, why := Late(beats, make([]error, 2), now, time.Second)
	assert.Empty(t, late)
	assert.Contains(t, why, "no rank is behind")
}

func TestBeforeOrdersByWindowPhaseAndCollectives(t *testing.T) {
	b := func(w int, phase string, ops int, op string) Beat {
		return Beat{Window: w, Phase: phase, Ops: ops, Op: op}
	}
	assert.True(t, before(b(2, engine.PhaseCheckpoint, 0, ""), b(3, engine.PhasePlan, 0, "")))
	assert.True(t, before(b(3, engine.PhasePlan, 0, "bcast"), b(3, engine.PhaseTrain, 0, "")))
	assert.True(t, before(b(3, engine.PhaseTrain, 4, ""), b(3, engine.PhaseTrain, 4, "allreduce")), "stuck computing step 5 while the others wait in its allreduce")
	assert.True(t, before(b(-1, "setup: device", 0, ""), b(0, engine.PhasePlan, 0, "")))
	assert.False(t, before(b(3, engine.PhaseTrain, 4, "allreduce"), b(3, engine.PhaseTrain, 4, "allreduce")))
}

// Rank 0 of two waits in a collective for rank 1, whose heartbeat stopped:
// the watchdog names rank 1 and aborts.
func TestWatchdogAbortsNamingTheStoppedRank(t *testing.T) {
	dir := t.TempDir()
	stale := beatAt(1, 0, engine.PhaseTrain, "", time.Hour, time.Now())
	b, err := json.Marshal(stale)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rank-1"), b, 0o644))

	var logs testenv.SyncBuffer
	aborted := make(chan int, 1)
	w := Start(Options{Dir: dir, Rank: 0, Size: 2, Timeout: 100 * time.Millisecond, Log: zerolog.New(&logs),
		Abort: func(code int) { aborted <- code }, Exit: func(int) {}})
	defer w.Stop()
	w.Enter(0, 0, engine.PhaseGather)
	end := w.collective("allgather") // never ends: rank 1 is gone
	defer end()
	select {
	case code := <-aborted:
		assert.Equal(t, 1, code)
	case <-time.After(time.Minute):
		t.Fatal("the watchdog did not abort")
	}
	out := logs.String()
	assert.Contains(t, out, "longer than train.watchdog (100ms)")
	assert.Contains(t, out, "rank 1 (pid 101 on n): not responding")
	assert.Contains(t, out, `"late_ranks":[1]`)
	assert.Contains(t, out, "silent: rank 1 on n;")

	own, err := ReadBeat(filepath.Join(dir, "rank-0"))
	require.NoError(t, err)
	assert.Equal(t, os.Getpid(), own.PID)
	assert.Equal(t, engine.PhaseGather, own.Phase)
	assert.Equal(t, "allgather", own.Op)
}

// clock is a test clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// A rank that keeps progressing is never aborted, however long the run; the
// same rank stuck past the timeout would be. The phases are timed on an
// injected clock, so a loaded machine cannot make a phase look long.
func TestWatchdogLeavesAProgressingRankAlone(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	aborted := make(chan int, 1)
	w := Start(Options{Dir: t.TempDir(), Rank: 0, Size: 1, Timeout: 200 * time.Millisecond, Log: zerolog.Nop(),
		Abort: func(code int) { aborted <- code }, Now: c.Now})
	defer w.Stop()
	for i := range 20 {
		w.Enter(i, i*10, engine.PhaseTrain)
		c.Advance(150 * time.Millisecond) // 3 s in all, each phase within the timeout
		_, _, _, over := w.overdue()
		require.False(t, over, "window %d", i)
	}
	select {
	case <-aborted:
		t.Fatal("aborted a rank that made progress")
	default:
	}
	c.Advance(100 * time.Millisecond)
	_, waited, what, over := w.overdue()
	assert.True(t, over, "stuck 250ms in one phase")
	assert.Equal(t, 250*time.Millisecond, waited)
	assert.Equal(t, "train.watchdog (200ms)", what)
}

// The commit's restart starts a worker's script again, as setup does: it
// gets the setup limit, not train.watchdog.
func TestRestartGetsTheSetupLimit(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	w := Start(Options{Dir: t.TempDir(), Rank: 0, Size: 1, Timeout: 200 * time.Millisecond, Log: zerolog.Nop(),
		Abort: func(int) {}, Now: c.Now})
	defer w.Stop()
	w.Enter(0, 0, engine.PhaseRestart)
	c.Advance(time.Minute)
	_, _, _, over := w.overdue()
	assert.False(t, over, "a minute restarting the script")
	c.Advance(SetupTimeout)
	_, _, what, over := w.overdue()
	assert.True(t, over, "past the setup limit")
	assert.Equal(t, "the setup limit (10m0s)", what)
	w.Enter(0, 0, engine.PhasePlan)
	c.Advance(250 * time.Millisecond)
	_, _, what, over = w.overdue()
	assert.True(t, over, "the main pass's first plan: train.watchdog again")
	assert.Equal(t, "train.watchdog (200ms)", what)
}

type fakeComm struct{ engine.Comm }

func (fakeComm) AllgatherFloat64(s, r []float64) error        { copy(r, s); return nil }
func (fakeComm) BcastMessage(m []byte, _ int) ([]byte, error) { return m, nil }
func (fakeComm) AllreduceFloat64([]float64, reduce.Op) error  { return errors.New("boom") }
func (fakeComm) AllreduceFloat32([]float32, reduce.Op) error  { return nil }

func TestCommLogsEveryCollectiveWithItsDuration(t *testing.T) {
	var logs testenv.SyncBuffer
	l := zerolog.New(&logs).Level(zerolog.DebugLevel)
	w := Start(Options{Rank: 0, Size: 1, Log: zerolog.Nop(), Collectives: &l}) // Timeout 0: no abort, no heartbeat
	defer w.Stop()
	w.Enter(2, 20, engine.PhaseGather)
	c := w.Comm(fakeComm{})
	recv := make([]float64, 1)
	require.NoError(t, c.AllgatherFloat64([]float64{3}, recv))
	assert.Equal(t, 3.0, recv[0])
	_, err := c.BcastMessage([]byte("x"), 0)
	require.NoError(t, err)
	assert.EqualError(t, c.AllreduceFloat64(nil, reduce.Sum), "boom", "errors pass through")
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 3)
	for i, op := range []string{"allgather", "bcast", "allreduce"} {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(lines[i]), &m))
		assert.Equal(t, op, m["collective"])
		assert.Equal(t, "gather", m["phase"])
		assert.Equal(t, 2.0, m["window"])
		assert.Contains(t, m, "seconds")
	}
	b, _ := w.snapshot()
	assert.Equal(t, 3, b.Ops)
}

func TestUnwritableHeartbeatWarnsOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	var logs testenv.SyncBuffer
	w := Start(Options{Dir: filepath.Join(file, "heartbeats"), Rank: 0, Size: 1, Timeout: time.Hour, Log: zerolog.New(&logs), Abort: func(int) {}})
	for i := range 5 {
		w.Enter(i, 0, engine.PhaseTrain)
	}
	w.Stop()
	assert.Equal(t, 1, strings.Count(logs.String(), "cannot write this rank's heartbeat"))
}

func TestNilWatchdogDoesNothing(t *testing.T) {
	var w *Watchdog
	w.Enter(1, 2, engine.PhasePlan)
	w.Setup("x")
	c := fakeComm{}
	assert.Equal(t, engine.Comm(c), w.Comm(c))
	w.Stop()
}

func TestPeriod(t *testing.T) {
	assert.Equal(t, 500*time.Millisecond, Period(5*time.Second))
	assert.Equal(t, 50*time.Millisecond, Period(0))
	assert.Equal(t, 10*time.Second, Period(30*time.Minute))
}

// An MPI_Abort that hangs (a frozen host's launcher) does not keep the rank
// alive: after the grace period the watchdog exits it with the same code.
func TestWatchdogExitsWhenAbortHangs(t *testing.T) {
	var logs testenv.SyncBuffer
	exited := make(chan int, 1)
	w := Start(Options{Dir: t.TempDir(), Rank: 0, Size: 1, Timeout: 100 * time.Millisecond, Log: zerolog.New(&logs),
		Abort: func(int) { select {} }, Exit: func(code int) { exited <- code }, AbortGrace: 200 * time.Millisecond})
	defer w.Stop()
	w.Enter(0, 0, engine.PhaseConverge)
	defer w.collective("converge allreduce")()
	select {
	case code := <-exited:
		assert.Equal(t, 1, code)
	case <-time.After(time.Minute):
		t.Fatal("the rank did not exit")
	}
	assert.Contains(t, logs.String(), "MPI_Abort has not ended this rank within 200ms; exiting it locally")
}

func TestSilentGroupsRanksByHost(t *testing.T) {
	now := time.Now()
	beat := func(rank int, host string, age time.Duration) *Beat {
		b := beatAt(rank, 1, engine.PhaseConverge, "", age, now)
		b.Host = host
		return b
	}
	beats := []*Beat{beat(0, "a", 0), beat(1, "a", 0), beat(2, "b", time.Minute), beat(3, "b", time.Minute), nil}
	assert.Equal(t, "ranks 2, 3 on b; rank 4 on an unknown host", Silent(beats, now, time.Second))
	assert.Empty(t, Silent(beats[:2], now, time.Second))
}
