package report

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot/vg"

	"github.com/hdet-dev/hdet/internal/atomicfile"
	"github.com/hdet-dev/hdet/internal/metrics"
)

// Files Compare writes.
const (
	CompareFile       = "compare.md"
	DefaultCompareDir = "hdet-compare"
)

// Compare loads several runs and writes into outDir (DefaultCompareDir when
// empty) one loss plot with every run's mean window loss (solid) and test
// loss (dashed), compare.md with a table of final metrics, and index.html;
// of a run that committed, it compares the main pass. Runs are labelled by
// directory name. It returns index.html's absolute path.
func Compare(runDirs []string, outDir string) (indexPath string, err error) {
	if outDir == "" {
		outDir = DefaultCompareDir
	}
	runs := make([]*Run, len(runDirs))
	for i, d := range runDirs {
		if runs[i], err = Load(d); err != nil {
			return "", err
		}
	}
	labels := runLabels(runs)
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", fmt.Errorf("report: %w", err)
	}

	figs, err := compareLoss(runs, labels, outDir)
	if err != nil {
		return "", err
	}

	t := compareTable(runs, labels)
	var md strings.Builder
	fmt.Fprintf(&md, "# hdet: %d runs compared\n\n", len(runs))
	writeMarkdownTable(&md, t)
	if err := atomicfile.Write(filepath.Join(outDir, CompareFile), []byte(md.String())); err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	index, err := writePage(outDir, page{
		Title:   fmt.Sprintf("hdet: %d runs compared", len(runs)),
		Lead:    "Runs: " + strings.Join(labels, ", "),
		Tables:  []table{t},
		Figures: figs,
		Files:   []string{CompareFile},
	})
	if err != nil {
		return "", err
	}
	return absPath(index)
}

// compareLoss draws the loss of every run (its final pass) on one figure.
func compareLoss(runs []*Run, labels []string, outDir string) ([]Figure, error) {
	sp := newSpan()
	for _, r := range runs {
		sp.add(means(r.pass(r.finalPass()))...)
		for _, e := range r.passEvals(r.finalPass()) {
			sp.add(float64(e.Loss))
		}
	}
	c := newChart("loss of each run", "step", "loss", sp.wide())
	cols := rankColors(len(runs))
	for i, r := range runs {
		final := r.pass(r.finalPass())
		if err := c.series(windowSteps(final), means(final), cols[i], vg.Points(2), 0, false, labels[i]+" (train)"); err != nil {
			return nil, err
		}
		tx, test := evalSeries(r.passEvals(r.finalPass()), func(e metrics.Eval) metrics.Float { return e.Loss })
		if err := c.series(tx, test, cols[i], vg.Points(1.2), vg.Points(2.5), true, labels[i]+" (test)"); err != nil {
			return nil, err
		}
	}
	ok, err := c.save(outDir, "compare-loss")
	if !ok || err != nil {
		return nil, err
	}
	return []Figure{{Name: "compare-loss", Caption: "Mean training loss per window over healthy ranks (solid) and test loss (dashed) of each run; of a run that committed, its main pass"}}, nil
}

// compareTable is the final metrics of each run: of its main pass when it
// committed, with the steps its search pass took and what that cost.
func compareTable(runs []*Run, labels []string) table {
	t := table{Title: "Final metrics", Header: []string{"run", "steps", "final loss", "best loss", "final test loss", "best test loss",
		"final accuracy", "best accuracy", "wall s", "converge overhead", "search pass"}}
	for i, r := range runs {
		s := Summarize(r)
		steps := fmt.Sprintf("%d / %d", s.Steps, s.TotalSteps)
		if !s.Finished {
			steps += " (unfinished)"
		}
		search := "— (one pass)"
		if s.TwoPass {
			search = fmt.Sprintf("%d steps", s.SearchSteps)
			if s.TotalSteps > 0 {
				search += fmt.Sprintf(" (the run cost %.2f runs)", 1+float64(s.SearchSteps)/float64(s.TotalSteps))
			}
		}
		t.Rows = append(t.Rows, []string{labels[i], steps, num(s.FinalLoss), num(s.BestLoss),
			num(s.FinalTestLoss), num(s.BestTestLoss), num(s.FinalAccuracy), num(s.BestAccuracy),
			fmt.Sprintf("%.1f", s.WallSeconds), pct(s.ConvergePercent), search})
	}
	return t
}

// runLabels names runs by directory; when two share a base name, the paths
// as given tell them apart.
func runLabels(runs []*Run) []string {
	count := map[string]int{}
	for _, r := range runs {
		count[r.Name]++
	}
	labels := make([]string, len(runs))
	for i, r := range runs {
		labels[i] = r.Name
		if count[r.Name] > 1 {
			labels[i] = filepath.Clean(r.Dir)
		}
	}
	return labels
}
