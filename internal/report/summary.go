package report

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// Summary holds the numbers of summary.md. Losses and accuracies with no
// data are NaN.
type Summary struct {
	Name                string
	Steps, TotalSteps   int // of the final pass: the main pass of a run that committed
	Windows, Ranks      int // Windows: of both passes
	TwoPass             bool
	SearchSteps         int // steps of the search pass of a run that committed
	SearchWindows       int
	Committed           []Committed
	ReplicaSize         int // G > 1: Ranks counts replicas of G ranks each
	Finished, Truncated bool
	Resumes             int
	FinalLoss, BestLoss float64 // mean window loss over healthy ranks; these and the test metrics are the final pass's
	BestLossStep        int
	FinalTestLoss       float64
	BestTestLoss        float64
	BestTestLossStep    int
	FinalAccuracy       float64
	BestAccuracy        float64
	BestAccuracyStep    int
	Bases               []BasePath   // per pass
	Offsets             []OffsetPath // the learned offsets (the auto phase), over the search pass
	Events              []EventGroup
	Unhealthy           []RankHealth
	WallSeconds         float64
	FanoutSeconds       float64
	ConvergeSeconds     float64 // these seconds and the wall time: of both passes
	PlanSeconds         float64
	ConvergePercent     float64 // converge seconds in percent of wall time, NaN when wall time is unknown
}

// BasePath is how one hyperparameter's base moved: its value at the first
// and last window, and its extremes with the step where each was reached.
type BasePath struct {
	Name, Scale          string
	Pass                 int
	Start, Min, Max, End float64
	MinStep, MaxStep     int
}

// EventGroup gathers the events of one kind for one hyperparameter (frozen,
// clamped, restarted, rollback), which may repeat every window.
type EventGroup struct {
	Kind, Param         string
	Pass                int
	Count               int
	FirstStep, LastStep int
	FirstMessage        string
}

// RankHealth lists the windows in which one rank was left out of the average.
type RankHealth struct {
	Rank, Pass int
	Windows    []int
}

// Summarize computes the summary of r.
func Summarize(r *Run) Summary {
	nan := math.NaN()
	s := Summary{
		Name: r.Name, Steps: r.Steps(), TotalSteps: r.Start.TotalSteps,
		Windows: len(r.Windows), Ranks: r.Ranks, ReplicaSize: r.Start.ReplicaSize,
		TwoPass: r.TwoPass(), SearchSteps: r.SearchSteps(), Committed: committed(r),
		Finished: r.End != nil, Truncated: r.Truncated, Resumes: r.Resumes,
		FinalLoss: nan, BestLoss: nan, FinalTestLoss: nan, BestTestLoss: nan,
		FinalAccuracy: nan, BestAccuracy: nan,
		WallSeconds: r.WallSeconds(),
	}
	if s.TwoPass {
		s.SearchWindows = len(r.pass(passSearch))
	}
	for _, w := range r.pass(r.finalPass()) {
		s.addLoss(w)
	}
	for _, w := range r.Windows {
		s.FanoutSeconds += w.FanoutSeconds
		s.ConvergeSeconds += w.ConvergeSeconds
		s.PlanSeconds += w.PlanSeconds
	}
	s.addEvals(r.passEvals(r.finalPass()))
	s.Events, s.Unhealthy = tallyRun(r)
	for pass := range r.finalPass() + 1 {
		for _, p := range r.Params {
			if bp, ok := basePath(r, p, pass); ok {
				s.Bases = append(s.Bases, bp)
			}
		}
	}
	s.Offsets = offsetPaths(r)
	s.ConvergePercent = nan
	if s.WallSeconds > 0 {
		s.ConvergePercent = 100 * s.ConvergeSeconds / s.WallSeconds
	}
	return s
}

// addLoss takes a window's mean loss.
func (s *Summary) addLoss(w metrics.WindowRecord) {
	if m := MeanLoss(w); finite(m) {
		s.FinalLoss = m
		if math.IsNaN(s.BestLoss) || m < s.BestLoss {
			s.BestLoss, s.BestLossStep = m, w.Step
		}
	}
}

// addEvals takes the final and best test loss and accuracy.
func (s *Summary) addEvals(evals []EvalAt) {
	for _, e := range evals {
		if l := float64(e.Loss); finite(l) {
			s.FinalTestLoss = l
			if math.IsNaN(s.BestTestLoss) || l < s.BestTestLoss {
				s.BestTestLoss, s.BestTestLossStep = l, e.Step
			}
		}
		if a := float64(e.Accuracy); finite(a) {
			s.FinalAccuracy = a
			if math.IsNaN(s.BestAccuracy) || a > s.BestAccuracy {
				s.BestAccuracy, s.BestAccuracyStep = a, e.Step
			}
		}
	}
}

// tallyRun groups the events and left-out ranks of every window of both
// passes. A rolled-back window's events happened, though its numbers were
// redone: the tally takes every copy, in pass and step order (a replaced
// copy before its re-run), so first and last steps stay right.
func tallyRun(r *Run) ([]EventGroup, []RankHealth) {
	t := tally{unhealthy: map[[2]int]map[int]bool{}, groups: map[eventKey]*EventGroup{}}
	all := append(slices.Clone(r.Replaced), r.Windows...)
	slices.SortStableFunc(all, func(a, b metrics.WindowRecord) int {
		if a.Pass != b.Pass {
			return a.Pass - b.Pass
		}
		return a.Step - b.Step
	})
	for _, w := range all {
		t.add(w)
	}
	return t.events(), t.ranks()
}

// tally collects, over the windows, which rank was unhealthy when (by
// pass and rank) and the events grouped by kind, hyperparameter and pass
// (in order of first sight).
type tally struct {
	unhealthy map[[2]int]map[int]bool
	groups    map[eventKey]*EventGroup
	order     []eventKey
}

type eventKey struct {
	kind, param string
	pass        int
}

func (t *tally) markUnhealthy(pass, rank, window int) {
	key := [2]int{pass, rank}
	if t.unhealthy[key] == nil {
		t.unhealthy[key] = map[int]bool{}
	}
	t.unhealthy[key][window] = true
}

func (t *tally) add(w metrics.WindowRecord) {
	for rank, ok := range w.Healthy {
		if !ok {
			t.markUnhealthy(w.Pass, rank, w.Window)
		}
	}
	for _, e := range w.Events {
		switch e.Kind {
		case metrics.EventUnhealthy:
			if e.Rank != nil {
				t.markUnhealthy(w.Pass, *e.Rank, w.Window)
			}
		case metrics.EventCheckpoint:
		default:
			key := eventKey{e.Kind, e.Param, w.Pass}
			g := t.groups[key]
			if g == nil {
				g = &EventGroup{Kind: e.Kind, Param: e.Param, Pass: w.Pass, FirstStep: w.Step, FirstMessage: e.Message}
				t.groups[key] = g
				t.order = append(t.order, key)
			}
			g.Count++
			g.LastStep = w.Step
		}
	}
}

func (t *tally) events() []EventGroup {
	var out []EventGroup
	for _, key := range t.order {
		out = append(out, *t.groups[key])
	}
	return out
}

func (t *tally) ranks() []RankHealth {
	var out []RankHealth
	for key, ws := range t.unhealthy {
		rh := RankHealth{Pass: key[0], Rank: key[1]}
		for w := range ws {
			rh.Windows = append(rh.Windows, w)
		}
		slices.Sort(rh.Windows)
		out = append(out, rh)
	}
	slices.SortFunc(out, func(a, b RankHealth) int {
		if a.Pass != b.Pass {
			return a.Pass - b.Pass
		}
		return a.Rank - b.Rank
	})
	return out
}

func basePath(r *Run, p metrics.Param, pass int) (BasePath, bool) {
	bp := BasePath{Name: p.Name, Scale: p.Scale, Pass: pass}
	found := false
	for _, w := range r.pass(pass) {
		b, ok := w.Base[p.Name]
		if !ok || !finite(float64(b)) {
			continue
		}
		v := float64(b)
		if !found {
			bp.Start, bp.Min, bp.Max, bp.MinStep, bp.MaxStep = v, v, v, w.Step, w.Step
			found = true
		}
		if v < bp.Min {
			bp.Min, bp.MinStep = v, w.Step
		}
		if v > bp.Max {
			bp.Max, bp.MaxStep = v, w.Step
		}
		bp.End = v
	}
	return bp, found
}

// Progress says how far the run got, for a reader who may be looking at a
// run that is still going or that crashed.
func (s Summary) Progress() string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %d of %d", s.Steps, s.TotalSteps)
	if s.TotalSteps > 0 {
		fmt.Fprintf(&b, " (%.1f%%)", 100*float64(s.Steps)/float64(s.TotalSteps))
	}
	if s.TwoPass {
		fmt.Fprintf(&b, " of the main pass, after a search pass of %d steps;", s.SearchSteps)
	} else {
		b.WriteString(",")
	}
	fmt.Fprintf(&b, " %d windows", s.Windows)
	if s.TwoPass {
		fmt.Fprintf(&b, " (%d search, %d main)", s.SearchWindows, s.Windows-s.SearchWindows)
	}
	switch {
	case s.Finished:
		b.WriteString(", finished")
	default:
		b.WriteString(", no end record: still running or stopped early")
	}
	if s.Truncated {
		b.WriteString("; the last line of metrics.jsonl was cut short and skipped")
	}
	if s.Resumes > 0 {
		fmt.Fprintf(&b, "; resumed %d time(s)", s.Resumes)
	}
	return b.String()
}

// num formats a value for the tables; missing values read "—".
func num(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.4g", v)
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", v)
}

func atStep(v float64, step int) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%s (step %d)", num(v), step)
}

// table is a header row and body rows, rendered both as markdown and HTML so
// that summary.md and index.html always show the same numbers.
type table struct {
	Title  string
	Header []string
	Rows   [][]string
}

// ranksText is the ranks, or under replica groups the replicas and their
// ranks.
func (s Summary) ranksText() string {
	if s.ReplicaSize > 1 {
		return fmt.Sprintf("%d replicas of %d ranks (%d ranks)", s.Ranks, s.ReplicaSize, s.Ranks*s.ReplicaSize)
	}
	return fmt.Sprint(s.Ranks)
}

func (s Summary) tables() []table {
	return []table{s.resultsTable(), s.committedTable(), s.basesTable(), s.offsetsTable(), s.eventsTable(), s.healthTable()}
}

func (s Summary) resultsTable() table {
	res := table{Title: "Results", Header: []string{"metric", "value"}, Rows: [][]string{
		{"progress", s.Progress()},
		{"ranks", s.ranksText()},
		{s.ofFinal("final training loss (mean over healthy ranks)"), num(s.FinalLoss)},
		{s.ofFinal("best training loss"), atStep(s.BestLoss, s.BestLossStep)},
		{s.ofFinal("final test loss"), num(s.FinalTestLoss)},
		{s.ofFinal("best test loss"), atStep(s.BestTestLoss, s.BestTestLossStep)},
		{s.ofFinal("final test accuracy"), num(s.FinalAccuracy)},
		{s.ofFinal("best test accuracy"), atStep(s.BestAccuracy, s.BestAccuracyStep)},
		{"wall time", fmt.Sprintf("%.1f s", s.WallSeconds)},
		{"fan-out time", fmt.Sprintf("%.1f s", s.FanoutSeconds)},
		{"converge time", fmt.Sprintf("%.1f s", s.ConvergeSeconds)},
		{"plan time (controller + broadcast)", fmt.Sprintf("%.1f s", s.PlanSeconds)},
		{"converge overhead (of wall time)", pct(s.ConvergePercent)},
	}}
	if !s.TwoPass { // a run that committed says it in the Committed section
		for _, o := range s.Offsets {
			res.Rows = append(res.Rows, []string{"controller's conclusion", o.Conclusion()})
		}
	}
	return res
}

func (s Summary) basesTable() table {
	t := table{Title: "Base values", Header: s.withPass([]string{"hyperparameter", "scale", "start", "min", "max", "end"}, "pass")}
	for _, b := range s.Bases {
		t.Rows = append(t.Rows, s.withPass([]string{b.Name, b.Scale, num(b.Start),
			atStep(b.Min, b.MinStep), atStep(b.Max, b.MaxStep), num(b.End)}, passName(b.Pass)))
	}
	return t
}

func (s Summary) offsetsTable() table {
	title := "Learned offsets (what the controller concluded)"
	if s.TwoPass {
		title = "Learned offsets over the search pass (what the controller concluded)"
	}
	t := table{Title: title, Header: []string{"hyperparameter", "scale", "final offset u", "min u", "max u", "schedule peak", "effective peak"}}
	for _, o := range s.Offsets {
		peak := "—"
		if o.PeakField != "" {
			peak = fmt.Sprintf("%s (%s)", num(o.Peak), o.PeakField)
		}
		t.Rows = append(t.Rows, []string{o.Name, o.Scale, num(o.Final), num(o.Min), num(o.Max), peak, num(o.Effective)})
	}
	return t
}

func (s Summary) eventsTable() table {
	t := table{Title: "Frozen, clamped and other events", Header: s.withPass([]string{"event", "hyperparameter", "windows", "first step", "last step", "first message"}, "pass")}
	for _, e := range s.Events {
		t.Rows = append(t.Rows, s.withPass([]string{e.Kind, e.Param, fmt.Sprint(e.Count),
			fmt.Sprint(e.FirstStep), fmt.Sprint(e.LastStep), e.FirstMessage}, passName(e.Pass)))
	}
	return t
}

func (s Summary) healthTable() table {
	t := table{Title: "Unhealthy replicas", Header: s.withPass([]string{"rank", "windows left out", "which"}, "pass")}
	for _, u := range s.Unhealthy {
		t.Rows = append(t.Rows, s.withPass([]string{fmt.Sprint(u.Rank), fmt.Sprint(len(u.Windows)), windowList(u.Windows)}, passName(u.Pass)))
	}
	return t
}

// windowList prints at most a dozen window numbers.
func windowList(ws []int) string {
	const most = 12
	parts := make([]string, 0, most+1)
	for i, w := range ws {
		if i == most {
			parts = append(parts, fmt.Sprintf("… (%d more)", len(ws)-most))
			break
		}
		parts = append(parts, fmt.Sprint(w))
	}
	return strings.Join(parts, ", ")
}

// Markdown renders the summary as summary.md.
func (s Summary) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# hdet run %s\n\n", s.Name)
	for _, t := range s.tables() {
		writeMarkdownTable(&b, t)
	}
	return b.String()
}

func writeMarkdownTable(b *strings.Builder, t table) {
	fmt.Fprintf(b, "## %s\n\n", t.Title)
	if len(t.Rows) == 0 {
		b.WriteString("None.\n\n")
		return
	}
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	b.WriteString("|")
	for _, h := range t.Header {
		b.WriteString(" " + cell(h) + " |")
	}
	b.WriteString("\n|")
	for range t.Header {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, row := range t.Rows {
		b.WriteString("|")
		for _, c := range row {
			b.WriteString(" " + cell(c) + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}
