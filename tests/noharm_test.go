package tests

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// One search window of two ranks compares one pair of values and leaves
// nothing to measure the noise between replicas by, so the no-harm rule
// (docs/design.md §1.2) commits the script's own max_lr, wherever the
// search pointed, and the closing line says why.
func TestNoHarmKeepsTheConfigsValueWithoutEvidence(t *testing.T) {
	r := runHDET(t, 2, pinnedCfg("local", `
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    config: {schedule: {kind: onecycle, max_lr: 0.004}, spread: {alpha: 0.5}, auto: {until: 0.2}}
`))
	require.NoError(t, r.err, r.stderr)
	assert.Contains(t, r.stdout, "committed after a search pass of 20 steps: lr 0.004 (x1 the schedule's) "+
		"(kept: 2 readings in 1 search windows are too few to measure the probe loss's noise between replicas)")
	commits := metrics.Of[metrics.CommitRecord](r.records(t))
	require.Len(t, commits, 1)
	assert.Zero(t, commits[0].Committed["lr"].Offset)
	assert.InDelta(t, 0.004, float64(commits[0].Committed["lr"].Value), 1e-15)
	var moved bool
	for _, w := range r.windows(t) {
		if w.Pass == 0 && w.Offset["lr"] != 0 {
			moved = true
		}
	}
	assert.True(t, moved, "the search itself moved the offset")
}

// shownNote is the closing line's evidence for a committed move (docs/design.md
// §1.2) as a regular expression, signal "probe", "training" or an alternation.
func shownNote(signal string) string {
	return `\(shown: the (` + signal + `) loss scored the move t [0-9.]+ over \d+ windows, [0-9.]+ needed\)`
}
