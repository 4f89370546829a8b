package report

import (
	"fmt"
	"math"
	"slices"
)

// Committed is one hyperparameter's committed value (the commit record)
// and, where the run's config.yaml names it, the schedule's peak that the
// committed value scales.
type Committed struct {
	Name, Scale   string
	Offset, Value float64 // u in the hyperparameter's scale; what a config would say (OneCycle's max_lr)
	Frozen        bool    // its explorer had failed: Value is its frozen base
	Peak          float64 // NaN when unknown
	PeakField     string
}

// committed lists the commit record's values, in the order of r.Params.
func committed(r *Run) []Committed {
	if r.Commit == nil {
		return nil
	}
	peaks := schedulePeaks(r.Dir)
	scales := map[string]string{}
	var names []string
	for _, p := range r.Params {
		scales[p.Name] = p.Scale
		if _, ok := r.Commit.Committed[p.Name]; ok {
			names = append(names, p.Name)
		}
	}
	var extra []string // committed hyperparameters that no start or window record names
	for name := range r.Commit.Committed {
		if _, ok := scales[name]; !ok {
			extra = append(extra, name)
		}
	}
	slices.Sort(extra)
	var out []Committed
	for _, name := range append(names, extra...) {
		c := r.Commit.Committed[name]
		pc := Committed{Name: name, Scale: scales[name], Offset: float64(c.Offset), Value: float64(c.Value), Frozen: c.Frozen, Peak: math.NaN()}
		if pk, ok := peaks[name]; ok {
			pc.Peak, pc.PeakField = pk.value, pk.name
		}
		out = append(out, pc)
	}
	return out
}

// Text says what the main pass trained at, against the schedule as
// configured: "max_lr 0.004847 = 10.5× the schedule's 0.00046 (offset
// u = 2.355)" on a log scale, "value 0.15 = the schedule's 0.1 + 0.05
// (offset u = 0.05)" on a linear one.
func (c Committed) Text() string {
	if c.Frozen {
		return fmt.Sprintf("frozen at %s (its explorer failed)", num(c.Value))
	}
	value, peak := num(c.Value), ""
	if c.PeakField != "" {
		value, peak = c.PeakField+" "+value, " "+num(c.Peak)
	}
	if c.Scale == "log" {
		return fmt.Sprintf("%s = %.3g× the schedule's%s (offset u = %.4g)", value, math.Exp(c.Offset), peak, c.Offset)
	}
	sign := "+"
	if c.Offset < 0 {
		sign = "−"
	}
	return fmt.Sprintf("%s = the schedule's%s %s %s (offset u = %.4g)", value, peak, sign, num(math.Abs(c.Offset)), c.Offset)
}

// passesText says how many passes the run made and, for one that
// committed, what its search pass cost.
func (s Summary) passesText() string {
	switch {
	case s.TwoPass && s.TotalSteps > 0:
		return fmt.Sprintf("two: a search pass of %d steps (%.0f%% of the %d-step run), then the main pass from step 0 at the committed values; the run cost %.2f runs",
			s.SearchSteps, 100*float64(s.SearchSteps)/float64(s.TotalSteps), s.TotalSteps, 1+float64(s.SearchSteps)/float64(s.TotalSteps))
	case s.TwoPass:
		return fmt.Sprintf("two: a search pass of %d steps, then the main pass from step 0 at the committed values", s.SearchSteps)
	case s.Finished:
		return "one: the run never committed"
	}
	return "one so far: no commit record"
}

// committedTable is the summary's Committed section: the passes, the
// committed values and the main pass's result.
func (s Summary) committedTable() table {
	t := table{Title: "Committed", Header: []string{"what", "value"}, Rows: [][]string{{"passes", s.passesText()}}}
	for _, c := range s.Committed {
		t.Rows = append(t.Rows, []string{c.Name, c.Text()})
	}
	if s.TwoPass {
		t.Rows = append(t.Rows, []string{"main pass: final test accuracy, test loss",
			fmt.Sprintf("%s, %s", num(s.FinalAccuracy), num(s.FinalTestLoss))})
	}
	return t
}

// ofFinal names a result of the final pass: the main pass's, in a run
// that committed.
func (s Summary) ofFinal(label string) string {
	if s.TwoPass {
		return "main pass: " + label
	}
	return label
}

// passName is a pass in the tables of a run that committed.
func passName(pass int) string {
	if pass == passMain {
		return "main"
	}
	return "search"
}

// withPass inserts, in a run that committed, a pass cell after a table
// row's first cell.
func (s Summary) withPass(row []string, pass string) []string {
	if !s.TwoPass {
		return row
	}
	return slices.Insert(slices.Clone(row), 1, pass)
}
