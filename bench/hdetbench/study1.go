package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/hdet-dev/hdet/internal/stats"
)

// setup is one workload configuration of study 1: the sweep and HDET runs
// take the same --set values on top of their configs.
type setup struct {
	Name, Label string
	Sets        []string
	GridFrom    int // the first sweep point is gridLR(GridFrom)
	QuickFrom   int // the same for the quick variant's shorter sweep
}

// setups are study 1's workloads: the MLP with AdamW, and with SGD and
// momentum 0.9, which is far more sensitive to the learning rate.
var setups = []setup{
	{Name: "adamw", Label: "AdamW", Sets: []string{"workload.optimizer=adamw"}, GridFrom: -14, QuickFrom: -10},
	{Name: "sgd", Label: "SGD m=0.9", Sets: []string{"workload.optimizer=sgd", "workload.momentum=0.9"}, GridFrom: -10, QuickFrom: -6},
}

// form is one HDET variant of study 1.
type form struct {
	Name, Label string
	Sets        []string
}

var forms = []form{
	{Name: "default", Label: "HDET default"},
	{Name: "paper", Label: "HDET paper form", Sets: []string{"explorers.lr.config.auto.form=paper"}},
}

// startNames are the three starts, in the order of setupRuns.starts.
var startNames = []string{"10x below", "at best", "10x above"}

// gridLR is the k-th point of a grid with three points per decade,
// 10^(k/3) rounded to two significant digits (1, 2.2, 4.6 times a power of
// ten): 10x a grid point is again a grid point, so the starts 10x below and
// above the best point are sweep points whenever the sweep reaches them.
func gridLR(k int) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(math.Pow(10, float64(k)/3), 'g', 2, 64), 64)
	return v
}

// setupRuns is study 1's runs of one setup.
type setupRuns struct {
	s      setup
	ks     []int        // sweep points: max_lr = gridLR(k)
	sweep  [][]result   // [seed][point]; a point a seed did not run has Dir ""
	best   int          // index into ks of the lowest median test loss over seeds
	starts []int        // grid exponents of the starts: best-3, best, best+3
	plain  [][]result   // [seed][start]: plain DP at each start
	hdet   [][][]result // [form][seed][start]

	plainCanary string   // cache fingerprints: the plain runs'
	canary      []string // and each form's
}

func (b *bench) seedSets(seed int, s setup, k int) []string {
	return slices.Concat([]string{fmt.Sprintf("train.epochs=%d", b.p.Epochs), fmt.Sprintf("train.seed=%d", seed)},
		s.Sets, []string{maxLRSet(gridLR(k))})
}

// plainRun is one plain data-parallel run (sweep.yaml: the lr explorer with
// alpha 0 and the auto phase off), reused when the canary matches.
func (b *bench) plainRun(ctx context.Context, s setup, seed, k int, canary string) (result, error) {
	name := filepath.Join("s1", s.Name, fmt.Sprintf("seed%d", seed), "plain-"+lrText(gridLR(k)))
	return b.rn.run(ctx, name, sweepConfig, canary, b.seedSets(seed, s, k)...)
}

// canaries starts a setup's runs with their cache keys' fingerprints: the
// plain canary, and per HDET form its canary with prog, the program's hash
// (an HDET form whose canary fails is made afresh).
func (b *bench) canaries(ctx context.Context, s setup, prog string) (*setupRuns, error) {
	sr := &setupRuns{s: s, canary: make([]string, len(forms))}
	var err error
	if sr.plainCanary, err = b.canaryFingerprint(ctx, s, "plain", sweepConfig, 60); err != nil {
		return nil, err
	}
	for i, f := range forms {
		if sr.canary[i], err = b.canaryFingerprint(ctx, s, f.Name, hdetConfig, 200, f.Sets...); err != nil {
			b.rn.log("  %v: the %s runs are made afresh", firstLine(err), f.Label)
			continue
		}
		sr.canary[i] += "\n" + prog
	}
	return sr, nil
}

// sweepSetup makes (or reuses) one setup's canaries, sweep and plain runs
// at the starts. The first SweepSeeds seeds sweep every point; the others
// run the points around the best (3 and 1 grid steps either side), enough
// for the best point, the starts and the gaps with every seed.
func (b *bench) sweepSetup(ctx context.Context, s setup, prog string, t *table) (*setupRuns, error) {
	sr, err := b.canaries(ctx, s, prog)
	if err != nil {
		return nil, err
	}
	from := s.GridFrom
	if b.p.Quick {
		from = s.QuickFrom
	}
	for i := range b.p.SweepN {
		sr.ks = append(sr.ks, from+i)
	}
	sr.sweep = make([][]result, len(b.p.Seeds))
	run := func(j int, ks ...int) error {
		for _, k := range ks {
			i := slices.Index(sr.ks, k)
			if i < 0 || sr.sweep[j][i].Dir != "" {
				continue
			}
			r, err := b.plainRun(ctx, s, b.p.Seeds[j], k, sr.plainCanary)
			if err != nil {
				return err
			}
			t.Commands = append(t.Commands, r.Command)
			sr.sweep[j][i] = r
		}
		return nil
	}
	for j := range b.p.Seeds {
		sr.sweep[j] = make([]result, len(sr.ks))
		if j < b.p.SweepSeeds {
			if err := run(j, sr.ks...); err != nil {
				return nil, err
			}
		}
	}
	// The best point over the full sweeps, then over every seed at the
	// points around it; repeated in case the other seeds move it.
	for i := range 3 {
		seeds := sr.sweep
		if i == 0 { // the others have not run yet
			seeds = sr.sweep[:min(b.p.SweepSeeds, len(sr.sweep))]
		}
		if sr.best = bestPoint(seeds); sr.best < 0 {
			return nil, fmt.Errorf("%s: every sweep point diverged", s.Label)
		}
		kb := sr.ks[sr.best]
		for j := b.p.SweepSeeds; j < len(b.p.Seeds); j++ {
			if err := run(j, kb-3, kb-1, kb, kb+1, kb+3); err != nil {
				return nil, err
			}
		}
	}
	kb := sr.ks[sr.best]
	sr.starts = []int{kb - 3, kb, kb + 3}
	for _, seed := range b.p.Seeds {
		var plain []result
		for _, k := range sr.starts {
			r, err := b.plainRun(ctx, s, seed, k, sr.plainCanary)
			if err != nil {
				return nil, err
			}
			t.Commands = append(t.Commands, r.Command)
			plain = append(plain, r)
		}
		sr.plain = append(sr.plain, plain)
	}
	return sr, nil
}

// hdetRuns makes (or reuses) one form's HDET runs of a setup for one seed
// at every start. A failed run is kept as a failed result so that one
// broken variant does not hide the others.
func (b *bench) hdetRuns(ctx context.Context, sr *setupRuns, fi, seed int, t *table) error {
	f := forms[fi]
	var runs []result
	for _, k := range sr.starts {
		name := filepath.Join("s1", sr.s.Name, fmt.Sprintf("seed%d", seed), f.Name+"-"+lrText(gridLR(k)))
		r, err := b.rn.run(ctx, name, hdetConfig, sr.canary[fi], append(b.seedSets(seed, sr.s, k), f.Sets...)...)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			b.rn.log("  FAILED: %v", firstLine(err))
			r = result{TestLoss: math.NaN(), FinalOffset: math.NaN(), Failed: firstLine(err)}
		}
		t.Commands = append(t.Commands, r.Command)
		runs = append(runs, r)
	}
	sr.hdet[fi] = append(sr.hdet[fi], runs)
	return nil
}

// bestPoint is the sweep point with the lowest median test loss over seeds,
// a diverged run counting as infinitely bad; -1 when all diverged.
func bestPoint(sweep [][]result) int {
	best, bestLoss := -1, math.Inf(1)
	for i := range sweep[0] {
		var ls []float64
		for _, row := range sweep {
			ls = append(ls, lossOrInf(row[i]))
		}
		if slices.ContainsFunc(column(sweep, i), func(r result) bool { return r.Dir == "" }) {
			continue // not run by every seed
		}
		slices.Sort(ls)
		if m := ls[len(ls)/2]; m < bestLoss {
			best, bestLoss = i, m
		}
	}
	return best
}

func lossOrInf(r result) float64 {
	if r.diverged() {
		return math.Inf(1)
	}
	return r.TestLoss
}

// chanceLoss caps a loss for the gap fraction: a diverged run is no worse
// than guessing among 10 classes.
func chanceLoss(r result) float64 {
	if math.IsNaN(r.TestLoss) || r.TestLoss > math.Log(10) {
		return math.Log(10)
	}
	return r.TestLoss
}

// startStats are one form's numbers at one start, one value per seed.
type startStats struct {
	vsBest, vsPlain, closed, share, wallShare, effLR []float64
	failed                                           []string
}

func (sr *setupRuns) stats(fi, si int, np int) startStats {
	var st startStats
	for j := range sr.hdet[fi] {
		h, p, ref := sr.hdet[fi][j][si], sr.plain[j][si], sr.sweep[j][sr.best]
		if h.Failed != "" { // no numbers from a run that did not run
			st.failed = append(st.failed, h.Failed)
			continue
		}
		hl := h.TestLoss
		if h.diverged() { // worse than any loss: it must count in the median, not drop out
			hl = math.Inf(1)
		}
		st.vsBest = append(st.vsBest, relGap(hl, ref.TestLoss))
		st.vsPlain = append(st.vsPlain, relGap(hl, p.TestLoss))
		if si != 1 { // at the best start plain DP has no gap to close
			pl := chanceLoss(p)
			st.closed = append(st.closed, (pl-chanceLoss(h))/(pl-ref.TestLoss))
		}
		st.share = append(st.share, h.calmRankSeconds(np)/sr.sweepCompute(np, result.calmRankSeconds))
		st.wallShare = append(st.wallShare, h.rankSeconds(np)/sr.sweepCompute(np, result.rankSeconds))
		if forms[fi].Name != "paper" { // the paper's absolute update has no offset
			st.effLR = append(st.effLR, gridLR(sr.starts[si])*math.Exp(h.FinalOffset))
		}
	}
	return st
}

// sweepCompute is the rank-seconds of the whole sweep, by the given
// measure: the median over the seeds that ran every point of their totals.
func (sr *setupRuns) sweepCompute(np int, cost func(result, int) float64) float64 {
	var totals []float64
	for _, row := range sr.sweep {
		total := 0.0
		for _, r := range row {
			if r.Dir == "" {
				total = math.NaN()
				break
			}
			total += cost(r, np)
		}
		totals = append(totals, total)
	}
	return median(totals)
}

// spread prints the median and range of per-seed values; +Inf (a
// diverged run) sorts last and reads "diverged".
func spread(v []float64, f func(float64) string) string {
	s := slices.DeleteFunc(slices.Clone(v), math.IsNaN)
	if len(s) == 0 {
		return "-"
	}
	show := func(x float64) string {
		if math.IsInf(x, 1) {
			return "diverged"
		}
		return f(x)
	}
	m := show(medianInf(s))
	if len(s) == 1 {
		return m
	}
	return fmt.Sprintf("%s (%s..%s)", m, show(slices.Min(s)), show(slices.Max(s)))
}

// medianInf is the median of the non-NaN values, +Inf counting as the
// largest; NaN when there is none.
func medianInf(v []float64) float64 {
	return stats.Median(slices.DeleteFunc(slices.Clone(v), math.IsNaN))
}

func maxFinite(v []float64) float64 {
	if s := finiteOnly(v); len(s) > 0 {
		return slices.Max(s)
	}
	return math.NaN()
}

func finiteOnly(v []float64) []float64 {
	return slices.DeleteFunc(slices.Clone(v), func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) })
}

func share(v float64) string { return num(100*v, 1) + "%" }

// studySweep is study 1: per setup a plain data-parallel sweep over max_lr
// for every seed, against HDET started 10x below, at and 10x above the
// sweep's best point, in the default and the paper form.
func (b *bench) studySweep(ctx context.Context) (*table, error) {
	t := &table{Title: "Study 1: finding max_lr, plain DP sweep vs HDET from three starts",
		Header: []string{"setup", "run", "start", "max_lr", "vs best sweep point", "vs plain at start", "gap closed", "final effective max_lr", "compute share", "wall-time share"}}
	b.study1 = nil
	prog, err := programFingerprint(b.rn.hdet)
	if err != nil {
		return t, err
	}
	for _, s := range setups {
		sr, err := b.sweepSetup(ctx, s, prog, t)
		if err != nil {
			return t, err
		}
		sr.hdet = make([][][]result, len(forms))
		b.study1 = append(b.study1, sr)
	}
	// Every setup's default runs before any paper-form run (the default is
	// what the targets are about), seed by seed across the setups; the
	// paper form on the first PaperSeeds seeds.
	for fi, f := range forms {
		seeds := b.p.Seeds
		if f.Name == "paper" {
			seeds = seeds[:min(b.p.PaperSeeds, len(seeds))]
		}
		for _, seed := range seeds {
			for _, sr := range b.study1 {
				if err := b.hdetRuns(ctx, sr, fi, seed, t); err != nil {
					return t, err
				}
			}
		}
	}
	for _, sr := range b.study1 {
		b.summarizeSetup(t, sr)
	}
	a := b.study1[0]
	b.sweepLRs, b.sweep, b.best = nil, a.sweep[0], a.best
	for _, k := range a.ks {
		b.sweepLRs = append(b.sweepLRs, gridLR(k))
	}
	b.hdetAbs = a.hdet[0][0]
	b.study1Notes(t)
	return t, nil
}

// summarizeSetup adds one setup's rows, its target lines and its sweep
// table.
func (b *bench) summarizeSetup(t *table, sr *setupRuns) {
	pctf := func(v float64) string { return pct(v) }
	closedf := func(v float64) string { return num(100*v, 0) + "%" }
	var worst []string
	close, cheap := true, true
	var atBest float64
	for fi, f := range forms {
		for si, k := range sr.starts {
			st := sr.stats(fi, si, b.p.NP)
			run := f.Label
			if len(st.failed) > 0 {
				run += fmt.Sprintf(" (%d failed: %s)", len(st.failed), st.failed[0])
			}
			t.add(sr.s.Label, run, startNames[si], lrText(gridLR(k)), spread(st.vsBest, pctf),
				spread(st.vsPlain, pctf), spread(st.closed, closedf), spread(st.effLR, lrText),
				fmt.Sprintf("%s (max %s)", share(median(st.share)), share(maxFinite(st.share))),
				fmt.Sprintf("%s (max %s)", share(median(st.wallShare)), share(maxFinite(st.wallShare))))
			if fi != 0 {
				continue
			}
			m := medianInf(st.vsBest)
			worst = append(worst, fmt.Sprintf("%s %s", startNames[si], spread([]float64{m}, pct)))
			close = close && len(st.failed) == 0 && m <= 0.05
			cheap = cheap && len(st.failed) == 0 && slices.Max(st.share) <= 1.0/7
			if si == 1 {
				atBest = medianInf(st.vsPlain)
			}
		}
	}
	t.note("%s (%s): every HDET start (default config) within +5%% of the best sweep point, median over %d seed(s): %s.",
		verdict(close), sr.s.Label, len(sr.sweep), strings.Join(worst, ", "))
	t.note("%s (%s): every HDET run (default config) at most 1/7 (14.3%%) of its seed's sweep compute.", verdict(cheap), sr.s.Label)
	t.note("%s (%s): at the best start, HDET (default config) no worse than +3%% against plain DP at that max_lr: median %s.",
		verdict(atBest <= 0.03), sr.s.Label, spread([]float64{atBest}, pct))
	t.More = append(t.More, b.sweepTable(sr))
}

// sweepTable lists one setup's sweep: the test loss of every seed per
// point, and the plain runs at starts outside the sweep.
func (b *bench) sweepTable(sr *setupRuns) *table {
	head := []string{"max_lr"}
	for _, seed := range b.p.Seeds {
		head = append(head, fmt.Sprintf("test loss, seed %d", seed))
	}
	st := &table{Title: fmt.Sprintf("Study 1 sweep, %s: plain DP, %d points", sr.s.Label, len(sr.ks)),
		Header: append(head, "median vs best point", "rank-s (median)")}
	row := func(label string, runs []result, ref []float64) {
		cells := []string{label}
		var rel, rs []float64
		for j, r := range runs {
			if r.Dir == "" {
				cells = append(cells, "-")
				continue
			}
			loss := num(r.TestLoss, 4)
			if r.diverged() {
				loss += " (diverged)"
			}
			cells = append(cells, loss)
			rel = append(rel, relGap(r.TestLoss, ref[j]))
			rs = append(rs, r.rankSeconds(b.p.NP))
		}
		st.add(append(cells, pct(median(rel)), num(median(rs), 1))...)
	}
	ref := make([]float64, len(sr.sweep))
	for j := range sr.sweep {
		ref[j] = sr.sweep[j][sr.best].TestLoss
	}
	for i, k := range sr.ks {
		label := lrText(gridLR(k))
		if i == sr.best {
			label += " (best)"
		}
		row(label, column(sr.sweep, i), ref)
	}
	for si, k := range sr.starts {
		if !slices.Contains(sr.ks, k) {
			row(lrText(gridLR(k))+" (start outside the sweep)", column(sr.plain, si), ref)
		}
	}
	return st
}

// column is the i-th run of every seed.
func column(rows [][]result, i int) []result {
	out := make([]result, len(rows))
	for j, r := range rows {
		out[j] = r[i]
	}
	return out
}

func (b *bench) study1Notes(t *table) {
	cached, runs := 0, 0
	for _, sr := range b.study1 {
		all := slices.Concat(sr.sweep, sr.plain)
		for _, f := range sr.hdet {
			all = append(all, f...)
		}
		for _, rows := range all {
			for _, r := range rows {
				if r.Dir != "" {
					runs++
				}
				if r.Cached {
					cached++
				}
			}
		}
	}
	seeds := make([]string, len(b.p.Seeds))
	for i, s := range b.p.Seeds {
		seeds[i] = fmt.Sprint(s)
	}
	steps := b.study1[0].sweep[0][0].Steps
	lo, hi := math.Inf(1), 0.0
	for _, sr := range b.study1 {
		for _, row := range sr.sweep {
			for _, r := range row {
				if r.Dir != "" && !r.diverged() {
					lo, hi = min(lo, r.WallSeconds), max(hi, r.WallSeconds)
				}
			}
		}
	}
	t.note("Setups: the 784-256-256-10 MLP, batch 64 per rank, N = %d, %d epochs (%d steps), with AdamW or with SGD + momentum 0.9; seeds %s. Sweep: %d points per setup, 3 per decade (10^(k/3) rounded), plain DP (bench/configs/sweep.yaml: the lr explorer with spread alpha 0 and the auto phase off, OneCycle pct_start 0.25). HDET: bench/configs/hdet.yaml (the lr explorer with its default spread and auto phase) started at the best sweep point (lowest median test loss over the seeds) and 10x below and above; paper form: the same with auto.form paper.",
		b.p.NP, b.p.Epochs, steps, strings.Join(seeds, ", "), b.p.SweepN)
	if len(b.p.Seeds) > b.p.SweepSeeds {
		t.note("Compute: the first %d seed(s) swept all %d points; the other seeds ran the points 1 and 3 grid steps (2.2x and 10x) either side of the best, which decide the best point, the starts and the gaps (\"-\" in the sweep tables). The paper form ran the first %d seed(s).", b.p.SweepSeeds, b.p.SweepN, b.p.PaperSeeds)
	}
	t.note("bench/configs/hdet.yaml as run: %s.", configSummary(hdetConfig))
	t.note("Cells: median over seeds (min..max). vs best sweep point: final test loss against the best point's run with the same seed. vs plain at start: against plain DP at the start's max_lr, same seed (\"-\" where plain DP diverged). gap closed: (plain at start - HDET) / (plain at start - best point), same seed; a diverged loss counts as ln 10; 100%% = as good as the best point, negative = worse than not exploring. final effective max_lr: the start times exp(u), u the learned offset after the last window (\"-\" for the paper form, whose absolute update has no offset). compute share: the HDET run's rank-seconds over the whole sweep's (every point of a fully swept seed), each run's rank-seconds taken at its calmest pace: %d ranks x its steps x the first quartile over its windows of the seconds per step (training, probe, converge, plan). The machine is shared with other work whose load varied over the study, so the same %d steps took %.0f s to %.0f s of wall time; the wall-time share (%d x the run's wall time from its end record, over the sweep's) is shown beside it but compares runs made under different loads.", b.p.NP, steps, lo, hi, b.p.NP)
	if cached > 0 {
		t.note("%d of the %d runs were reused from earlier invocations (key: the command, the config's bytes and the final parameter checksum of a short canary run per setup and variant, made fresh by this invocation, and for HDET runs the SHA-256 of bin/hdet and its plugins; see cache.go); their timings are from when they ran, under that time's load.", cached, runs)
	}
}

// configSummary quotes what a config sets for training and its explorers,
// so the doc says which HDET settings produced the numbers.
func configSummary(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var cfg struct {
		Train     map[string]any   `yaml:"train"`
		Explorers []map[string]any `yaml:"explorers"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return err.Error()
	}
	js, err := json.Marshal(map[string]any{"train": cfg.Train, "explorers": cfg.Explorers})
	if err != nil {
		return err.Error()
	}
	return "`" + string(js) + "` (fields not set take the explorer's defaults, README's config table)"
}
