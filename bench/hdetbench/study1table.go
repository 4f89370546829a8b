package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/hdet-dev/hdet/internal/stats"
)

// startStats are one form's numbers at one start, one value per held-out
// seed whose run did not fail.
type startStats struct {
	vsRef      []float64 // HDET's test loss against the reference (plain at the best point), same seed; +Inf: diverged
	plainVsRef []float64 // plain training at the start against the reference
	closed     []float64 // the gap to the reference plain training at the start leaves that HDET closes
	ratio      []float64 // the committed max_lr over the best point's
	share      []float64 // the run's training rank-seconds over the whole sweep's
	procShare  []float64 // the same by the launches' wall time, start-up included
	runs       []float64 // the run's training time in plain runs at the reference
	stepRuns   []float64 // the run's steps (both passes) in plain runs' steps: the cost without the machine's load
	failed     []string
}

func (sr *setupRuns) stats(fi, si, np int) startStats {
	var st startStats
	sweep := sr.sweepCost(np, result.rankSeconds)
	sweepProc := sr.sweepCost(np, result.processRankSeconds)
	var refTrain []float64
	for _, row := range sr.plain {
		refTrain = append(refTrain, row[1].TrainSeconds)
	}
	for j, runs := range sr.hdet[fi] {
		h, p, ref := runs[si], sr.plain[j][si], sr.plain[j][1]
		if h.Failed != "" { // no numbers from a run that did not run
			st.failed = append(st.failed, h.Failed)
			continue
		}
		st.vsRef = append(st.vsRef, relGap(lossOrInf(h), ref.TestLoss))
		st.plainVsRef = append(st.plainVsRef, relGap(lossOrInf(p), ref.TestLoss))
		if si != 1 { // at the best start plain training is the reference: no gap
			pl := chanceLoss(p)
			st.closed = append(st.closed, (pl-chanceLoss(h))/(pl-ref.TestLoss))
		}
		st.ratio = append(st.ratio, committedLR(h, forms[fi], gridLR(sr.starts[si]))/sr.bestLR())
		st.share = append(st.share, h.rankSeconds(np)/sweep)
		st.procShare = append(st.procShare, h.processRankSeconds(np)/sweepProc)
		st.runs = append(st.runs, h.TrainSeconds/median(refTrain))
		st.stepRuns = append(st.stepRuns, float64(h.pass(0).Steps+h.pass(1).Steps)/float64(ref.Steps))
	}
	return st
}

// committedLR is the max_lr a run ended at: the commit record's value, or
// for a run that never committed (auto.commit continue) the start times
// exp(u) after its last window; NaN for the paper form, which has no
// offset.
func committedLR(r result, f form, start float64) float64 {
	switch {
	case !math.IsNaN(r.Committed):
		return r.Committed
	case f.Name == "paper":
		return math.NaN()
	}
	return start * math.Exp(r.FinalOffset)
}

// sweepCost is the rank-seconds of the whole sweep by the given measure:
// the median, over the seeds that ran every point, of their totals.
func (sr *setupRuns) sweepCost(np int, cost func(result, int) float64) float64 {
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
	m := showInf(medianInf(s), f)
	if len(s) == 1 {
		return m
	}
	return fmt.Sprintf("%s (%s..%s)", m, showInf(slices.Min(s), f), showInf(slices.Max(s), f))
}

func showInf(x float64, f func(float64) string) string {
	if math.IsInf(x, 1) {
		return "diverged"
	}
	return f(x)
}

// medianInf is the median of the non-NaN values, +Inf counting as the
// largest; NaN when there is none.
func medianInf(v []float64) float64 {
	return stats.Median(slices.DeleteFunc(slices.Clone(v), math.IsNaN))
}

// maxInf is the largest non-NaN value, +Inf included; NaN when there is none.
func maxInf(v []float64) float64 {
	if s := slices.DeleteFunc(slices.Clone(v), math.IsNaN); len(s) > 0 {
		return slices.Max(s)
	}
	return math.NaN()
}

func share(v float64) string { return num(100*v, 1) + "%" }

func ratioText(v float64) string { return fmt.Sprintf("x%.2f", v) }

// shareCell is "median (max x)" of a share.
func shareCell(v []float64) string {
	if len(finiteOnly(v)) == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (max %s)", share(median(v)), share(maxInf(finiteOnly(v))))
}

func finiteOnly(v []float64) []float64 {
	return slices.DeleteFunc(slices.Clone(v), func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) })
}

// summarizeSetup adds one setup's rows, its target lines and its further
// tables.
func (b *bench) summarizeSetup(t *table, sr *setupRuns) {
	closedf := func(v float64) string { return num(100*v, 0) + "%" }
	for fi, f := range forms {
		for si, k := range sr.starts {
			st := sr.stats(fi, si, b.p.NP)
			run := f.Label
			if len(sr.hdet[fi]) == 0 {
				continue
			}
			if len(st.failed) > 0 {
				run += fmt.Sprintf(" (%d failed: %s)", len(st.failed), st.failed[0])
			}
			t.add(sr.s.Label, run, startNames[si], lrText(gridLR(k)), fmt.Sprint(len(sr.hdet[fi])),
				showInf(medianInf(st.vsRef), pct), showInf(maxInf(st.vsRef), pct), spread(st.plainVsRef, pct),
				spread(st.closed, closedf), spread(st.ratio, ratioText), shareCell(st.share), shareCell(st.procShare))
		}
	}
	b.targetNotes(t, sr)
	t.More = append(t.More, b.sweepTable(sr), b.heldOutTable(sr))
}

// targetNotes judges the default form against the targets: the median
// within +5% of the reference from every start, the worst seed within
// +10%, at the best start within +2%, each run at most 1/8 of the sweep.
func (b *bench) targetNotes(t *table, sr *setupRuns) {
	var meds, worsts []string
	medOK, worstOK, atBest, cheap := true, true, math.NaN(), true
	var shares, steps []float64
	for si := range sr.starts {
		st := sr.stats(0, si, b.p.NP)
		m, w := medianInf(st.vsRef), maxInf(st.vsRef)
		ok := len(st.failed) == 0 && len(st.vsRef) > 0
		medOK = medOK && ok && m <= 0.05
		worstOK = worstOK && ok && w <= 0.10
		cheap = cheap && ok && maxInf(st.share) <= 1.0/8
		meds = append(meds, startNames[si]+" "+showInf(m, pct))
		worsts = append(worsts, startNames[si]+" "+showInf(w, pct))
		shares, steps = append(shares, st.share...), append(steps, st.stepRuns...)
		if si == 1 {
			atBest = m
		}
	}
	label := sr.s.Label
	t.note("%s (%s): HDET default within +5%% of the reference from every start, median over the held-out seeds: %s.", verdict(medOK), label, strings.Join(meds, ", "))
	t.note("%s (%s): the worst seed within +10%% from every start: %s.", verdict(worstOK), label, strings.Join(worsts, ", "))
	t.note("%s (%s): at the best start within +2%%: %s.", verdict(atBest <= 0.02), label, showInf(atBest, pct))
	t.note("%s (%s): every HDET default run at most 1/8 (12.5%%) of the %d-point sweep's compute: median %s, max %s (by steps, which no load changes: %s of the sweep's).",
		verdict(cheap), label, len(sr.ks), share(median(shares)), share(maxInf(finiteOnly(shares))), share(median(steps)/float64(len(sr.ks))))
}

// sweepTable lists one setup's sweep: the test loss of every sweep seed
// per point.
func (b *bench) sweepTable(sr *setupRuns) *table {
	head := []string{"max_lr"}
	for _, seed := range b.p.Seeds {
		head = append(head, fmt.Sprintf("seed %d", seed))
	}
	st := &table{Title: fmt.Sprintf("Study 1 sweep, %s: plain training, %d points, %s", sr.s.Label, len(sr.ks), sr.s.lossName()),
		Header: append(head, "median", "median vs best", "train rank-s (median)")}
	bestMed := medianInf(lossesOf(column(sr.sweep, sr.best)))
	for i, k := range sr.ks {
		label := lrText(gridLR(k))
		if i == sr.best {
			label += " (best)"
		}
		cells := []string{label}
		var rs []float64
		for _, r := range column(sr.sweep, i) {
			cells = append(cells, lossCell(r))
			if r.Dir != "" {
				rs = append(rs, r.rankSeconds(b.p.NP))
			}
		}
		m := medianInf(lossesOf(column(sr.sweep, i)))
		st.add(append(cells, showInf(m, func(v float64) string { return num(v, 4) }), showInf(relGap(m, bestMed), pct), num(median(rs), 1))...)
	}
	return st
}

// lossesOf is each run's loss (+Inf: diverged), NaN where a seed did not
// run the point.
func lossesOf(runs []result) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = math.NaN()
		if r.Dir != "" || r.Command != "" {
			out[i] = lossOrInf(r)
		}
	}
	return out
}

func lossCell(r result) string {
	switch {
	case r.Dir == "" && r.Failed == "":
		return "-"
	case r.Failed != "":
		return "failed"
	case r.diverged():
		return num(r.TestLoss, 4) + " (diverged)"
	}
	return num(r.TestLoss, 4)
}

// heldOutTable lists one setup's held-out runs seed by seed: the reference
// and plain training at the starts, then every HDET run with the max_lr it
// committed.
func (b *bench) heldOutTable(sr *setupRuns) *table {
	head := []string{"run"}
	for _, seed := range b.p.HeldOut {
		head = append(head, fmt.Sprintf("seed %d", seed))
	}
	st := &table{Title: fmt.Sprintf("Study 1 held-out seeds, %s: %s (HDET: and the committed max_lr)", sr.s.Label, sr.s.lossName()), Header: head}
	for si, k := range sr.starts {
		label := fmt.Sprintf("plain at %s (%s)", startNames[si], lrText(gridLR(k)))
		if si == 1 {
			label = fmt.Sprintf("reference: plain at the best point (%s)", lrText(gridLR(k)))
		}
		cells := []string{label}
		for j := range sr.plain {
			cells = append(cells, lossCell(sr.plain[j][si]))
		}
		st.add(cells...)
	}
	for fi, f := range forms {
		if len(sr.hdet[fi]) == 0 { // a form the setup does not run
			continue
		}
		for si, k := range sr.starts {
			cells := []string{fmt.Sprintf("%s, %s (%s)", f.Label, startNames[si], lrText(gridLR(k)))}
			for j := range sr.plain {
				if j >= len(sr.hdet[fi]) {
					cells = append(cells, "-")
					continue
				}
				h := sr.hdet[fi][j][si]
				c := lossCell(h)
				if lr := committedLR(h, f, gridLR(k)); h.Failed == "" && !math.IsNaN(lr) {
					c += " @ " + lrText(lr)
				}
				cells = append(cells, c)
			}
			st.add(cells...)
		}
	}
	return st
}

// study1Notes explains the protocol and the cells.
func (b *bench) study1Notes(t *table) {
	for _, sr := range b.study1 {
		t.note("%s: %s.", sr.s.Label, sr.s.w.about())
	}
	t.note("Protocol: a %d-point plain max_lr sweep, 3 points per decade (10^(k/3) rounded), on sweep seeds %s: seed %s runs every point, the others the points next to the best (2.2x either side, again whenever the best moves). The best point is the lowest median test loss over the sweep seeds. On the held-out seeds %s, plain training at the best point is the reference, and plain training and HDET start 10x below, at and 10x above it; every comparison is seed by seed against the reference of the same seed, so the best point's own runs, picked for being lucky, are never the yardstick.",
		b.p.SweepN, seedList(b.p.Seeds), seedList(b.p.Seeds[:min(b.p.FullSweeps, len(b.p.Seeds))]), seedList(b.p.HeldOut))
	t.note("Forms: HDET default is `auto.commit: restart` (a search pass with the spread and the controller up to auto.until, then the committed max_lr trained from step 0 with no spread); HDET continue is the one-pass form (`--set explorers.lr.config.auto.commit=continue`); the paper form is `auto.form=paper`. The default runs on every held-out seed, the other two on the first %d (%s) to save compute, and not on the GPT, whose targets are about the default alone.",
		min(b.p.FormSeeds, len(b.p.HeldOut)), seedList(b.p.HeldOut[:min(b.p.FormSeeds, len(b.p.HeldOut))]))
	t.note("Cells: vs reference: the final test loss against the reference of the same seed, median and worst over the seeds (diverged: the run stopped with every rank diverged, or its final loss is NaN or no better than chance: ln 10 (the GPT: 8 bits per byte, guessing among 256 bytes); a window rolled back or a rank left out of an average along the way does not count). plain at start vs reference: the same for plain training at the start. gap closed: (plain at start - HDET) / (plain at start - reference), same seed, a diverged loss counting as chance: 100%% = as good as the reference, negative = worse than plain training at the start. committed max_lr / best: the commit record's max_lr over the best point's (continue: the start times exp(u) after the last window; the paper form has none).")
	t.note("compute share: the HDET run's rank-seconds over the whole sweep's (every point of seed %d), each run's rank-seconds being %d x its training time: for hdet runs the sum over every window record of both passes of fanout_seconds + converge_seconds + plan_seconds (training with the search pass's probes, the converge, the controller's plan) without the restart between the passes (the main pass's first plan_seconds, which holds it), for the plain script its training loop as it printed it: start-up is out on both sides. process-time share: the same with each launch's wall time, start-up included (the ConvNet's HDET run starts Python twice: its script is started again for the main pass). The machine is shared; timings of runs reused from earlier invocations are from when they ran.",
		b.p.Seeds[0], b.p.NP)
	t.note("bench/configs/hdet.yaml as run: %s.", configSummary(hdetConfig))
	cached, runs := b.study1Counts()
	if cached > 0 {
		t.note("%d of the %d runs were reused from earlier invocations (key: the command, the bytes of its config and script, and for the built-in MLP the final parameter checksum of a short canary run per setup and form made fresh by this invocation; HDET runs also the SHA-256 of bin/hdet and its plugins; see cache.go).", cached, runs)
	}
}

func (b *bench) study1Counts() (cached, runs int) {
	for _, sr := range b.study1 {
		all := slices.Concat(sr.sweep, sr.plain)
		for _, f := range sr.hdet {
			all = append(all, f...)
		}
		for _, rows := range all {
			for _, r := range rows {
				if r.Command != "" {
					runs++
				}
				if r.Cached {
					cached++
				}
			}
		}
	}
	return cached, runs
}

func seedList(seeds []int) string {
	s := make([]string, len(seeds))
	for i, v := range seeds {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ", ")
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
	return "`" + string(js) + "` (fields not set take the explorer's defaults, docs/configuration.md)"
}
