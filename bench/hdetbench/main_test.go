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
	assert.InDelta(t, 0.0012+0.25*0.0012, r.Pace, 1e-12, "first quartile of (converge+plan)/10 over the two windows")
	assert.InDelta(t, 4*r.Pace*20, r.calmRankSeconds(4), 1e-12)

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
	o, err := parseFlags([]string{"-seeds", "2, 3", "-quick"}, &errb)
	require.NoError(t, err)
	assert.Equal(t, []int{2, 3}, o.p.Seeds)
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

func TestCacheReusesOnlyAnEqualKey(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("a: 1\n"), 0o644))
	key, err := cacheKey(4, cfg, "canary abc", []string{"run", cfg, "--set", "x=1"})
	require.NoError(t, err)
	assert.Contains(t, key, "np 4\nargs run "+cfg+" --set x=1\n")
	assert.Contains(t, key, "trainer canary abc\n")

	run := filepath.Join(dir, "run")
	require.NoError(t, os.MkdirAll(run, 0o755))
	writeRun(t, run, metrics.Record{Type: metrics.TypeStart, Ranks: 2, TotalSteps: 10, WindowSteps: 10},
		metrics.Record{Type: metrics.TypeWindow, Step: 10, Losses: []metrics.Float{1, 1}, Healthy: []bool{true, true}},
		metrics.Record{Type: metrics.TypeEnd, Step: 10, Checksum: "ff", Eval: &metrics.Eval{Loss: 0.25}, WallSeconds: 2})
	_, ok := reuse(run, key)
	assert.False(t, ok, "no key file yet")
	require.NoError(t, os.WriteFile(filepath.Join(run, keyFile), []byte(key), 0o644))
	r, ok := reuse(run, key)
	require.True(t, ok)
	assert.Equal(t, 0.25, r.TestLoss)
	assert.Equal(t, "ff", r.Checksum)

	require.NoError(t, os.WriteFile(cfg, []byte("a: 2\n"), 0o644))
	changed, err := cacheKey(4, cfg, "canary abc", []string{"run", cfg, "--set", "x=1"})
	require.NoError(t, err)
	_, ok = reuse(run, changed)
	assert.False(t, ok, "a changed config is a different key")
	other, err := cacheKey(4, cfg, "canary abd", []string{"run", cfg, "--set", "x=1"})
	require.NoError(t, err)
	assert.NotEqual(t, changed, other, "a changed canary is a different key")

	diverged := filepath.Join(dir, "diverged")
	require.NoError(t, os.MkdirAll(diverged, 0o755))
	writeRun(t, diverged, metrics.Record{Type: metrics.TypeStart, Time: 100, Ranks: 2, TotalSteps: 20, WindowSteps: 10},
		metrics.Record{Type: metrics.TypeWindow, Time: 104, Step: 10, Losses: []metrics.Float{1e4, 1e4}, Healthy: []bool{true, true}})
	require.NoError(t, saveKey(diverged, key, true))
	r, ok = reuse(diverged, key)
	require.True(t, ok, "a diverged run is a result too")
	assert.True(t, r.diverged())
	assert.True(t, math.IsNaN(r.TestLoss))
	assert.Equal(t, 4.0, r.WallSeconds, "up to its last window")
}

// fakeRuns builds a setupRuns with one seed from test losses and wall times.
func fakeRuns(sweep []float64, plain, hdet []float64, offsets []float64) *setupRuns {
	sr := &setupRuns{s: setups[0]}
	var row []result
	for i, l := range sweep {
		sr.ks = append(sr.ks, -9+i)
		row = append(row, result{Dir: "d", TestLoss: l, WallSeconds: 10, Steps: 100, Pace: 0.05})
	}
	sr.sweep = [][]result{row}
	sr.best = bestPoint(sr.sweep)
	kb := sr.ks[sr.best]
	sr.starts = []int{kb - 3, kb, kb + 3}
	var p, h []result
	for i := range plain {
		p = append(p, result{TestLoss: plain[i], WallSeconds: 10, Steps: 100, Pace: 0.05})
		h = append(h, result{TestLoss: hdet[i], WallSeconds: 12, FinalOffset: offsets[i], Steps: 100, Pace: 0.04})
	}
	sr.plain = [][]result{p}
	sr.hdet = [][][]result{{h}}
	return sr
}

func TestStudy1Stats(t *testing.T) {
	// best point 0.1 at index 3 (lr 0.01); plain 10x below 0.3, 10x above
	// diverged (counts as ln 10).
	sr := fakeRuns([]float64{0.3, 0.2, 0.15, 0.1, 0.12, 0.2, math.NaN()},
		[]float64{0.3, 0.1, math.NaN()}, []float64{0.15, 0.102, 0.11}, []float64{math.Log(4), 0, -math.Log(2)})
	require.Equal(t, 3, sr.best)
	assert.Equal(t, []int{-9, -6, -3}, sr.starts)

	below := sr.stats(0, 0, 4)
	assert.InDelta(t, 0.5, below.vsBest[0], 1e-12)
	assert.InDelta(t, 0.75, below.closed[0], 1e-12, "(0.3-0.15)/(0.3-0.1)")
	assert.InDelta(t, 0.004, below.effLR[0], 1e-12, "0.001 x 4")
	assert.InDelta(t, 0.04/(7*0.05), below.share[0], 1e-12, "one run against 7 sweep runs, each at its calm pace")
	assert.InDelta(t, 12.0/70, below.wallShare[0], 1e-12, "the same by wall time")

	at := sr.stats(0, 1, 4)
	assert.Empty(t, at.closed, "no gap to close at the best start")
	assert.InDelta(t, 0.02, at.vsPlain[0], 1e-12)

	above := sr.stats(0, 2, 4)
	assert.InDelta(t, (math.Log(10)-0.11)/(math.Log(10)-0.1), above.closed[0], 1e-12)
	assert.InDelta(t, 0.05, above.effLR[0], 1e-12)
}

func TestSpreadAndBestPoint(t *testing.T) {
	assert.Equal(t, "+2.0% (+1.0%..+5.0%)", spread([]float64{0.05, 0.01, 0.02}, pct))
	assert.Equal(t, "+2.0%", spread([]float64{0.02}, pct))
	assert.Equal(t, "-", spread(nil, pct))
	inf := math.Inf(1)
	assert.Equal(t, "+5.0% (+1.0%..diverged)", spread([]float64{0.01, inf, 0.05}, pct), "a diverged seed counts as the worst, not as missing")
	assert.Equal(t, "diverged (+1.0%..diverged)", spread([]float64{0.01, inf, inf}, pct))
	assert.Equal(t, "diverged", spread([]float64{inf}, pct))
	// the median over seeds decides: point 1 is best in 2 of 3 seeds.
	sweep := [][]result{
		{{Dir: "d", TestLoss: 0.2}, {Dir: "d", TestLoss: 0.1}, {Dir: "d", TestLoss: 0.01}},
		{{Dir: "d", TestLoss: 0.05}, {Dir: "d", TestLoss: 0.1}, {}},
		{{Dir: "d", TestLoss: 0.3}, {Dir: "d", TestLoss: math.NaN()}, {}},
	}
	assert.Equal(t, 1, bestPoint(sweep), "medians 0.2 and 0.1: a diverged seed counts as +Inf, not as missing; point 2 is not run by every seed")
	assert.Equal(t, -1, bestPoint([][]result{{{Dir: "d", TestLoss: math.NaN()}}}))
	partial := &setupRuns{sweep: [][]result{
		{{Dir: "d", WallSeconds: 1}, {Dir: "d", WallSeconds: 2}},
		{{}, {Dir: "d", WallSeconds: 5}},
	}}
	assert.Equal(t, 12.0, partial.sweepCompute(4, result.rankSeconds), "the whole sweep is a seed that ran every point")
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

func TestStudy1TablesRenderTargetsAndMissingRuns(t *testing.T) {
	sr := fakeRuns([]float64{0.3, 0.2, 0.15, 0.1, 0.12, 0.2, math.NaN()},
		[]float64{0.3, 0.1, math.NaN()}, []float64{0.104, 0.102, 0.103}, []float64{2, 0, -2})
	for i := range sr.sweep[0] {
		sr.sweep[0][i].Dir = "d"
	}
	// a second seed that ran only some points, and a paper form that failed
	sr.sweep = append(sr.sweep, make([]result, len(sr.ks)))
	sr.sweep[1][sr.best] = result{Dir: "d", TestLoss: 0.11, WallSeconds: 10}
	sr.plain = append(sr.plain, sr.plain[0])
	sr.hdet[0] = append(sr.hdet[0], sr.hdet[0][0])
	failed := result{TestLoss: math.NaN(), FinalOffset: math.NaN(), Failed: "exit status 2"}
	sr.hdet = append(sr.hdet, [][]result{{failed, failed, failed}})
	b := &bench{p: defaults(false), study1: []*setupRuns{sr}}
	b.p.Seeds = []int{1, 2}
	sr.sweep[0][0].Steps = 702
	tb := &table{Title: "Study 1", Header: []string{"setup"}}
	b.summarizeSetup(tb, sr)
	b.study1Notes(tb)
	var md bytes.Buffer
	tb.markdown(&md)
	s := md.String()
	// seed 1 against 0.1, seed 2 against its own best-point run, 0.11
	assert.Contains(t, s, "| AdamW | HDET default | 10x below | 0.001 | -0.7% (-5.5%..+4.0%) | -65.3% (-65.3%..-65.3%) | 101% (98%..103%) | 0.0074 (0.0074..0.0074) | 6.1% (max 6.1%) | 17.1% (max 17.1%) |")
	assert.Contains(t, s, "| AdamW | HDET default | 10x above | 0.1 | -1.7% (-6.4%..+3.0%) | - |", "plain DP diverged there")
	assert.Contains(t, s, "Target met (AdamW): every HDET start (default config) within +5% of the best sweep point, median over 2 seed(s): 10x below -0.7%, at best -2.6%, 10x above -1.7%.")
	assert.Contains(t, s, "Target met (AdamW): every HDET run (default config) at most 1/7")
	assert.Contains(t, s, "Target met (AdamW): at the best start, HDET (default config) no worse than +3% against plain DP at that max_lr: median +2.0%.")
	assert.Contains(t, s, "| AdamW | HDET paper form (1 failed: exit status 2) | 10x below | 0.001 | - | - | - | - |")
	assert.Contains(t, s, "### Study 1 sweep, AdamW")
	assert.Contains(t, s, "| 0.01 (best) | 0.1000 | 0.1100 |")
	assert.Contains(t, s, "| 0.001 | 0.3000 | - |")
	assert.Contains(t, s, "| 0.1 | NaN (diverged) | - |", "a diverged point says so")
}

func TestStudy1PlotPerSetup(t *testing.T) {
	sr := fakeRuns([]float64{0.3, 0.2, 0.15, 0.1, 0.12, 0.2, math.NaN()},
		[]float64{0.3, 0.1, math.NaN()}, []float64{0.104, 0.102, 0.103}, []float64{2, 0, -2})
	sr.hdet = append(sr.hdet, [][]result{{{TestLoss: 0.2}, {TestLoss: 0.11}, {TestLoss: math.NaN()}}})
	b := &bench{p: defaults(true), study1: []*setupRuns{sr}}
	dir := t.TempDir()
	paths, err := b.plot(dir)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(dir, "sweep-adamw.png")}, paths)
	data, err := os.ReadFile(paths[0])
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(data, []byte("\x89PNG")))
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
