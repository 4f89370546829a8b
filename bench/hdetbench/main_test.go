package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hdet-dev/hdet/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMedianAndQuantileSkipNonFinite(t *testing.T) {
	assert.Equal(t, 2.0, median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
	assert.Equal(t, 2.0, median([]float64{math.NaN(), 2, math.Inf(1)}))
	assert.True(t, math.IsNaN(median([]float64{math.NaN()})))
	assert.InDelta(t, 9.1, quantile([]float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.91), 1e-12)
	assert.Equal(t, 5.0, quantile([]float64{5}, 0.9))
}

func TestLogSpaceSpansTheRangeRounded(t *testing.T) {
	got := logSpace(3e-5, 3e-2, 7)
	assert.Equal(t, []float64{3e-5, 9.5e-5, 0.0003, 0.00095, 0.003, 0.0095, 0.03}, got)
	assert.Len(t, logSpace(3e-5, 3e-2, 10), 10)
}

func TestModelFloatsIsTheMLPsParameterCount(t *testing.T) {
	assert.Equal(t, 269322, modelFloats)
}

func TestParseAllreduceIgnoresNoise(t *testing.T) {
	out := "[vm:123] some mpirun warning\n269322 0.00106\n807966 5.3e-03\nnot a number\n"
	got, err := parseAllreduce(out)
	require.NoError(t, err)
	assert.Equal(t, map[int]float64{269322: 0.00106, 807966: 0.0053}, got)
	_, err = parseAllreduce("nothing here\n")
	assert.Error(t, err)
}

func TestAllreduceVerdict(t *testing.T) {
	assert.Contains(t, allreduceVerdict([]float64{0.99, 1.015}), "Target met")
	assert.Contains(t, allreduceVerdict([]float64{0.99, 1.05}), "Target NOT met")
	assert.Contains(t, allreduceVerdict([]float64{0.5, 1.01}), "not confirmed")
}

func TestTicks125LabelsOneTwoFive(t *testing.T) {
	var labels []string
	for _, tk := range (ticks125{}).Ticks(0.08, 1.5) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	assert.Equal(t, []string{"0.1", "0.2", "0.5", "1"}, labels)
}

func TestParseControllerBench(t *testing.T) {
	out := `goos: linux
BenchmarkControllerWindow/N=64-2         	     100	     97012 ns/op	    115000 cpu-ns/op
BenchmarkControllerWindow/N=16384-2      	     100	   1749000 ns/op	   2602000 cpu-ns/op
PASS`
	rows, err := parseControllerBench(out)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	assert.Equal(t, controllerRow{N: 64, NsPerOp: 97012, CPUNsPerOp: 115000}, rows[0])
	assert.Equal(t, 16384, rows[1].N)
	_, err = parseControllerBench("PASS\n")
	assert.Error(t, err)
}

func TestDiverged(t *testing.T) {
	assert.False(t, result{TestLoss: 0.1}.diverged())
	assert.True(t, result{TestLoss: math.NaN()}.diverged())
	assert.True(t, result{TestLoss: 2.31}.diverged(), "no better than chance")
	assert.True(t, result{TestLoss: 0.1, NonFinite: true}.diverged())
	assert.Equal(t, 40.0, result{WallSeconds: 10}.rankSeconds(4))
}

// writeRun writes a metrics.jsonl like hdet run's.
func writeRun(t *testing.T, dir string, recs ...metrics.Record) {
	t.Helper()
	w, err := metrics.OpenWriter(filepath.Join(dir, "metrics.jsonl"))
	require.NoError(t, err)
	for _, r := range recs {
		require.NoError(t, w.Write(r))
	}
	require.NoError(t, w.Close())
}

func TestReadResult(t *testing.T) {
	dir := t.TempDir()
	nan := metrics.Float(math.NaN())
	writeRun(t, dir,
		metrics.Record{Type: metrics.TypeStart, Ranks: 2, TotalSteps: 20, WindowSteps: 10},
		metrics.Record{Type: metrics.TypeWindow, Window: 0, Step: 10, Losses: []metrics.Float{1, 2}, Healthy: []bool{true, true},
			Base: map[string]metrics.Float{"lr": 0.01}, PlanSeconds: 0.002, ConvergeSeconds: 0.01},
		metrics.Record{Type: metrics.TypeWindow, Window: 1, Step: 20, Losses: []metrics.Float{1, nan}, Healthy: []bool{true, false},
			Base: map[string]metrics.Float{"lr": 0.005}, PlanSeconds: 0.004, ConvergeSeconds: 0.02},
		metrics.Record{Type: metrics.TypeEnd, Step: 20, Eval: &metrics.Eval{Loss: 0.5, Accuracy: 0.9}, WallSeconds: 3},
	)
	r, err := readResult(dir)
	require.NoError(t, err)
	assert.Equal(t, 0.5, r.TestLoss)
	assert.Equal(t, 0.9, r.Accuracy)
	assert.Equal(t, 3.0, r.WallSeconds)
	assert.Equal(t, 20, r.Steps)
	assert.Equal(t, 1, r.Unhealthy)
	assert.True(t, r.NonFinite)
	assert.True(t, r.diverged())
	assert.Equal(t, []float64{0.002, 0.004}, r.PlanSeconds)
	assert.Equal(t, 0.005, r.FinalBase)

	unfinished := t.TempDir()
	writeRun(t, unfinished, metrics.Record{Type: metrics.TypeStart, Ranks: 2, TotalSteps: 20, WindowSteps: 10})
	_, err = readResult(unfinished)
	assert.ErrorContains(t, err, "no end record")
}

func TestTableRendering(t *testing.T) {
	tb := &table{Title: "Study X", Header: []string{"run", "loss"}, Commands: []string{"mpirun -np 4 a|b"}}
	tb.add("sweep", "0.1234")
	tb.add("a|b", "1")
	tb.note("%s: fine", verdict(true))
	var txt, md bytes.Buffer
	tb.text(&txt)
	assert.Contains(t, txt.String(), "sweep  0.1234")
	assert.Contains(t, txt.String(), "  Target met: fine")
	tb.markdown(&md)
	s := md.String()
	assert.Contains(t, s, "## Study X\n\n| run | loss |\n|---|---:|\n| sweep | 0.1234 |\n| a\\|b | 1 |\n")
	assert.Contains(t, s, "- Target met: fine\n")
	assert.Contains(t, s, "```sh\nmpirun -np 4 a|b\n```")
}

func TestPlotSweepWritesAPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sweep.png")
	sweep := series{Label: "sweep", LR: []float64{1e-4, 1e-3, 1e-2}, Loss: []float64{0.3, 0.1, math.NaN()}}
	hd := series{Label: "HDET", LR: []float64{1e-3}, Loss: []float64{0.11}}
	require.NoError(t, plotSweep(path, sweep, hd))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(data, []byte("\x89PNG")), "a PNG file")

	err = plotSweep(path, series{LR: []float64{1e-3}, Loss: []float64{math.NaN()}})
	assert.ErrorContains(t, err, "no finite point")
}

func TestRunRejectsBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	err := run([]string{"-studies", "7"}, &out, &errb)
	assert.ErrorContains(t, err, "-studies")
	err = run([]string{"-np", "0"}, &out, &errb)
	assert.ErrorContains(t, err, "-np")
}

func TestWriteDocOrdersStudiesAndLinksThePlot(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "docs", "benchmarks.md")
	tables := map[int]*table{
		3: {Title: "Study 3: overhead", Header: []string{"run"}},
		1: {Title: "Study 1: sweep", Header: []string{"run"}},
	}
	h := docHeader{Quick: true, Settings: defaults(true), Machine: machine{CPUs: 2, Model: "CPU"},
		Plot: true, PlotPath: filepath.Join(dir, "docs", "sweep.png"), OutPath: out, Args: []string{"-quick"}}
	require.NoError(t, writeDoc(out, h, tables))
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	s := string(data)
	assert.Less(t, strings.Index(s, "## Study 1"), strings.Index(s, "## Study 3"))
	assert.Contains(t, s, "](sweep.png)")
	assert.Contains(t, s, "make bench-quick")
	assert.Contains(t, s, "go run ./bench/hdetbench -quick")
}
