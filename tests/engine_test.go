package tests

import (
	"bufio"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// small is a short MNIST run: 4 ranks, 8 windows of 10 steps.
const small = `
workload: {hidden: [64], batch_size: 32}
train: {steps: 80, window: 10, seed: 7, sync: %s}
run: {progress: none, checkpoint_every: 0}
`

const lrDropout = `
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    config:
      schedule: {kind: onecycle, max_lr: 0.004}
      spread: {alpha: 0.5, narrow_from: 1}
      auto: {start: 40, commit: continue} # one pass: the tests count windows
  - name: dropout
    plugin: hdet-explorer-dropout
    config: {schedule: 0.1, spread: {alpha: 0.05}, auto: {commit: continue}}
`

func cfg(sync, explorers string) string { return strings.Replace(small, "%s", sync, 1) + explorers }

// Alpha 0 (every rank the base) must be plain synchronous data parallel:
// the same parameters as a run with no explorers at all.
func TestAlphaZeroIsPlainDataParallel(t *testing.T) {
	constant := `
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    config: {schedule: 0.001, spread: {alpha: 0}, auto: {enabled: false}}
  - name: dropout
    plugin: hdet-explorer-dropout
    config: {schedule: 0.1, spread: {alpha: 0}, auto: {enabled: false}}
`
	hdet := runHDET(t, 4, cfg("gradients", constant))
	require.NoError(t, hdet.err, hdet.stderr)
	plain := runHDET(t, 4, strings.Replace(cfg("gradients", ""), "batch_size: 32}", "batch_size: 32, lr: 0.001, dropout: 0.1}", 1))
	require.NoError(t, plain.err, plain.stderr)
	assert.Equal(t, plain.end(t).Checksum, hdet.end(t).Checksum)
	assert.NotEmpty(t, plain.end(t).Checksum)
}

type converged struct {
	Rank     int                `json:"rank"`
	Window   int                `json:"window"`
	Checksum string             `json:"checksum"`
	Before   string             `json:"replica_checksum"` // replica groups: before the converge
	Values   map[string]float64 `json:"values_last"`
	Message  string             `json:"message"`
}

// With alpha > 0 the ranks train with different values inside a window and
// hold identical parameters right after every converge.
func TestSpreadDivergesThenConverges(t *testing.T) {
	for _, sync := range []string{"local", "gradients"} {
		t.Run(sync, func(t *testing.T) {
			r := runHDET(t, 4, cfg(sync, lrDropout), "--log-all-ranks", "--debug")
			require.NoError(t, r.err, r.stderr)
			byWindow := map[int][]converged{}
			sc := bufio.NewScanner(strings.NewReader(r.stderr))
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				var c converged
				if json.Unmarshal(sc.Bytes(), &c) == nil && c.Message == "converged" {
					byWindow[c.Window] = append(byWindow[c.Window], c)
				}
			}
			require.Len(t, byWindow, 8)
			for w, cs := range byWindow {
				require.Len(t, cs, 4, "window %d", w)
				lrs := map[float64]bool{}
				for _, c := range cs {
					assert.Equal(t, cs[0].Checksum, c.Checksum, "window %d: rank %d differs after converge", w, c.Rank)
					lrs[c.Values["lr"]] = true
				}
				assert.Len(t, lrs, 4, "window %d: four ranks, four learning rates", w)
			}
			// The values each rank used are those metrics.jsonl records.
			for _, rec := range metrics.Of[metrics.WindowRecord](r.records(t)) {
				for _, c := range byWindow[rec.Window] {
					assert.Equal(t, float64(rec.Values["lr"][c.Rank]), c.Values["lr"])
				}
			}
		})
	}
}

// A rank whose loss turns NaN is left out of the average; the run finishes
// with finite parameters and records the event.
func TestNaNRankIsExcluded(t *testing.T) {
	r := runHDET(t, 4, cfg("local", lrDropout)+"\n", hitBy("nan", "2@3"))
	require.NoError(t, r.err, r.stderr)
	unhealthy := 0
	for _, rec := range metrics.Of[metrics.WindowRecord](r.records(t)) {
		assert.Equal(t, rec.Window < 3, rec.Healthy[2], "window %d", rec.Window)
		for _, e := range rec.Events {
			if e.Kind == metrics.EventUnhealthy {
				require.NotNil(t, e.Rank)
				assert.Equal(t, 2, *e.Rank)
				unhealthy++
			}
		}
	}
	assert.Equal(t, 5, unhealthy, "windows 3..7")
	end := r.end(t)
	assert.False(t, math.IsNaN(float64(end.Eval.Loss)), "final parameters are finite")
	assert.Greater(t, float64(end.Eval.Accuracy), 0.5)
	assert.Contains(t, r.stderr, "left out of the average")
}

// Training works: the loss falls, and the same config, seed and N give
// bit-identical parameters.
func TestLossFallsAndRunsAreDeterministic(t *testing.T) {
	a := runHDET(t, 4, cfg("local", lrDropout))
	require.NoError(t, a.err, a.stderr)
	b := runHDET(t, 4, cfg("local", lrDropout))
	require.NoError(t, b.err, b.stderr)
	assert.Equal(t, a.end(t).Checksum, b.end(t).Checksum)

	var first, last float64
	for _, rec := range a.windows(t) {
		m := 0.0
		for _, l := range rec.Losses {
			m += float64(l) / float64(len(rec.Losses))
		}
		if rec.Window == 0 {
			first = m
		}
		last = m
	}
	assert.Less(t, last, first*0.6, "mean window loss falls from %g", first)
	assert.Greater(t, float64(a.end(t).Eval.Accuracy), 0.8)
}
