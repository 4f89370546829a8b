package tests

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// A run started with max_lr 10x below what the workload wants (about 3e-3
// for this MLP with AdamW) ends with a higher effective max_lr: the schedule's
// peak times exp(u), u being the lr offset the controller learned (issue 14,
// DESIGN §1 revision 2, default config: probe signal, which the built-in
// workload answers, so the windows after warm-up carry every rank's probe).
func TestAutoPhaseRaisesAMaxLRStartedTenTimesTooLow(t *testing.T) {
	const startLR = 3e-4
	conf := `
workload: {hidden: [64], batch_size: 32, optimizer: adamw}
train: {steps: 400, window: 50, seed: 3, sync: gradients}
run: {progress: none, checkpoint_every: 0}
explorers:
  - name: lr
    plugin: hdet-explorer-lr
    config:
      schedule: {kind: onecycle, max_lr: 0.0003}
`
	r := runHDET(t, 4, conf)
	require.NoError(t, r.err, r.stderr)
	var offsets []float64
	probed := 0
	for _, rec := range r.records(t) {
		if rec.Type != metrics.TypeWindow {
			continue
		}
		if u, ok := rec.Offset["lr"]; ok {
			offsets = append(offsets, float64(u))
		}
		if len(rec.Probe) == 4 {
			probed++
			for _, p := range rec.Probe {
				require.False(t, math.IsNaN(float64(p)), "window %d: a probe loss is NaN", rec.Window)
			}
		}
	}
	require.NotEmpty(t, offsets, "window records carry the lr offset")
	require.Positive(t, probed, "the controller got probe losses from the workload")
	final := startLR * math.Exp(offsets[len(offsets)-1])
	t.Logf("effective max_lr %.3g -> %.3g (offsets %.3f)", startLR, final, offsets)
	require.Greater(t, final, 1.5*startLR, "the controller moved the learning rate up from 10x too low")
}
