package tests

import (
	"bufio"
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

	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/testenv"
)

// resumeMLPArgs is the worker run of the Slurm time-limit test: 200 steps
// (a search pass of 50, then the main pass), windows of 5.
var resumeMLPArgs = []string{"--steps", "200", "--window", "5"}

var finalSHA = regexp.MustCompile(`resume_mlp\.py: final parameters sha256 ([0-9a-f]{64})`)

// TestSlurmWorkerTimeLimitResumes (issue 50, item 4): a PyTorch worker run
// under `hdet sbatch --worker` that outlives its job's time limit twice
// finishes across two requeues, resuming each time at hdet's checkpoint:
// once stopped in the search pass, once in the main pass. The final
// parameters equal an uninterrupted run's, each window is in metrics.jsonl
// once, and no launch trains a window that an earlier one had finished.
//
// Slurm warns the batch script with B:USR1 --signal-lead seconds before the
// limit; the test sends that same signal with `scancel --signal=USR1
// --batch` at the points it chooses, because a real one-minute limit (Slurm's
// smallest) is shorter than four PyTorch workers take to start on a loaded
// two-core machine, and a run stopped before its first window makes no
// progress however often it is requeued.
func TestSlurmWorkerTimeLimitResumes(t *testing.T) {
	testenv.NeedTorch(t)
	c := startSlurm(t)
	// Each launch starts four PyTorch workers (twice in the launch that
	// commits): minutes on a loaded CI machine.
	c.patience = 8 * time.Minute
	script := filepath.Join(repoRoot(t), "tests", "testdata", "resume_mlp.py")
	var refTrace string
	whole := runWorker(t, 4, "", func(traceDir string, _ *exec.Cmd) { refTrace = traceDir }, script, resumeMLPArgs...)
	require.NoError(t, whole.err, "%s\n%s", whole.stdout, whole.stderr)
	m := finalSHA.FindStringSubmatch(whole.stdout + whole.stderr)
	require.NotNil(t, m, "the uninterrupted run's final sha256:\n%s", whole.stdout)
	want := m[1]

	hdet, plugins := hdetBinaries(t)
	dir := t.TempDir()
	traceDir := filepath.Join(dir, "trace")
	require.NoError(t, os.Mkdir(traceDir, 0o755))
	// --sleep only slows the loop so that the signals land mid-pass; it
	// changes nothing the run computes.
	worker := append([]string{"--worker", "--", testenv.Python, script}, append(resumeMLPArgs, "--sleep", "0.1")...)
	job := sbatchScript(t, dir, "job.sbatch", append([]string{"--ntasks-per-node", "4", "--time", "10:00",
		"--signal-lead", "60", "--partition", "debug", "--job-name", "hdetw", "--hdet", hdet,
		"--run-root", filepath.Join(dir, "runs")}, worker...)...)
	c.env = append(c.env, "HDET_PLUGIN_DIR="+plugins, "HDET_TRACE_DIR="+traceDir)
	id := strings.TrimSpace(c.run(t, dir, "sbatch", "--parsable", job))
	t.Cleanup(func() { _ = exec.Command("scancel", id).Run() })
	runDir, out := filepath.Join(dir, "runs", id), filepath.Join(dir, "hdetw-"+id+".out")

	// The time limit, twice: two windows into the search pass, then two
	// windows into the main pass.
	for i, pass := range []int{0, 1} {
		c.waitFor(t, "2 windows of pass "+strconv.Itoa(pass), func() bool { return passWindows(runDir, pass) >= 2 })
		c.run(t, "", "scancel", "--signal=USR1", "--batch", id)
		f := c.waitRequeued(t, id)
		log, _ := os.ReadFile(out)
		require.Equal(t, "PENDING", f["JobState"], "rank 0 requeues the job:\n%s", log)
		assert.Equal(t, strconv.Itoa(i+1), f["Restarts"])
		c.startNow(t, id)
	}
	f := c.waitState(t, id, "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
	log, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, "COMPLETED", f["JobState"], "job %v\n%s", f, log)
	checkWorkerRequeues(t, string(log), want, hdetRun{dir: runDir}, whole, traceDir, refTrace)
}

// checkWorkerRequeues: the requeued run (its job log, run directory and
// worker traces) ended as the uninterrupted one did, having stopped and
// resumed twice, each window recorded and trained once.
func checkWorkerRequeues(t *testing.T, log, want string, got, whole hdetRun, traceDir, refTrace string) {
	t.Helper()
	assert.Equal(t, 2, strings.Count(log, "stopped by a signal after checkpointing; launch the same command again to resume"), log)
	assert.Equal(t, 2, strings.Count(log, "job requeued"), log)
	m := finalSHA.FindStringSubmatch(log)
	require.NotNil(t, m, log)
	assert.Equal(t, want, m[1], "the final parameters")
	assert.Equal(t, whole.end(t).Checksum, got.end(t).Checksum)

	// The script's start step in each worker launch: fresh, resumed in the
	// search pass, fresh at the commit, resumed in the main pass.
	var starts []int
	for _, s := range regexp.MustCompile(`resume_mlp\.py: start step (\d+)`).FindAllStringSubmatch(log, -1) {
		n, _ := strconv.Atoi(s[1])
		starts = append(starts, n)
	}
	require.Len(t, starts, 4, log)
	assert.Equal(t, 0, starts[0])
	assert.Positive(t, starts[1], "the search pass resumed at its checkpoint")
	assert.Equal(t, 0, starts[2], "the main pass starts at step 0")
	assert.Positive(t, starts[3], "the main pass resumed at its checkpoint")

	type key struct{ pass, window int }
	seen := map[key]bool{}
	for _, w := range got.windows(t) {
		k := key{w.Pass, w.Window}
		assert.False(t, seen[k], "window %v recorded twice", k)
		seen[k] = true
	}
	assert.Len(t, seen, len(whole.windows(t)), "each window once")
	// The work redone: windows that rank 0's workers trained beyond the
	// uninterrupted run's. A stop at a window end with a checkpoint redoes
	// none.
	assert.Equal(t, windowsTrained(t, refTrace), windowsTrained(t, traceDir), "windows trained over all launches")
}

// passWindows counts the windows of pass in runDir's metrics.jsonl.
func passWindows(runDir string, pass int) int {
	recs, _, err := metrics.ReadFile(filepath.Join(runDir, "metrics.jsonl"))
	if err != nil {
		return 0
	}
	n := 0
	for _, w := range metrics.Of[metrics.WindowRecord](recs) {
		if w.Pass == pass {
			n++
		}
	}
	return n
}

// windowsTrained counts the windows rank 0's worker processes reported
// done, over every launch (the trace file is appended to).
func windowsTrained(t *testing.T, traceDir string) int {
	t.Helper()
	f, err := os.Open(filepath.Join(traceDir, "trace-rank0.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"event": "done"`) {
			n++
		}
	}
	require.NoError(t, sc.Err())
	return n
}
