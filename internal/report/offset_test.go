package report

import (
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// writeOffsetRun writes a one-pass run with a learned offset: lr (log scale) whose offset climbs
// to ln 3 over 12 windows, dropout (linear) whose offset ends at -0.05, and,
// with config, the config.yaml hdet run writes (OneCycle max_lr 0.001, a
// constant dropout of 0.1).
func writeOffsetRun(t *testing.T, dir string, config bool) {
	t.Helper()
	w, err := metrics.OpenWriter(filepath.Join(dir, MetricsFile))
	require.NoError(t, err)
	params := []metrics.Param{
		{Name: "lr", Scale: "log", Spread: "multiplicative", Alpha: 0.5, Lower: 1e-8, Upper: 10},
		{Name: "dropout", Scale: "linear", Spread: "additive", Alpha: 0.05, Lower: 0, Upper: 0.9},
	}
	const windows, T = 12, 50
	require.NoError(t, w.Write(metrics.StartRecord{Time: 1.7e9, Ranks: 4, TotalSteps: windows * T,
		WindowSteps: T, SyncMode: "gradients", Hyperparameters: params}))
	for k := range windows {
		f := float64(k+1) / windows
		u := metrics.Float(math.Log(3) * f)
		sched := 0.001 * math.Sin(math.Pi*float64(k+1)/(windows+1))
		rec := metrics.WindowRecord{Time: 1.7e9 + float64(k), Window: k, Step: (k + 1) * T,
			Losses: []metrics.Float{1, 0.9, 0.8, 0.85}, Healthy: []bool{true, true, true, true},
			Base:     map[string]metrics.Float{"lr": metrics.Float(sched * math.Exp(float64(u))), "dropout": metrics.Float(0.1 - 0.05*f)},
			Offset:   map[string]metrics.Float{"lr": u, "dropout": metrics.Float(-0.05 * f)},
			Estimate: map[string]metrics.Float{"lr": 0.2, "dropout": -0.01},
			Probe:    []metrics.Float{0.5, 0.45, 0.4, 0.42},
		}
		require.NoError(t, w.Write(rec))
	}
	require.NoError(t, w.Write(metrics.EndRecord{Time: 1.7e9 + 20, Step: windows * T,
		Eval: &metrics.Eval{Loss: 0.07, Accuracy: 0.98}, WallSeconds: 20}))
	require.NoError(t, w.Close())
	if config {
		cfg := "explorers:\n  - name: lr\n    plugin: hdet-explorer-lr\n    config:\n      schedule: {kind: onecycle, max_lr: 0.001, pct_start: 0.25}\n" +
			"  - name: dropout\n    plugin: hdet-explorer-dropout\n    config:\n      schedule: 0.1\n" // a lone value, as examples/mnist.yaml writes it
		require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigFile), []byte(cfg), 0o644))
	}
}

func TestReportShowsOffsetsAndEffectiveMaxLR(t *testing.T) {
	run := t.TempDir()
	writeOffsetRun(t, run, true)
	r, err := Load(run)
	require.NoError(t, err)
	s := Summarize(r)
	require.Len(t, s.Offsets, 2)
	lr, dropout := s.Offsets[0], s.Offsets[1]
	assert.Equal(t, "lr", lr.Name)
	assert.InDelta(t, math.Log(3), lr.Final, 1e-6)
	assert.InDelta(t, math.Log(3)/12, lr.Min, 1e-6)
	assert.Equal(t, "max_lr", lr.PeakField)
	assert.InDelta(t, 0.003, lr.Effective, 1e-9, "max_lr 0.001 x exp(ln 3)")
	assert.Equal(t, "value", dropout.PeakField)
	assert.InDelta(t, 0.05, dropout.Effective, 1e-9, "0.1 + (-0.05)")

	out := t.TempDir()
	index, err := Write(run, out, Options{})
	require.NoError(t, err)
	for _, name := range []string{"offset-lr", "effective-lr", "offset-dropout", "effective-dropout"} {
		checkPNG(t, filepath.Join(out, name+".png"))
		checkSVG(t, filepath.Join(out, name+".svg"))
	}
	md, err := os.ReadFile(filepath.Join(out, SummaryFile))
	require.NoError(t, err)
	assert.Contains(t, string(md), "lr: effective max_lr 0.003 = schedule max_lr 0.001 × exp(u), offset u = 1.1")
	assert.Contains(t, string(md), "dropout: effective value 0.05 = schedule value 0.1 + u, offset u = -0.05")
	assert.Contains(t, string(md), "| lr | log | 1.099 | 0.09155 | 1.099 | 0.001 (max_lr) | 0.003 |")
	html, err := os.ReadFile(index)
	require.NoError(t, err)
	assert.Contains(t, string(html), `"effective-lr.png"`)
	assert.Contains(t, string(html), "effective max_lr 0.003")
}

func TestReportOffsetWithoutConfigAndRunsWithoutOffsets(t *testing.T) {
	run := t.TempDir()
	writeOffsetRun(t, run, false)
	out := t.TempDir()
	_, err := Write(run, out, Options{})
	require.NoError(t, err)
	checkPNG(t, filepath.Join(out, "offset-lr.png"))
	_, err = os.Stat(filepath.Join(out, "effective-lr.png"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "no peak known, no effective plot")
	md, err := os.ReadFile(filepath.Join(out, SummaryFile))
	require.NoError(t, err)
	assert.Contains(t, string(md), "lr: offset u = 1.1 (the base is the schedule × exp(u); the schedule's peak is not in config.yaml)")

	old := t.TempDir()
	writeRun(t, old, defaultFixture())
	out = t.TempDir()
	_, err = Write(old, out, Options{})
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(out, "offset-lr.png"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "a run without offsets draws none")
}
