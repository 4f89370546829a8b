package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// form is one HDET variant of study 1.
type form struct {
	Name, Label string
	Sets        []string
	AllSeeds    bool // runs on every held-out seed; the others on the first FormSeeds
}

// forms are study 1's HDET variants: the default (auto.commit restart: a
// search pass, then a main pass at the committed value), the one-pass
// form (auto.commit continue) and the paper's absolute update.
var forms = []form{
	{Name: "default", Label: "HDET default (restart)", AllSeeds: true},
	{Name: "continue", Label: "HDET continue (rev. 2)", Sets: []string{"explorers.lr.config.auto.commit=continue"}},
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

// setupRuns is study 1's runs of one setup. The sweep seeds choose the
// best point; the held-out seeds measure plain training at it (the
// reference) and at the starts, and HDET from the starts, so that the
// comparison does not reuse the runs the best point was picked by (no
// winner's curse).
type setupRuns struct {
	s      *setup
	ks     []int        // sweep points: max_lr = gridLR(k)
	sweep  [][]result   // [sweep seed][point]; a point a seed did not run has Dir ""
	best   int          // index into ks of the lowest median test loss over the sweep seeds
	starts []int        // grid exponents of the starts: best-3, best, best+3
	plain  [][]result   // [held-out seed][start]: plain training at each start; [j][1] is the reference
	hdet   [][][]result // [form][held-out seed][start]
}

func (sr *setupRuns) bestLR() float64 { return gridLR(sr.ks[sr.best]) }

// runPlain launches one plain run of the setup and notes its command.
func (b *bench) runPlain(ctx context.Context, s *setup, seed int, lr float64, t *table) (result, error) {
	l := s.w.plain(seed, lr)
	l.Name = runName(s, seed, "plain", lr)
	r, err := b.rn.launch(ctx, l)
	if err == nil {
		t.Commands = append(t.Commands, r.Command)
	}
	return r, err
}

// sweepSetup makes (or reuses) one setup's sweep and its plain runs on the
// held-out seeds. The first FullSweeps sweep seeds run every point; the
// others run the points next to the best (one grid step, 2.2x, either
// side), again whenever the best moves, so that the best point is the
// lowest median over every sweep seed.
func (b *bench) sweepSetup(ctx context.Context, s *setup, t *table) (*setupRuns, error) {
	sr := &setupRuns{s: s}
	for i := range b.p.SweepN {
		sr.ks = append(sr.ks, s.from(b.p.Quick)+i)
	}
	full := min(b.p.FullSweeps, len(b.p.Seeds))
	sr.sweep = make([][]result, len(b.p.Seeds))
	for j := range sr.sweep {
		sr.sweep[j] = make([]result, len(sr.ks))
	}
	run := func(j int, ks ...int) (int, error) {
		made := 0
		for _, k := range ks {
			i := slices.Index(sr.ks, k)
			if i < 0 || sr.sweep[j][i].Dir != "" {
				continue
			}
			r, err := b.runPlain(ctx, s, b.p.Seeds[j], gridLR(k), t)
			if err != nil {
				return made, err
			}
			sr.sweep[j][i], made = r, made+1
		}
		return made, nil
	}
	for j := range full {
		if _, err := run(j, sr.ks...); err != nil {
			return nil, err
		}
	}
	for i := 0; i < 6; i++ {
		rows := sr.sweep
		if i == 0 { // the other seeds have not run yet
			rows = sr.sweep[:full]
		}
		if sr.best = bestPoint(rows); sr.best < 0 {
			return nil, fmt.Errorf("%s: every sweep point diverged", s.Label)
		}
		made := 0
		for j := full; j < len(b.p.Seeds); j++ {
			kb := sr.ks[sr.best]
			n, err := run(j, kb-1, kb, kb+1)
			if err != nil {
				return nil, err
			}
			made += n
		}
		if made == 0 && i > 0 {
			break
		}
	}
	kb := sr.ks[sr.best]
	sr.starts = []int{kb - 3, kb, kb + 3}
	for _, seed := range b.p.HeldOut {
		var row []result
		for _, k := range sr.starts {
			r, err := b.runPlain(ctx, s, seed, gridLR(k), t)
			if err != nil {
				return nil, err
			}
			row = append(row, r)
		}
		sr.plain = append(sr.plain, row)
	}
	return sr, nil
}

// hdetRuns makes (or reuses) one form's HDET runs of a setup for one
// held-out seed at every start. A failed run is kept as a failed result so
// that one broken variant does not hide the others.
func (b *bench) hdetRuns(ctx context.Context, sr *setupRuns, fi, seed int, t *table) error {
	f := forms[fi]
	var runs []result
	for _, k := range sr.starts {
		l := sr.s.w.hdet(f, seed, gridLR(k))
		l.Name = runName(sr.s, seed, f.Name, gridLR(k))
		r, err := b.rn.launch(ctx, l)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			b.rn.log("  FAILED: %v", firstLine(err))
			r = result{TestLoss: nan, FinalOffset: nan, Committed: nan, Failed: firstLine(err)}
		}
		t.Commands = append(t.Commands, r.Command)
		runs = append(runs, r)
	}
	sr.hdet[fi] = append(sr.hdet[fi], runs)
	return nil
}

// formSeeds are the held-out seeds form f runs on.
func (b *bench) formSeeds(f form) []int {
	if f.AllSeeds {
		return b.p.HeldOut
	}
	return b.p.HeldOut[:min(b.p.FormSeeds, len(b.p.HeldOut))]
}

// studySweep is study 1: per setup a plain max_lr sweep on the sweep seeds
// picks the best point; on held-out seeds, plain training at it (the
// reference) and at 10x below and above, against HDET from those starts
// in the default form, the one-pass form and the paper's form.
func (b *bench) studySweep(ctx context.Context) (*table, error) {
	t := &table{Title: "Study 1: finding max_lr, one HDET run against a plain sweep's best point",
		Header: []string{"setup", "run", "start", "max_lr", "seeds", "vs reference: median", "worst seed",
			"plain at start vs reference", "gap closed", "committed max_lr / best", "compute share", "process-time share"}}
	b.study1 = nil
	prog, err := programFingerprint(b.rn.hdet)
	if err != nil {
		return t, err
	}
	for _, s := range b.setups {
		if err := s.w.prepare(ctx, b, s, prog); err != nil {
			return t, fmt.Errorf("%s: %w", s.Label, err)
		}
		sr, err := b.sweepSetup(ctx, s, t)
		if err != nil {
			return t, err
		}
		sr.hdet = make([][][]result, len(forms))
		b.study1 = append(b.study1, sr)
	}
	// Every setup's default runs before any other form's (the default is
	// what the targets are about), seed by seed across the setups.
	for fi, f := range forms {
		for _, seed := range b.formSeeds(f) {
			for _, sr := range b.study1 {
				if fi > 0 && sr.s.DefaultOnly {
					continue
				}
				if err := b.hdetRuns(ctx, sr, fi, seed, t); err != nil {
					return t, err
				}
			}
		}
	}
	for _, sr := range b.study1 {
		b.summarizeSetup(t, sr)
	}
	b.study1Notes(t)
	b.keepForLaterStudies()
	return t, nil
}

// keepForLaterStudies hands studies 2 and 5 the MLP AdamW setup's first
// sweep seed and its default-form HDET runs of the first held-out seed
// (study 2 runs the MLP with AdamW at 9x its best rate).
func (b *bench) keepForLaterStudies() {
	for _, a := range b.study1 {
		if a.s.Name != "adamw" {
			continue
		}
		b.sweepLRs, b.sweep, b.best = nil, a.sweep[0], a.best
		for _, k := range a.ks {
			b.sweepLRs = append(b.sweepLRs, gridLR(k))
		}
		if len(a.hdet[0]) > 0 {
			b.hdetAbs = a.hdet[0][0]
		}
	}
}

// bestPoint is the sweep point with the lowest median test loss over seeds,
// a diverged run counting as infinitely bad, among the points every seed
// ran; -1 when all diverged.
func bestPoint(sweep [][]result) int {
	best, bestLoss := -1, math.Inf(1)
	for i := range sweep[0] {
		if slices.ContainsFunc(column(sweep, i), func(r result) bool { return r.Dir == "" }) {
			continue // not run by every seed
		}
		var ls []float64
		for _, row := range sweep {
			ls = append(ls, lossOrInf(row[i]))
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
// than chance (guessing among 10 classes; the GPT: among 256 bytes).
func chanceLoss(r result) float64 {
	if r.diverged() || r.TestLoss > r.chance() {
		return r.chance()
	}
	return r.TestLoss
}

// column is the i-th run of every seed.
func column(rows [][]result, i int) []result {
	out := make([]result, len(rows))
	for j, r := range rows {
		out[j] = r[i]
	}
	return out
}
