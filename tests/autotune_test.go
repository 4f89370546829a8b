package tests

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// A run started with max_lr 10x below what the workload wants (about 3e-3
// for this MLP with AdamW) ends with a higher effective max_lr: the schedule's
// peak times exp(u), u being the lr offset the search pass learned and
// committed (default config: probe signal, which the built-in workload
// answers, so the search windows after warm-up carry every rank's probe; the
// main pass trains at the committed value). Windows of 20: the search pass
// is the whole windows in the run's first quarter, 5 of them (windows of
// 50 would leave it 2, one update).
func TestAutoPhaseRaisesAMaxLRStartedTenTimesTooLow(t *testing.T) {
	const startLR = 3e-4
	conf := `
workload: {hidden: [64], batch_size: 32, optimizer: adamw}
train: {steps: 400, window: 20, seed: 3, sync: gradients}
run: {progress: none, checkpoint_every: 0}
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    config:
      schedule: {kind: onecycle, max_lr: 0.0003}
`
	r := runHDET(t, 4, conf)
	require.NoError(t, r.err, r.stderr)
	probed := 0
	recs := r.records(t)
	commits := metrics.Of[metrics.CommitRecord](recs)
	for _, rec := range metrics.Of[metrics.WindowRecord](recs) {
		if len(rec.Probe) == 4 {
			probed++
			for _, p := range rec.Probe {
				require.False(t, math.IsNaN(float64(p)), "window %d: a probe loss is NaN", rec.Window)
			}
		}
	}
	require.Positive(t, probed, "the controller got probe losses from the workload")
	require.Len(t, commits, 1, "the default (auto.commit restart) writes a commit record")
	commit := commits[0]
	final := float64(commit.Committed["lr"].Value)
	t.Logf("effective max_lr %.3g -> %.3g committed after %d steps", startLR, final, commit.Step)
	require.InDelta(t, startLR*math.Exp(float64(commit.Committed["lr"].Offset)), final, 1e-12, "the committed max_lr is the start times exp(u)")
	require.Greater(t, final, 1.5*startLR, "the controller moved the learning rate up from 10x too low")
	assert.Regexp(t, `committed after a search pass of \d+ steps: lr [0-9.e-]+ \(x[0-9.]+ the schedule's\) `+shownNote("probe"),
		r.stdout, "the closing line carries the move's evidence")
}
