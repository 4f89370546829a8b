package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeRuns builds a setupRuns with one sweep seed (test losses per point,
// 10 s of training each) and held-out seeds: plain training at the three
// starts (6 s each) and the default form's HDET runs (8.4 s each) with
// their committed max_lr.
func fakeRuns(sweep []float64, plain, hdet, committed [][]float64) *setupRuns {
	sr := &setupRuns{s: &setup{Name: "adamw", Label: "MLP AdamW", w: &builtinMLP{epochs: 3, sets: []string{"workload.optimizer=adamw"}}}}
	var row []result
	for i, l := range sweep {
		sr.ks = append(sr.ks, -9+i)
		row = append(row, result{Dir: "d", Command: "c", TestLoss: l, TrainSeconds: 10, ProcessSeconds: 12})
	}
	sr.sweep = [][]result{row}
	sr.best = bestPoint(sr.sweep)
	kb := sr.ks[sr.best]
	sr.starts = []int{kb - 3, kb, kb + 3}
	sr.hdet = [][][]result{nil, nil, nil}
	for j := range plain {
		var p, h []result
		for si := range 3 {
			p = append(p, result{Dir: "d", Command: "c", TestLoss: plain[j][si], TrainSeconds: 6, ProcessSeconds: 8, Steps: 100})
			h = append(h, result{Dir: "d", Command: "c", TestLoss: hdet[j][si], TrainSeconds: 8.4, ProcessSeconds: 14.4,
				Committed: committed[j][si], FinalOffset: nan, Steps: 100, Passes: []passTimes{{Steps: 40}, {Steps: 100}}})
		}
		sr.plain = append(sr.plain, p)
		sr.hdet[0] = append(sr.hdet[0], h)
	}
	return sr
}

// The sweep's best is 0.01 (0.1); held-out seed A's reference 0.1, seed
// B's 0.11; plain 10x above diverged on seed A.
func twoSeeds() *setupRuns {
	return fakeRuns([]float64{0.3, 0.2, 0.15, 0.1, 0.12, 0.2, math.NaN()},
		[][]float64{{0.3, 0.1, math.NaN()}, {0.33, 0.11, 0.22}},
		[][]float64{{0.104, 0.101, 0.106}, {0.121, 0.1111, 0.11}},
		[][]float64{{0.008, 0.012, 0.02}, {0.006, 0.009, 0.015}})
}

func TestStudy1Stats(t *testing.T) {
	sr := twoSeeds()
	require.Equal(t, 3, sr.best)
	assert.Equal(t, []int{-9, -6, -3}, sr.starts)
	assert.Equal(t, 0.01, sr.bestLR())

	below := sr.stats(0, 0, 4)
	assert.InDeltaSlice(t, []float64{0.04, 0.1}, below.vsRef, 1e-12, "against each seed's own reference")
	assert.InDeltaSlice(t, []float64{2, 2}, below.plainVsRef, 1e-12)
	assert.InDeltaSlice(t, []float64{(0.3 - 0.104) / 0.2, (0.33 - 0.121) / 0.22}, below.closed, 1e-12)
	assert.InDeltaSlice(t, []float64{0.8, 0.6}, below.ratio, 1e-12, "the committed max_lr over the best point's")
	assert.InDeltaSlice(t, []float64{0.12, 0.12}, below.share, 1e-12, "8.4 s against 7 sweep runs of 10 s")
	assert.InDeltaSlice(t, []float64{14.4 / 84, 14.4 / 84}, below.procShare, 1e-12)
	assert.InDeltaSlice(t, []float64{1.4, 1.4}, below.runs, 1e-12, "8.4 s against the reference's 6 s")
	assert.InDeltaSlice(t, []float64{1.4, 1.4}, below.stepRuns, 1e-12, "a search pass of 40 steps and a main pass of 100 against 100")

	at := sr.stats(0, 1, 4)
	assert.Empty(t, at.closed, "no gap to close at the best start")
	assert.InDeltaSlice(t, []float64{0, 0}, at.plainVsRef, 1e-12)

	above := sr.stats(0, 2, 4)
	assert.True(t, math.IsInf(above.plainVsRef[0], 1), "plain diverged: worse than any loss")
	assert.True(t, result{TestLoss: 2.3025}.diverged(), "a script's loss printed to 4 decimals at chance")
	assert.False(t, result{TestLoss: 2.29}.diverged())
	assert.InDelta(t, (math.Log(10)-0.106)/(math.Log(10)-0.1), above.closed[0], 1e-12)

	assert.InDelta(t, 0.02, committedLR(result{Committed: nan, FinalOffset: math.Log(2)}, forms[1], 0.01), 1e-12, "continue: start x exp(u)")
	assert.True(t, math.IsNaN(committedLR(result{Committed: nan, FinalOffset: 0}, forms[2], 0.01)), "the paper form has no offset")
}

func TestSpreadAndBestPoint(t *testing.T) {
	assert.Equal(t, "+2.0% (+1.0%..+5.0%)", spread([]float64{0.05, 0.01, 0.02}, pct))
	assert.Equal(t, "+2.0%", spread([]float64{0.02}, pct))
	assert.Equal(t, "-", spread(nil, pct))
	inf := math.Inf(1)
	assert.Equal(t, "+5.0% (+1.0%..diverged)", spread([]float64{0.01, inf, 0.05}, pct), "a diverged seed counts as the worst, not as missing")
	assert.Equal(t, "diverged (+1.0%..diverged)", spread([]float64{0.01, inf, inf}, pct))
	assert.Equal(t, "diverged", spread([]float64{inf}, pct))
	assert.Equal(t, inf, maxInf([]float64{0.1, inf, math.NaN()}))
	// the median over seeds decides: point 1 is best in 2 of 3 seeds.
	sweep := [][]result{
		{{Dir: "d", TestLoss: 0.2}, {Dir: "d", TestLoss: 0.1}, {Dir: "d", TestLoss: 0.01}},
		{{Dir: "d", TestLoss: 0.05}, {Dir: "d", TestLoss: 0.1}, {}},
		{{Dir: "d", TestLoss: 0.3}, {Dir: "d", TestLoss: math.NaN()}, {}},
	}
	assert.Equal(t, 1, bestPoint(sweep), "medians 0.2 and 0.1: a diverged seed counts as +Inf, not as missing; point 2 is not run by every seed")
	assert.Equal(t, -1, bestPoint([][]result{{{Dir: "d", TestLoss: math.NaN()}}}))
	partial := &setupRuns{sweep: [][]result{
		{{Dir: "d", TrainSeconds: 1}, {Dir: "d", TrainSeconds: 2}},
		{{}, {Dir: "d", TrainSeconds: 5}},
	}}
	assert.Equal(t, 12.0, partial.sweepCost(4, result.rankSeconds), "the whole sweep is a seed that ran every point")
}

func TestStudy1TablesRenderTargetsAndMissingRuns(t *testing.T) {
	sr := twoSeeds()
	failed := result{TestLoss: nan, FinalOffset: nan, Committed: nan, Failed: "exit status 2"}
	sr.hdet[2] = [][]result{{failed, failed, failed}}
	b := &bench{p: defaults(false), study1: []*setupRuns{sr}}
	b.p.Seeds, b.p.HeldOut, b.p.SweepN = []int{1}, []int{4, 5}, 7
	tb := &table{Title: "Study 1", Header: []string{"setup"}}
	b.summarizeSetup(tb, sr)
	b.study1Notes(tb)
	var md bytes.Buffer
	tb.markdown(&md)
	s := md.String()
	assert.Contains(t, s, "| MLP AdamW | HDET default (restart) | 10x below | 0.001 | 2 | +7.0% | +10.0% | +200.0% (+200.0%..+200.0%) | 97% (95%..98%) | x0.70 (x0.60..x0.80) | 12.0% (max 12.0%) | 17.1% (max 17.1%) |")
	assert.Contains(t, s, "| MLP AdamW | HDET default (restart) | 10x above | 0.1 | 2 | +3.0% | +6.0% | diverged (+100.0%..diverged) |")
	assert.Contains(t, s, "Target NOT met (MLP AdamW): HDET default within +5% of the reference from every start, median over the held-out seeds: 10x below +7.0%, at best +1.0%, 10x above +3.0%.")
	assert.Contains(t, s, "Target met (MLP AdamW): the worst seed within +10% from every start: 10x below +10.0%, at best +1.0%, 10x above +6.0%.")
	assert.Contains(t, s, "Target met (MLP AdamW): at the best start within +2%: +1.0%.")
	assert.Contains(t, s, "Target met (MLP AdamW): every HDET default run at most 1/8 (12.5%) of the 7-point sweep's compute: median 12.0%, max 12.0% (by steps, which no load changes: 20.0% of the sweep's).")
	assert.Contains(t, s, "| MLP AdamW | HDET paper form (1 failed: exit status 2) | 10x below | 0.001 | 1 | NaN | NaN | - | - | - | - | - |")
	assert.NotContains(t, s, "HDET continue (rev. 2) |", "a form with no runs has no rows")
	assert.Contains(t, s, "### Study 1 sweep, MLP AdamW")
	assert.Contains(t, s, "| max_lr | seed 1 | median | median vs best | train rank-s (median) |")
	assert.Contains(t, s, "| 0.01 (best) | 0.1000 | 0.1000 | +0.0% | 40.0 |")
	assert.Contains(t, s, "| 0.1 | NaN (diverged) | diverged | diverged | 40.0 |", "a diverged point says so")
	assert.Contains(t, s, "### Study 1 held-out seeds, MLP AdamW")
	assert.Contains(t, s, "| reference: plain at the best point (0.01) | 0.1000 | 0.1100 |")
	assert.Contains(t, s, "| HDET default (restart), 10x below (0.001) | 0.1040 @ 0.008 | 0.1210 @ 0.006 |")
	assert.Contains(t, s, "| HDET paper form, at best (0.01) | failed | - |")
	assert.Contains(t, s, "the other two on the first 2 (4, 5)")
}

func TestSummaryTextSaysWhenHDETPaysOff(t *testing.T) {
	sr := twoSeeds()
	b := &bench{p: defaults(false), study1: []*setupRuns{sr}}
	b.p.SweepN = 7
	s := b.summaryText()
	assert.Contains(t, s, "## Summary: when HDET pays off")
	assert.Contains(t, s, "| start | MLP AdamW |\n|---|---|\n")
	assert.Contains(t, s, "| 10x below the best max_lr | HDET **+7.0%** (plain +200.0%, closes 97%) |")
	assert.Contains(t, s, "| at the best max_lr | HDET **+1.0%** (plain: the reference) |")
	assert.Contains(t, s, "| cost of one HDET run (median over the starts) | 1.40 plain runs' steps; 1.40 runs' training time, 12.0% of the 7-run sweep |")
	assert.Contains(t, s, "**Pays off** when the guess is off (2 of 2 off starts): MLP AdamW from 10x below: HDET +7.0% against plain +200.0%; MLP AdamW from 10x above: HDET +3.0% against plain diverged.")
	assert.Contains(t, s, "**At the best max_lr it can only cost**: plain training there is the reference, and HDET ends MLP AdamW +1.0% (worst seed +1.0%)")
	assert.Contains(t, s, "one HDET run costs 12.0% to 12.0% of the sweep's compute")
	assert.Contains(t, s, "and ends at most +7.0% above the reference (median over seeds, the worst setup and start)")
	assert.NotContains(t, s, "Does not pay off")

	worse := twoSeeds()
	worse.hdet[0][0][0].TestLoss, worse.hdet[0][1][0].TestLoss = 0.5, 0.5
	b.study1 = []*setupRuns{worse}
	assert.Contains(t, b.summaryText(), "**Does not pay off** from: MLP AdamW from 10x below: HDET +377.3% against plain +200.0%.")
	worse.hdet[0][0][2].TestLoss = nan
	assert.Contains(t, b.summaryText(), "diverges in the worst case")
}

func TestStudy1PlotPerSetup(t *testing.T) {
	sr := twoSeeds()
	sr.hdet[2] = [][]result{{{TestLoss: 0.2}, {TestLoss: 0.11}, {TestLoss: math.NaN()}}}
	b := &bench{p: defaults(true), study1: []*setupRuns{sr}}
	dir := t.TempDir()
	paths, err := b.plot(dir)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(dir, "sweep-adamw.png")}, paths)
	data, err := os.ReadFile(paths[0])
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(data, []byte("\x89PNG")))
}

// The summary block goes first: under the title, before the intro.
func TestWriteDocPutsTheSummaryFirst(t *testing.T) {
	out := filepath.Join(t.TempDir(), "benchmarks.md")
	h := docHeader{Settings: defaults(false), OutPath: out}
	require.NoError(t, writeDoc(out, h, map[int]*table{1: {Title: "Study 1: x", Header: []string{"run"}}}))
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(out, []byte(strings.Replace(string(data), "# hdet benchmarks\n", "# hdet benchmarks\n\nPreface.\n", 1)), 0o644))
	h.Summary = "## Summary: when HDET pays off\n\nIt does.\n"
	require.NoError(t, writeDoc(out, h, map[int]*table{}))
	data, err = os.ReadFile(out)
	require.NoError(t, err)
	s := string(data)
	assert.Less(t, strings.Index(s, "Preface."), strings.Index(s, "It does."))
	assert.Less(t, strings.Index(s, "It does."), strings.Index(s, "hdetbench:begin intro"))
	assert.Contains(t, s, "Study 1: x", "a study not run keeps its block")
	h.Summary = "## Summary: when HDET pays off\n\nIt still does.\n"
	require.NoError(t, writeDoc(out, h, nil))
	data, err = os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(data), "hdetbench:begin summary"))
	assert.Contains(t, string(data), "It still does.")
	assert.NotContains(t, string(data), "It does.")
}
