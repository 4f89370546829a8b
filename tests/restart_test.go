package tests

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// pinnedRestart searches for two windows (auto.until 0.3 of 60 steps: the
// boundary at step 20), commits the learning rate and trains the main
// pass; dropout's spread, without an auto phase, asks for no search of its
// own and is dropped in the main pass like the learning rate's.
const pinnedRestart = `
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    config: {schedule: {kind: onecycle, max_lr: 0.004}, spread: {alpha: 0.5}, auto: {until: 0.3}}
  - name: dropout
    plugin: hdet-explorer-dropout
    config: {schedule: 0.1, spread: {alpha: 0.05}, auto: {enabled: false}}
`

const pinnedRestartSum = "055e3f39535b6169"

// A restart run: two search windows, the commit, then six main-pass
// windows from step 0 with every rank at the same, committed values. A
// resume from a checkpoint of either pass ends bit for bit where the run
// left alone did.
func TestRestartPassesAndResume(t *testing.T) {
	r := runHDET(t, 4, pinnedCfg("local", pinnedRestart))
	require.NoError(t, r.err, r.stderr)
	assert.Equal(t, pinnedRestartSum, r.end(t).Checksum)
	assert.Contains(t, r.stdout, "committed after a search pass of 20 steps: lr ")

	var search, main []metrics.WindowRecord
	for _, rec := range r.windows(t) {
		if rec.Pass == 0 {
			search = append(search, rec)
		} else {
			main = append(main, rec)
		}
	}
	commits := metrics.Of[metrics.CommitRecord](r.records(t))
	require.Len(t, commits, 1)
	commit := commits[0]
	assert.Equal(t, 20, commit.Step)
	require.Len(t, search, 2)
	require.Len(t, main, 6)
	lr := float64(commit.Committed["lr"].Value)
	assert.InDelta(t, 0.004*math.Exp(float64(commit.Committed["lr"].Offset)), lr, 1e-12, "the committed max_lr is the schedule's peak times exp(u)")
	assert.Greater(t, spreadOf(search[0].Values["lr"]), 0.0, "the search pass spreads the ranks")
	for _, rec := range main {
		assert.Zero(t, spreadOf(rec.Values["lr"]), "main window %d: every rank at the committed rate", rec.Window)
		assert.Zero(t, spreadOf(rec.Values["dropout"]), "main window %d: and no dropout spread", rec.Window)
	}
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5}, windowIndices(main))

	files := checkpointFiles(t, r)
	require.Equal(t, []string{"ckpt-000000000000.hdet", "ckpt-000000000010.hdet", "ckpt-000000000020.hdet",
		"ckpt-main-000000000000.hdet", "ckpt-main-000000000010.hdet", "ckpt-main-000000000020.hdet",
		"ckpt-main-000000000030.hdet", "ckpt-main-000000000040.hdet", "ckpt-main-000000000050.hdet",
		"ckpt-main-000000000060.hdet"}, files)
	for _, from := range []string{"ckpt-000000000010.hdet", "ckpt-main-000000000030.hdet"} {
		assert.Equal(t, pinnedRestartSum, resumeFromFile(t, r, files, from), "resumed from %s", from)
		recs := r.records(t)
		assert.Len(t, metrics.Of[metrics.WindowRecord](recs), 8, "resumed from %s: every window once", from)
		assert.Len(t, metrics.Of[metrics.CommitRecord](recs), 1, "resumed from %s: one commit", from)
	}
}

// With no spread and no controller, a restart run's main pass is plain
// training from the same step-0 state: bit-identical to the run that does
// not restart.
func TestRestartWithoutSearchIsPlain(t *testing.T) {
	const explorers = `
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    config: {schedule: {kind: onecycle, max_lr: 0.004}, spread: {alpha: 0}, auto: {enabled: false, commit: %s, until: 0.3}}
`
	restart := runHDET(t, 4, pinnedCfg("gradients", strings.Replace(explorers, "%s", "restart", 1)))
	require.NoError(t, restart.err, restart.stderr)
	plain := runHDET(t, 4, pinnedCfg("gradients", strings.Replace(explorers, "%s", "continue", 1)))
	require.NoError(t, plain.err, plain.stderr)
	assert.Len(t, metrics.Of[metrics.CommitRecord](restart.records(t)), 1, "the restart run committed")
	assert.Empty(t, metrics.Of[metrics.CommitRecord](plain.records(t)))
	assert.Equal(t, plain.end(t).Checksum, restart.end(t).Checksum)
	assert.Equal(t, "537863013bb51584", plain.end(t).Checksum, "pinned")
}

// checkpointFiles lists a run's checkpoints in the order Latest reads
// them: the search pass's, then the main pass's.
func checkpointFiles(t *testing.T, r hdetRun) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(r.dir, "checkpoints", "ckpt-*.hdet"))
	require.NoError(t, err)
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	slices.SortFunc(names, func(a, b string) int {
		ma, mb := strings.HasPrefix(a, "ckpt-main-"), strings.HasPrefix(b, "ckpt-main-")
		if ma != mb {
			if ma {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	return names
}

// resumeFromFile deletes the checkpoints after from (files in order) and
// resumes the run from it, returning the final checksum.
func resumeFromFile(t *testing.T, r hdetRun, files []string, from string) string {
	t.Helper()
	at := slices.Index(files, from)
	require.GreaterOrEqual(t, at, 0, from)
	for _, f := range files[at+1:] {
		_ = os.Remove(filepath.Join(r.dir, "checkpoints", f))
	}
	hdet, plugins := hdetBinaries(t)
	out, err := mpirunCmd(t.Context(), t, 4, hdet, "run", filepath.Join(filepath.Dir(r.dir), "config.in.yaml"),
		"--run-dir", r.dir, "--plugin-dir", plugins, "--set", "workload.data="+mnistDir(t)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), `"message":"resuming from checkpoint"`)
	return hdetRun{dir: r.dir}.end(t).Checksum
}

func windowIndices(recs []metrics.WindowRecord) []int {
	var out []int
	for _, rec := range recs {
		out = append(out, rec.Window)
	}
	return out
}

// spreadOf is the largest difference between two ranks' values.
func spreadOf(v []metrics.Float) float64 {
	if len(v) == 0 {
		return 0
	}
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return float64(hi - lo)
}

// rollbackRestart diverges in its main pass (SGD at a max_lr of 5): two
// rollbacks there halve its learning rates twice.
const rollbackRestart = `
workload: {hidden: [32], batch_size: 32, optimizer: sgd, momentum: 0.9}
train: {steps: 60, window: 10, seed: 11, sync: local, eval_every: 2}
run: {progress: none, checkpoint_every: 1, keep: 100}
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    config: {schedule: {kind: onecycle, max_lr: 5}, spread: {alpha: 0.5}, auto: {until: 0.3}}
`

// A resume keeps the rollbacks' halving (the checkpoint carries their
// count): resumed after them, the run ends bit for bit where the run left
// alone did, instead of training on at the unhalved rate. The closing line
// gives the rate the main pass trained at, halving included.
func TestResumeKeepsRollbackHalving(t *testing.T) {
	r := runHDET(t, 4, rollbackRestart)
	require.NoError(t, r.err, r.stderr)
	want := r.end(t).Checksum
	var rollbacks int
	for _, rec := range metrics.Of[metrics.WindowRecord](r.records(t)) {
		for _, e := range rec.Events {
			if e.Kind == metrics.EventRollback && rec.Pass == 1 {
				rollbacks++
			}
		}
	}
	require.Equal(t, 2, rollbacks, "the config's main pass rolls back twice")
	commit := metrics.Of[metrics.CommitRecord](r.records(t))
	require.Len(t, commit, 1)
	lr := float64(commit[0].Committed["lr"].Value) / 4 // the two main-pass halvings
	assert.Contains(t, r.stdout, fmt.Sprintf("committed after a search pass of 20 steps: lr %.3g ", lr))
	files := checkpointFiles(t, r)
	assert.Equal(t, want, resumeFromFile(t, r, files, "ckpt-main-000000000040.hdet"), "resumed after the rollbacks")
}
