package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hdet-dev/hdet/internal/metrics"
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

func TestSummarizeController(t *testing.T) {
	got := summarizeController([]controllerRow{
		{N: 64, NsPerOp: 50, CPUNsPerOp: 60}, {N: 16384, NsPerOp: 900, CPUNsPerOp: 1500},
		{N: 64, NsPerOp: 40, CPUNsPerOp: 45}, {N: 16384, NsPerOp: 1100, CPUNsPerOp: 1700},
		{N: 64, NsPerOp: 70, CPUNsPerOp: 80}, {N: 16384, NsPerOp: 950, CPUNsPerOp: math.NaN()},
	})
	assert.Equal(t, []controllerSummary{
		{N: 64, Median: 50, Min: 40, Max: 70, CPU: 60},
		{N: 16384, Median: 950, Min: 900, Max: 1100, CPU: 1600},
	}, got)
}

func TestDiverged(t *testing.T) {
	assert.False(t, result{TestLoss: 0.1}.diverged())
	assert.True(t, result{TestLoss: math.NaN()}.diverged())
	assert.True(t, result{TestLoss: 2.31}.diverged(), "no better than chance")
	assert.True(t, result{TestLoss: 0.1, Stopped: true}.diverged())
	assert.False(t, result{TestLoss: 0.1, Unhealthy: 3}.diverged(), "ranks left out of some windows: the safety net, not the outcome")
	assert.Equal(t, 40.0, result{TrainSeconds: 10}.rankSeconds(4))
	assert.Equal(t, 48.0, result{ProcessSeconds: 12}.processRankSeconds(4))
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
	require.NoError(t, plotSweep(path, "title", sweep, hd))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(data, []byte("\x89PNG")), "a PNG file")

	err = plotSweep(path, "title", series{LR: []float64{1e-3}, Loss: []float64{math.NaN()}})
	assert.ErrorContains(t, err, "no finite point")
}

func TestRunRejectsBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	err := run([]string{"-studies", "6"}, &out, &errb)
	assert.ErrorContains(t, err, "-studies")
	err = run([]string{"-np", "0"}, &out, &errb)
	assert.ErrorContains(t, err, "-np")
	for _, bad := range []string{"1,x", "1,1", "-2"} {
		assert.ErrorContains(t, run([]string{"-seeds", bad}, &out, &errb), "-seeds")
	}
	assert.ErrorContains(t, run([]string{"-heldout", "3,4"}, &out, &errb), "-heldout", "a sweep seed cannot be held out")
	assert.ErrorContains(t, run([]string{"-setups", "gpt2"}, &out, &errb), "-setups")
	assert.ErrorContains(t, run([]string{"-setups", "gpt,sgd"}, &out, &errb), "their own doc blocks")
	assert.ErrorContains(t, run([]string{"-setups", "sgd,sgd"}, &out, &errb), "-setups")
	o, err := parseFlags([]string{"-seeds", "2, 3", "-heldout", "7,9", "-setups", "sgd,convnet", "-quick"}, &errb)
	require.NoError(t, err)
	assert.Equal(t, []int{2, 3}, o.p.Seeds)
	assert.Equal(t, []int{7, 9}, o.p.HeldOut)
	assert.Equal(t, []string{"sgd", "convnet"}, o.p.Setups)
	o, err = parseFlags(nil, &errb)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2, 3}, o.p.Seeds)
	assert.Equal(t, []int{4, 5, 6, 7, 8}, o.p.HeldOut)
	assert.Equal(t, 12, o.p.SweepN)
	assert.Equal(t, []int{10, 50, 100}, o.p.Windows)
	b := &bench{p: o.p, rn: &runner{np: 4}}
	var names []string
	for _, s := range b.newSetups(nil) {
		names = append(names, s.Name)
	}
	assert.Equal(t, setupNames[:3], names, "the GPT's setups only when named")
	assert.Len(t, b.newSetups([]string{"convnet"}), 1)
}

func TestWriteDocOrdersStudiesAndLinksThePlot(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "docs", "benchmarks.md")
	tables := map[int]*table{
		3: {Title: "Study 3: overhead", Header: []string{"run"}},
		1: {Title: "Study 1: sweep", Header: []string{"run"}},
	}
	h := docHeader{Quick: true, Settings: defaults(true), Machine: machine{CPUs: 2, Model: "CPU"},
		Plots: []string{filepath.Join(dir, "docs", "sweep-adamw.png")}, OutPath: out, Args: []string{"-quick"}}
	require.NoError(t, writeDoc(out, h, tables))
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	s := string(data)
	assert.Less(t, strings.Index(s, "## Study 1"), strings.Index(s, "## Study 3"))
	assert.Contains(t, s, "](sweep-adamw.png)")
	assert.Contains(t, s, "make bench-quick")
	assert.Contains(t, s, "go run ./bench/hdetbench -quick")
}

func TestWriteDocKeepsHandWrittenSectionsAndOtherStudies(t *testing.T) {
	out := filepath.Join(t.TempDir(), "benchmarks.md")
	h := docHeader{Settings: defaults(false), OutPath: out}
	require.NoError(t, writeDoc(out, h, map[int]*table{
		1: {Title: "Study 1: old", Header: []string{"run"}},
		3: {Title: "Study 3: old", Header: []string{"run"}},
	}))
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	hand := "\n## Trainer speed (by hand)\n\n12 ms/step.\n"
	edited := strings.Replace(string(data), "# hdet benchmarks\n", "# hdet benchmarks\n\nA hand-written preface.\n", 1) + hand
	require.NoError(t, os.WriteFile(out, []byte(edited), 0o644))

	require.NoError(t, writeDoc(out, h, map[int]*table{
		1: {Title: "Study 1: new", Header: []string{"run"}},
		2: {Title: "Study 2: new", Header: []string{"run"}},
	}))
	data, err = os.ReadFile(out)
	require.NoError(t, err)
	s := string(data)
	assert.Contains(t, s, "A hand-written preface.")
	assert.Contains(t, s, hand, "a hand-written section after the blocks stays")
	assert.NotContains(t, s, "Study 1: old")
	assert.Contains(t, s, "Study 3: old", "a study not run this time keeps its block")
	assert.Less(t, strings.Index(s, "Study 1: new"), strings.Index(s, "Study 2: new"))
	assert.Less(t, strings.Index(s, "Study 2: new"), strings.Index(s, "Study 3: old"), "a new block goes after its predecessor")
	assert.Equal(t, 1, strings.Count(s, "hdetbench:begin study1"))

	broken := strings.Replace(s, fmt.Sprintf(endMark, "study1"), "", 1)
	require.NoError(t, os.WriteFile(out, []byte(broken), 0o644))
	assert.ErrorContains(t, writeDoc(out, h, map[int]*table{1: {Title: "x", Header: []string{"run"}}}), "unpaired")
	data, err = os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, broken, string(data), "nothing written on a broken doc")
}

func TestGridLRIsThreePerDecadeAndClosedUnderTenX(t *testing.T) {
	assert.Equal(t, []float64{0.001, 0.0022, 0.0046, 0.01}, []float64{gridLR(-9), gridLR(-8), gridLR(-7), gridLR(-6)})
	for k := -15; k < 3; k++ {
		assert.InDelta(t, 10*gridLR(k), gridLR(k+3), 1e-12*gridLR(k+3), "k=%d", k)
	}
}

func TestConfigSummaryQuotesTrainAndExplorers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("workload: {kind: mnist}\ntrain: {window: 50}\nexplorers:\n  - name: lr\n    config: {auto: {form: paper}}\n"), 0o644))
	s := configSummary(path)
	assert.Contains(t, s, `"window":50`)
	assert.Contains(t, s, `"auto":{"form":"paper"}`)
	assert.NotContains(t, s, "mnist")
	assert.Contains(t, configSummary(filepath.Join(t.TempDir(), "missing.yaml")), "no such file")
}

// A rebuilt plugin changes the HDET runs' key; the same files keep it.
func TestProgramFingerprintSeesThePlugins(t *testing.T) {
	dir := t.TempDir()
	hdet := filepath.Join(dir, "hdet")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "plugins"), 0o755))
	require.NoError(t, os.WriteFile(hdet, []byte("hdet"), 0o755))
	plugin := filepath.Join(dir, "plugins", "hdet-explorer-lr")
	require.NoError(t, os.WriteFile(plugin, []byte("v1"), 0o755))
	a, err := programFingerprint(hdet)
	require.NoError(t, err)
	b, err := programFingerprint(hdet)
	require.NoError(t, err)
	assert.Equal(t, a, b)
	require.NoError(t, os.WriteFile(plugin, []byte("v2"), 0o755))
	c, err := programFingerprint(hdet)
	require.NoError(t, err)
	assert.NotEqual(t, a, c)
	_, err = programFingerprint(filepath.Join(dir, "missing", "hdet"))
	assert.Error(t, err)
}

func TestParseInProcessReadsTheCLoopLines(t *testing.T) {
	out := "1024 5e-05\ncloop 1024 4.9e-05 0.98 1.01 1.05\ncloop bad 1 2 3 4\n269322 0.0008\ncloop 269322 8e-4 0.9 1 x\n"
	assert.Equal(t, map[int][3]float64{1024: {0.98, 1.01, 1.05}}, parseInProcess(out))
	got, err := parseAllreduce(out)
	require.NoError(t, err)
	assert.Equal(t, map[int]float64{1024: 5e-05, 269322: 0.0008}, got, "the cloop lines are not per-call times")
}
