package main

import (
	"fmt"
	"math"
	"strings"
)

// summaryCase is the default form at one start of one setup, medians over
// the held-out seeds.
type summaryCase struct {
	setup, start     string
	hdet, worst      float64 // HDET against the reference
	plain            float64 // plain training at the start against the reference
	closed           float64
	share, runs      float64
	stepRuns         float64
	startIdx, points int
}

func (b *bench) summaryCases() [][]summaryCase {
	var out [][]summaryCase
	for _, sr := range b.study1 {
		var row []summaryCase
		for si := range sr.starts {
			st := sr.stats(0, si, b.p.NP)
			row = append(row, summaryCase{setup: sr.s.Label, start: startNames[si], hdet: medianInf(st.vsRef), worst: maxInf(st.vsRef),
				plain: medianInf(st.plainVsRef), closed: median(st.closed), share: median(st.share), runs: median(st.runs), stepRuns: median(st.stepRuns),
				startIdx: si, points: len(sr.ks)})
		}
		out = append(out, row)
	}
	return out
}

// groupTitles name each setup group in its summary's title.
var groupTitles = map[string]string{"gpt": "GPT", "gpt-cosine": "GPT with warm-up and cosine set by hand"}

// summaryText is the doc's first block: study 1's default-form numbers
// read as when HDET pays off, when it does not, and by how much.
func (b *bench) summaryText() string {
	cases := b.summaryCases()
	if len(cases) == 0 {
		return ""
	}
	var sb strings.Builder
	title, from := "Summary", "study 1"
	if b.p.Group != "" {
		name := groupTitles[b.p.Group]
		title, from = "Summary, the "+name, "study 1 on the "+name
	}
	fmt.Fprintf(&sb, "## %s: when HDET pays off\n\nGenerated from %s below: one HDET run with the default config (`auto.commit: restart`: a search pass, then the committed max_lr trained from step 0 without spread) started 10x below, at and 10x above the best point of a %d-point plain max_lr sweep, against the reference, plain training at that best point. Final loss (test loss; the GPT's validation bits per byte) against the reference, median over the held-out seeds %s (the sweep's own seeds picked the best point, so the reference is not a lucky draw); in brackets plain training at the same start and the part of its gap HDET closes.\n\n",
		title, from, b.p.SweepN, seedList(b.p.HeldOut))
	head, sep := []string{"start"}, []string{"---"}
	for _, row := range cases {
		head, sep = append(head, row[0].setup), append(sep, "---")
	}
	fmt.Fprintf(&sb, "| %s |\n|%s|\n", strings.Join(head, " | "), strings.Join(sep, "|"))
	for si, name := range []string{"10x below the best max_lr", "at the best max_lr", "10x above the best max_lr"} {
		cells := []string{name}
		for _, row := range cases {
			cells = append(cells, summaryCell(row[si]))
		}
		fmt.Fprintf(&sb, "| %s |\n", strings.Join(cells, " | "))
	}
	cells := []string{"cost of one HDET run (median over the starts)"}
	for _, row := range cases {
		var runs, shares, steps []float64
		for _, c := range row {
			runs, shares, steps = append(runs, c.runs), append(shares, c.share), append(steps, c.stepRuns)
		}
		cells = append(cells, fmt.Sprintf("%s plain runs' steps; %s runs' training time, %s of the %d-run sweep",
			num(median(steps), 2), num(median(runs), 2), share(median(shares)), row[0].points))
	}
	fmt.Fprintf(&sb, "| %s |\n\n", strings.Join(cells, " | "))
	sb.WriteString(summaryVerdicts(cases))
	return sb.String()
}

func summaryCell(c summaryCase) string {
	h := "HDET **" + showInf(c.hdet, pct) + "**"
	if c.startIdx == 1 {
		return h + " (plain: the reference)"
	}
	return fmt.Sprintf("%s (plain %s, closes %s)", h, showInf(c.plain, pct), num(100*c.closed, 0)+"%")
}

// summaryVerdicts sorts the cases: HDET pays off where it ends closer to
// the reference than plain training at its start, not where it ends
// farther (at the best start plain training is the reference, so there it
// can only cost).
func summaryVerdicts(cases [][]summaryCase) string {
	var pays, not, atBest []string
	worst, lo, hi := math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, row := range cases {
		for _, c := range row {
			worst = math.Max(worst, c.hdet)
			lo, hi = math.Min(lo, c.share), math.Max(hi, c.share)
			at := fmt.Sprintf("%s from %s: HDET %s against plain %s", c.setup, c.start, showInf(c.hdet, pct), showInf(c.plain, pct))
			switch {
			case c.startIdx == 1:
				atBest = append(atBest, fmt.Sprintf("%s %s (worst seed %s)", c.setup, showInf(c.hdet, pct), showInf(c.worst, pct)))
			case c.hdet < c.plain:
				pays = append(pays, at)
			default:
				not = append(not, at)
			}
		}
	}
	var sb strings.Builder
	if len(pays) > 0 {
		fmt.Fprintf(&sb, "- **Pays off** when the guess is off (%d of %d off starts): %s.\n", len(pays), len(pays)+len(not), strings.Join(pays, "; "))
	}
	if len(not) > 0 {
		fmt.Fprintf(&sb, "- **Does not pay off** from: %s.\n", strings.Join(not, "; "))
	}
	fmt.Fprintf(&sb, "- **At the best max_lr it can only cost**: plain training there is the reference, and HDET ends %s, for its search pass's compute on top of the run.\n", strings.Join(atBest, ", "))
	ends := fmt.Sprintf("ends at most %s above the reference", pct(worst))
	if math.IsInf(worst, 1) {
		ends = "diverges in the worst case"
	}
	fmt.Fprintf(&sb, "- **Against the sweep**: one HDET run costs %s to %s of the sweep's compute (medians per setup and start) and %s (median over seeds, the worst setup and start).\n",
		share(lo), share(hi), ends)
	return sb.String()
}
