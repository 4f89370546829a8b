// Package report turns a run directory's metrics.jsonl into plots (PNG and
// SVG), a summary.md, a static index.html and an optional CSV table, and
// compares several runs on one plot.
package report

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// MetricsFile is the name of the metrics file inside a run directory.
const MetricsFile = "metrics.jsonl"

// Run is what a run directory's metrics.jsonl holds, in window order.
type Run struct {
	Dir  string
	Name string // the directory's base name, used as the run's label

	// Start is the last start record (a resumed run appends one); FirstStart
	// is the first, whose time is when the run began.
	Start, FirstStart metrics.StartRecord
	// Windows is by pass, then window index (a run that committed counts
	// its main pass's windows from 0 again); a window redone after a resume
	// or a rollback replaces the earlier one.
	Windows []metrics.WindowRecord
	// Replaced is the window records that a later copy of the same window
	// (same pass and index) replaced, in file order: a window that failed everywhere and rolled back holds
	// the events (unhealthy, rollback) the summary must still count.
	Replaced  []metrics.WindowRecord
	Commit    *metrics.CommitRecord // the last commit record; nil for a run that never committed
	End       *metrics.EndRecord    // nil while the run is going or after a crash
	Truncated bool                  // the last line was cut short
	Resumes   int                   // start records after the first

	Ranks  int
	Params []metrics.Param // the start record's hyperparameters, then any others the windows name
}

// Load reads runDir/metrics.jsonl (runDir may also name the file itself).
// Errors wrap metrics.ErrCorrupt, metrics.ErrNoStart or fs.ErrNotExist when
// the input is not a readable run.
func Load(runDir string) (*Run, error) {
	fi, err := os.Stat(runDir)
	if err != nil {
		return nil, fmt.Errorf("report: run directory: %w", err)
	}
	path := runDir
	if fi.IsDir() {
		path = filepath.Join(runDir, MetricsFile)
	} else {
		runDir = filepath.Dir(runDir)
	}
	recs, truncated, err := metrics.ReadFile(path)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(runDir)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	first, _ := recs[0].(metrics.StartRecord) // Read's first record is always one
	r := &Run{Dir: runDir, Name: filepath.Base(abs), Truncated: truncated, FirstStart: first}
	r.take(recs)
	if err := checkRecords(r); err != nil {
		return nil, err
	}
	r.Params = append(r.Params, r.Start.Hyperparameters...)
	seen := map[string]bool{}
	for _, p := range r.Params {
		seen[p.Name] = true
	}
	var extra []string
	for _, w := range r.Windows {
		for name := range w.Values {
			if !seen[name] {
				seen[name] = true
				extra = append(extra, name)
			}
		}
	}
	slices.Sort(extra)
	for _, name := range extra {
		r.Params = append(r.Params, metrics.Param{Name: name})
	}
	return r, nil
}

// take sorts the records into r: the last start, commit and end, the
// windows by pass and index (the last copy of each) and the rank count.
func (r *Run) take(recs []metrics.Record) {
	byWindow := map[[2]int]metrics.WindowRecord{}
	starts := 0
	for _, rec := range recs {
		switch rec := rec.(type) {
		case metrics.StartRecord:
			r.Start = rec
			r.End = nil // a start after an end record means the run went on
			starts++
		case metrics.WindowRecord:
			key := [2]int{rec.Pass, rec.Window}
			if old, ok := byWindow[key]; ok {
				r.Replaced = append(r.Replaced, old)
			}
			byWindow[key] = rec
		case metrics.CommitRecord:
			r.Commit = &rec
		case metrics.EndRecord:
			r.End = &rec
		}
	}
	r.Resumes = starts - 1
	for _, w := range byWindow {
		r.Windows = append(r.Windows, w)
	}
	sort.Slice(r.Windows, func(i, j int) bool { return windowBefore(r.Windows[i], r.Windows[j]) })
	r.Ranks = r.Start.Ranks
	for _, w := range r.Windows {
		r.Ranks = max(r.Ranks, len(w.Losses))
	}
}

// Bounds on what a report allocates from a file's contents: a start record
// claiming a billion ranks is refused rather than plotted.
const (
	MaxRanks = 1 << 16
	maxCells = 1 << 27 // windows times ranks in the per-rank figures and CSV
)

// checkRecords refuses what no run writes: a size past the bounds above, a
// negative rank count, window or step, a pass other than search and main,
// a main pass without the commit record that starts it.
func checkRecords(r *Run) error {
	n := r.Ranks // the start record's, or more where a window has more losses
	if r.Start.Ranks < 0 {
		n = r.Start.Ranks
	}
	if n < 0 || n > MaxRanks {
		return fmt.Errorf("%w: start record: ranks %d, want 0 to %d", metrics.ErrCorrupt, n, MaxRanks)
	}
	for _, w := range r.Windows {
		if w.Window < 0 || w.Step < 0 {
			return fmt.Errorf("%w: window record: window %d at step %d, want both >= 0", metrics.ErrCorrupt, w.Window, w.Step)
		}
		if w.Pass != passSearch && w.Pass != passMain {
			return fmt.Errorf("%w: window record: pass %d, want %d or %d", metrics.ErrCorrupt, w.Pass, passSearch, passMain)
		}
		if w.Pass == passMain && r.Commit == nil {
			return fmt.Errorf("%w: window %d of the main pass, but no commit record", metrics.ErrCorrupt, w.Window)
		}
	}
	if cells := int64(r.Ranks) * int64(len(r.Windows)); cells > maxCells {
		return fmt.Errorf("%w: %d windows of %d ranks is more than a report draws (%d values)", metrics.ErrCorrupt, len(r.Windows), r.Ranks, maxCells)
	}
	return nil
}

// healthy reports whether rank r counts in window w's mean: its loss is
// finite and the engine did not mark it unhealthy.
func healthy(w metrics.WindowRecord, r int) bool {
	if r >= len(w.Losses) || !finite(float64(w.Losses[r])) {
		return false
	}
	return r >= len(w.Healthy) || w.Healthy[r]
}

// MeanLoss is the mean window loss over the healthy ranks, NaN if none is.
func MeanLoss(w metrics.WindowRecord) float64 {
	sum, n := 0.0, 0
	for r := range w.Losses {
		if healthy(w, r) {
			sum += float64(w.Losses[r])
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Passes of a run (metrics.WindowRecord.Pass).
const (
	passSearch = 0 // the search pass, or the one pass of a run that never committed
	passMain   = 1 // the main pass of a run that committed: steps count from 0 again
)

func windowBefore(a, b metrics.WindowRecord) bool {
	if a.Pass != b.Pass {
		return a.Pass < b.Pass
	}
	return a.Window < b.Window
}

// TwoPass reports whether the run committed: a search pass, then a main
// pass that trains the whole schedule again at the committed values.
func (r *Run) TwoPass() bool { return r.Commit != nil }

// finalPass is the pass whose numbers are the run's result: the main pass
// of a run that committed, the only pass of one that did not.
func (r *Run) finalPass() int {
	if r.TwoPass() {
		return passMain
	}
	return passSearch
}

// pass is the windows of pass p, in window order.
func (r *Run) pass(p int) []metrics.WindowRecord {
	lo := sort.Search(len(r.Windows), func(i int) bool { return r.Windows[i].Pass >= p })
	hi := sort.Search(len(r.Windows), func(i int) bool { return r.Windows[i].Pass > p })
	return r.Windows[lo:hi]
}

// SearchSteps is how many steps the search pass of a run that committed
// took (the commit record's step), 0 for a one-pass run.
func (r *Run) SearchSteps() int {
	if r.Commit != nil {
		return r.Commit.Step
	}
	return 0
}

// Steps is the number of steps done in the final pass: its last window's
// step, or, before any window, 0 in a main pass and the start record's
// resume point otherwise.
func (r *Run) Steps() int {
	ws := r.pass(r.finalPass())
	switch {
	case len(ws) > 0:
		return ws[len(ws)-1].Step
	case r.TwoPass():
		return 0
	}
	return r.Start.ResumedFrom
}

// WallSeconds is the run's wall time: the end record's when there is one,
// otherwise from the first start record to the last record written.
func (r *Run) WallSeconds() float64 {
	if r.End != nil && r.End.WallSeconds > 0 {
		return r.End.WallSeconds
	}
	last := r.Start.Time
	if len(r.Windows) > 0 {
		last = max(last, r.Windows[len(r.Windows)-1].Time)
	}
	if r.End != nil {
		last = max(last, r.End.Time)
	}
	return last - r.FirstStart.Time
}

// EvalAt is a test-set evaluation and the pass and step it was made at.
type EvalAt struct {
	Pass, Step int
	metrics.Eval
}

// Evals lists the run's evaluations by pass, then step: those of the
// windows, then the end record's final one (of the final pass) unless a
// window already evaluated at that step.
func (r *Run) Evals() []EvalAt {
	var evs []EvalAt
	for _, w := range r.Windows {
		if w.Eval != nil {
			evs = append(evs, EvalAt{w.Pass, w.Step, *w.Eval})
		}
	}
	if r.End != nil && r.End.Eval != nil {
		step, pass := r.End.Step, r.finalPass()
		if step == 0 {
			step = r.Steps()
		}
		if n := len(evs); n == 0 || evs[n-1].Pass < pass || evs[n-1].Step < step {
			evs = append(evs, EvalAt{pass, step, *r.End.Eval})
		}
	}
	return evs
}

// passEvals is the evaluations of pass p.
func (r *Run) passEvals(p int) []EvalAt {
	var evs []EvalAt
	for _, e := range r.Evals() {
		if e.Pass == p {
			evs = append(evs, e)
		}
	}
	return evs
}
