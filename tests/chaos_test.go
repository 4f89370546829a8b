package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/hdet-dev/hdet/slurm"
)

// The chaos soak (issues 32 and 42): one training run on the test bed's 3
// hosts (the built-in workload, 3 x 2 ranks; or a PyTorch script under
// --worker, 3 x 1: chaos_workload_test.go), the default path (auto.commit restart: a search pass,
// the commit, the main pass from step 0), driven through a seeded schedule
// of faults placed by window (chaos_schedule_test.go) in the search pass,
// at the commit and in the main pass, relaunched after every failure the
// way `sbatch --requeue` does (the same command, the same run directory),
// until it finishes. The verdict: the final checksum equals an
// uninterrupted run's (and so does every window's, in both passes), so do
// the committed values, metrics.jsonl holds each window once per pass in
// order with one commit record between the passes and one end record,
// every checkpoint left is whole, no process is left on any host, and
// every failed launch exited non-zero within chaosBound of its fault.
// HDET_CHAOS_SEED replays a schedule, HDET_CHAOS_FAULTS sizes it (the CI
// run by default: 25 faults, 8 for the PyTorch script; 200 for the nightly
// kind of soak); the run's length follows from the schedule.

const (
	chaosWatchdog   = 15 * time.Second // train.watchdog: ends a launch stuck on a frozen host or a cut link
	chaosMaxFailing = 3 * time.Second  // run.checkpoint_max_failing: at 10-50 ms a window, 60-300 windows unprotected
	chaosWindow     = 5                // steps per window
	// chaosBound: a launch a fault ends must exit within this of the fault
	// (of its SIGCONT for a frozen host: a stopped host's daemon cannot be
	// told to end under mpirun), and a launch no fault stops must make
	// progress within it; past it the launch counts as hung.
	chaosBound = 3 * chaosWatchdog
	// chaosDiskMiB sizes the tmpfs the run directory is on.
	chaosDiskMiB = 12
)

// chaosConfig is the built-in workload's run: the default path, whose lr
// explorer searches, commits, and trains the main pass of windows windows
// from step 0; auto.until 0.3 (just past OneCycle's warm-up) gives the
// search pass room for its faults, where the default would stop it at 16
// windows.
func chaosConfig(windows int) string {
	return fmt.Sprintf(`# the chaos soak's run (tests/chaos_test.go): the default path, auto.commit restart
workload: {hidden: [32], batch_size: 32}
train: {steps: %d, window: %d, seed: 11, sync: local, watchdog: %s}
run: {progress: none, checkpoint_every: 2, keep: 3, checkpoint_max_failing: %s}
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    config:
      schedule: {kind: onecycle, max_lr: 0.004}
      spread: {alpha: 0.5}
      auto: {until: 0.3}
`, windows*chaosWindow, chaosWindow, chaosWatchdog, chaosMaxFailing)
}

// chaosParams reads HDET_CHAOS_SEED (default 1) and HDET_CHAOS_FAULTS
// (default: the workload's CI size).
func chaosParams(t *testing.T, defaultFaults int) (seed uint64, faults int) {
	t.Helper()
	seed, faults = 1, defaultFaults
	if s := os.Getenv("HDET_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "HDET_CHAOS_SEED")
		seed = v
	}
	if s := os.Getenv("HDET_CHAOS_FAULTS"); s != "" {
		v, err := strconv.Atoi(s)
		require.NoError(t, err, "HDET_CHAOS_FAULTS")
		require.Positive(t, v, "HDET_CHAOS_FAULTS")
		faults = v
	}
	return seed, faults
}

func TestMultiHostChaos(t *testing.T) { soakChaos(t, &builtinChaos) }

// soakChaos is the soak of one workload.
func soakChaos(t *testing.T, wl *chaosWorkload) {
	seed, nFaults := chaosParams(t, wl.faults)
	rng := rand.New(rand.NewPCG(seed, 0x68646574))
	sched := newChaosSchedule(rng, nFaults, wl.shape())
	windows := sched.main
	say(t, "chaos: %s workload, HDET_CHAOS_SEED=%d HDET_CHAOS_FAULTS=%d (replay with these two)", wl.name, seed, nFaults)
	say(t, "chaos: schedule: %s", sched)
	wl.need(t)
	tb := startTestbed(t, 3, false)
	tools := chaosTools(t, tb)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "chaos.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(wl.config(windows)), 0o644))

	c := newChaos(t, tb, rng, wl, cfgPath, windows)
	c.tools = tools
	c.prepare(dir)
	c.ref = c.reference(filepath.Join(dir, "reference"))
	c.setupTime = c.ref.setup
	say(t, "chaos: uninterrupted run: %.1f s (setup %.1f s, %.1f ms a window), %d search windows, the commit (%s), %d main windows, checksum %s%s",
		c.ref.wall.Seconds(), c.ref.setup.Seconds(), 1e3*c.ref.window.Seconds(), c.ref.search, committed(c.ref.commit), c.ref.main, c.ref.checksum, c.ref.scriptLine())
	require.NoError(t, sched.place(c.ref.search))
	c.sched = sched
	t.Logf("chaos: slots at positions (search windows 0-%d, the commit %d, main windows from %d): %s", c.ref.search-1, c.ref.search, c.ref.search+1, sched.positions())

	fsDir := filepath.Join(dir, "fs")
	require.NoError(t, os.Mkdir(fsDir, 0o755))
	mountTmpfs(t, fsDir, fmt.Sprintf("size=%dm", chaosDiskMiB+sched.total/200))
	t.Cleanup(c.killEverything) // before the tmpfs is unmounted
	c.useDisk(fsDir)
	c.startBatches()

	c.run(nFaults)
	c.printTable(seed, nFaults)
	c.verdict()
}

// say prints a line of the soak's report on stdout (go test -v shows it
// as it comes) and in the test's log.
func say(t *testing.T, format string, a ...any) {
	t.Helper()
	fmt.Printf(format+"\n", a...)
}

// mpirunArgs is the launch: 3 hosts x the workload's ranks each, the
// keepalives `hdet sbatch --launcher mpirun` writes, the run directory,
// then the workload's arguments.
func (c *chaos) mpirunArgs(runDir string) []string {
	args := []string{"--hostfile", c.tb.hostfile(c.t, 3, c.wl.perHost), "-np", strconv.Itoa(c.ranks()), "--bind-to", "none"}
	args = append(args, strings.Fields(slurm.MpirunKeepalive)...)
	args = append(args, c.hdet, "run", c.cfgPath, "--run-dir", runDir, "--plugin-dir", filepath.Dir(c.explorer))
	return append(args, c.wl.args(c)...)
}

// ranks is the run's: 3 hosts x the workload's ranks each.
func (c *chaos) ranks() int { return 3 * c.wl.perHost }

// reference runs the same config once without faults.
func (c *chaos) reference(runDir string) chaosRef {
	t := c.t
	c.runDir = runDir
	c.args = c.mpirunArgs(runDir)
	l := c.startLaunch()
	var firstWindow time.Time
	for !l.exited() {
		if b := c.beat(l); firstWindow.IsZero() && b != nil && b.Window >= 0 {
			firstWindow = time.Now()
		}
		time.Sleep(10 * time.Millisecond)
		require.Less(t, time.Since(l.start), 20*time.Minute, "the uninterrupted run hangs")
	}
	require.Equal(t, 0, l.code, "the uninterrupted run failed:\n%s", l.tail(40))
	recs := readMetrics(t, runDir)
	ref := chaosRef{wall: l.end.Sub(l.start), setup: firstWindow.Sub(l.start), windows: map[[2]int]string{}}
	for _, r := range recs {
		switch r := r.(type) {
		case metrics.WindowRecord:
			ref.windows[[2]int{r.Pass, r.Window}] = r.Checksum
			if r.Pass == plan.PassSearch {
				ref.search++
			} else {
				ref.main++
			}
		case metrics.CommitRecord:
			require.Nil(t, ref.commit, "the uninterrupted run committed twice")
			ref.commit = &r
		case metrics.EndRecord:
			ref.checksum = r.Checksum
		}
	}
	require.NotNil(t, ref.commit, "the uninterrupted run committed (auto.commit restart, the default)")
	require.Positive(t, ref.search, "the uninterrupted run has a search pass")
	require.Equal(t, c.windows, ref.main, "the main pass has the run's windows")
	require.Len(t, ref.windows, ref.search+ref.main)
	require.NotEmpty(t, ref.checksum)
	if c.wl.script != "" {
		ref.script = scriptChecksum(l)
		require.NotEmpty(t, ref.script, "the uninterrupted run's script printed its checksum:\n%s", l.tail(20))
	}
	ref.window = (ref.wall - ref.setup) / time.Duration(ref.search+ref.main)
	c.checkLeftovers(l)
	c.launches = nil
	return ref
}

type chaosRef struct {
	wall, setup, window time.Duration
	checksum            string
	windows             map[[2]int]string     // (pass, window) -> checksum after its converge
	search, main        int                   // windows of each pass
	commit              *metrics.CommitRecord // the commit record
	script              string                // the worker script's checksum of its final parameters
}

// scriptLine is the reference's script checksum, for the report.
func (r chaosRef) scriptLine() string {
	if r.script == "" {
		return ""
	}
	return ", the script's " + r.script
}

// committed is a commit record's values, for the report.
func committed(r *metrics.CommitRecord) string {
	if r == nil {
		return "none"
	}
	names := make([]string, 0, len(r.Committed))
	for n := range r.Committed {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		v := r.Committed[n]
		parts = append(parts, fmt.Sprintf("%s %.6g, offset %.6g", n, float64(v.Value), float64(v.Offset)))
	}
	return fmt.Sprintf("after step %d: %s", r.Step, strings.Join(parts, "; "))
}

func readMetrics(t *testing.T, runDir string) []metrics.Record {
	t.Helper()
	recs, truncated, err := metrics.ReadFile(filepath.Join(runDir, "metrics.jsonl"))
	require.NoError(t, err)
	require.False(t, truncated, "metrics.jsonl ends in a partial line")
	return recs
}

// lastOf is the last of recs, nil for none.
func lastOf(recs []metrics.Record) metrics.Record {
	if len(recs) == 0 {
		return nil
	}
	return recs[len(recs)-1]
}

// verdict asserts what the soak promises.
func (c *chaos) verdict() {
	t := c.t
	recs := readMetrics(t, c.runDir)
	var seq []string
	ends, commits := 0, 0
	for i, r := range recs {
		switch r := r.(type) {
		case metrics.WindowRecord:
			seq = append(seq, fmt.Sprintf("%d/%d", r.Pass, r.Window))
			want, ok := c.ref.windows[[2]int{r.Pass, r.Window}]
			assert.True(t, ok, "pass %d window %d: not a window of the uninterrupted run", r.Pass, r.Window)
			assert.Equal(t, want, r.Checksum, "pass %d window %d's parameters differ from the uninterrupted run's", r.Pass, r.Window)
		case metrics.CommitRecord:
			commits++
			seq = append(seq, "commit")
			assert.Equal(t, c.ref.commit.Step, r.Step, "the search pass ended where the uninterrupted run's did")
			assert.Equal(t, c.ref.commit.Committed, r.Committed, "the committed values differ from the uninterrupted run's")
		case metrics.EndRecord:
			ends++
			assert.Equal(t, len(recs)-1, i, "the end record is the last line")
			assert.Equal(t, c.ref.checksum, r.Checksum, "the final parameters differ from the uninterrupted run's")
		}
	}
	var want []string
	for w := range c.ref.search {
		want = append(want, fmt.Sprintf("%d/%d", plan.PassSearch, w))
	}
	want = append(want, "commit")
	for w := range c.ref.main {
		want = append(want, fmt.Sprintf("%d/%d", plan.PassMain, w))
	}
	assert.Equal(t, want, seq, "each window recorded exactly once per pass, in order (pass/window), the commit record between the passes")
	assert.Equal(t, 1, commits, "one commit record")
	assert.Equal(t, 1, ends, "one end record")
	assert.Empty(t, c.badCheckpoints(), "every file in checkpoints/ is a whole, readable checkpoint")
	c.scriptVerdict()
	assert.Empty(t, c.leftovers, "no process left on any host after a launch")
	for _, l := range c.launches {
		assert.False(t, l.hang, "launch %d hung:\n%s", l.n, l.tail(30))
		if l.code != 0 && l.cause != nil {
			assert.LessOrEqual(t, l.exitAfter, chaosBound, "launch %d ended %.1f s after its fault (%s), past the bound", l.n, l.exitAfter.Seconds(), l.cause.kind)
		}
	}
	for _, p := range c.problems {
		t.Error(p)
	}
	c.checkExpects()
	for _, l := range c.launches {
		if l.cause != nil && outcome(l.cause.kind).Exit != 0 && len(l.faults) == 1 {
			assert.Equal(t, outcome(l.cause.kind).Exit, l.code, "launch %d: %s alone ends a launch with that exit (faults.Kinds)", l.n, l.cause.kind)
		}
	}
	kinds := c.kindsSeen()
	assert.Equal(t, c.nFaults, len(c.faults), "every scheduled fault was injected")
	if c.nFaults >= 25 {
		assert.GreaterOrEqual(t, len(kinds), 8, "faults of at least 8 kinds")
	}
	// Faults in each part of the run the schedule has slots for: the search
	// pass's windows, the commit, the main pass's windows.
	landed := c.landed()
	for _, where := range []string{whereSearch, whereCommit, whereMain} {
		if c.sched.count(where) > 0 {
			assert.Positive(t, landed[where], "a fault landed %s (%s)", whereName[where], c.sched)
		}
	}
}
