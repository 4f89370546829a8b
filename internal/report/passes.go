package report

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// How the figures tell the passes of a run that committed apart: the
// search pass in the colours of a one-pass run (ranks, black), the main
// pass in purple, which the ranks' blue-to-red palette never uses, and the
// commit as a grey dotted vertical line.
var (
	mainColor   = color.RGBA{R: 128, G: 0, B: 160, A: 255}
	commitColor = color.Gray{Y: 110}
)

// maxTracePoints is the most steps a per-step line draws: a 768-pixel-wide
// figure shows no more, and a long run's SVG would grow by megabytes.
const maxTracePoints = 4096

func passColor(pass int) color.Color {
	if pass == passMain {
		return mainColor
	}
	return black
}

// passLabel names a series of a run that committed by its pass; a one-pass
// run's labels stay as they were.
func passLabel(r *Run, label string, pass int) string {
	switch {
	case !r.TwoPass():
		return label
	case pass == passMain:
		return label + " (main pass)"
	}
	return label + " (search)"
}

// rankLabel is a rank's legend entry; none beyond maxLegendRanks.
func rankLabel(r *Run, rank int) string {
	if r.Ranks > maxLegendRanks {
		return ""
	}
	return passLabel(r, fmt.Sprintf("rank %d", rank), passSearch)
}

func stepLabel(r *Run) string {
	if r.TwoPass() {
		return "step (each pass counts from 0)"
	}
	return "step"
}

// meanWidth is the line width of the search pass's mean (or base): bold in
// a one-pass run, thinner where the main pass's is the bold one.
func meanWidth(r *Run) vg.Length {
	if r.TwoPass() {
		return vg.Points(1.5)
	}
	return vg.Points(2.5)
}

// vline is a vertical line across the whole plot: it widens the X range
// to its x but leaves the Y range to the data, so it needs no Y extent.
type vline struct {
	x     float64
	style draw.LineStyle
}

func (v vline) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	x := trX(v.x)
	c.StrokeLine2(v.style, x, c.Min.Y, x, c.Max.Y)
}

func (v vline) DataRange() (xmin, xmax, ymin, ymax float64) {
	return v.x, v.x, math.Inf(1), math.Inf(-1)
}

func (v vline) Thumbnail(c *draw.Canvas) {
	y := c.Center().Y
	c.StrokeLine2(v.style, c.Min.X, y, c.Max.X, y)
}

// mark draws a grey dotted vertical line at x, under the series added
// after it; its legend entry comes last.
func (c *chart) mark(x float64, label string) {
	c.markLine = &vline{x: x, style: draw.LineStyle{Color: commitColor, Width: vg.Points(1.5), Dashes: []vg.Length{vg.Points(2), vg.Points(2)}}}
	c.markLabel = label
	c.p.Add(c.markLine)
}

// markCommit marks, on a figure whose passes share the step axis, where
// the search pass stopped; the axis starts at 0, where both passes do.
func markCommit(c *chart, r *Run) {
	c.p.X.Min = 0
	c.mark(float64(r.SearchSteps()), fmt.Sprintf("commit (step %d)", r.SearchSteps()))
}

// commitNote is a caption's sentence on the commit line.
func commitNote(r *Run) string {
	return fmt.Sprintf("The grey dotted line marks the commit: the search pass ended after %d steps, then the main pass trained from step 0.", r.SearchSteps())
}

// plotParam draws one hyperparameter per step (per window for a run
// recorded without base_steps): each rank's value and the base, and for
// a run that committed the main pass's committed schedule over them.
func plotParam(r *Run, p metrics.Param, cols []color.Color, add addFunc) error {
	tr := traceParam(r.pass(passSearch), p, r.Ranks)
	title := p.Name + ": value per rank and base"
	if r.TwoPass() {
		title = p.Name + ": the search pass per rank, then the committed schedule"
	}
	c := newChart(title, stepLabel(r), p.Name, p.Scale == "log")
	if r.TwoPass() {
		markCommit(c, r)
	}
	glyph := vg.Points(1.8)
	if tr.perStep {
		glyph = 0 // a line per step: points would blot it
	}
	for rank, ys := range tr.ranks {
		if err := c.series(tr.xs, ys, cols[rank], vg.Points(0.8), glyph, false, rankLabel(r, rank)); err != nil {
			return err
		}
	}
	if err := c.series(tr.xs, tr.base, black, meanWidth(r), 0, false, passLabel(r, "base", passSearch)); err != nil {
		return err
	}
	main := traceParam(r.pass(passMain), p, 0)
	if err := c.series(main.xs, main.base, mainColor, vg.Points(2.5), 0, false, "committed (main pass)"); err != nil {
		return err
	}
	when := "at every step"
	if !tr.perStep {
		when = "at the last step of each window"
	}
	axis := ""
	if p.Scale == "log" {
		axis = ", on a log axis"
	}
	caption := fmt.Sprintf("%s: the value each rank used %s, and the base (bold)%s", p.Name, when, axis)
	if r.TwoPass() {
		caption = fmt.Sprintf("%s: in the search pass, the value each rank used %s and the base (black); in the main pass, "+
			"from step 0 again, the committed schedule every rank trained at (bold purple)%s. %s", p.Name, when, axis, commitNote(r))
	}
	return add(c, "hparam-"+fileStem(p.Name), caption)
}

// paramTrace is one hyperparameter over a pass: the base and each rank's
// value at every step (at most maxTracePoints of them), or at every
// window's last step when a window has no base_steps (runs recorded
// before them).
type paramTrace struct {
	xs, base []float64
	ranks    [][]float64 // [rank][point]
	perStep  bool
}

func traceParam(ws []metrics.WindowRecord, p metrics.Param, ranks int) paramTrace {
	t := paramTrace{ranks: make([][]float64, ranks), perStep: len(ws) > 0}
	for _, w := range ws {
		t.perStep = t.perStep && len(w.BaseSteps[p.Name]) > 0
	}
	stride := 1
	if len(ws) > 0 {
		stride = max(1, (ws[len(ws)-1].Step+maxTracePoints-1)/maxTracePoints)
	}
	for _, w := range ws {
		if t.perStep {
			t.addSteps(w, p, stride)
			continue
		}
		b, ok := w.Base[p.Name]
		t.add(float64(w.Step), b, ok, func(rank int) (metrics.Float, bool) { return at(w.Values[p.Name], rank) })
	}
	return t
}

// add appends a point: x, the base (NaN when missing) and each rank's value.
func (t *paramTrace) add(x float64, base metrics.Float, ok bool, value func(rank int) (metrics.Float, bool)) {
	t.xs = append(t.xs, x)
	t.base = append(t.base, orNaN(base, ok))
	for rank := range t.ranks {
		t.ranks[rank] = append(t.ranks[rank], orNaN(value(rank)))
	}
}

// addSteps appends window w's steps, every stride-th and its last. The x
// of a step is the steps done after it, so a window's last step is at the
// window's step, as in the other figures.
func (t *paramTrace) addSteps(w metrics.WindowRecord, p metrics.Param, stride int) {
	steps := w.BaseSteps[p.Name]
	first := w.Step - len(steps)
	last, lastOK := w.Base[p.Name]
	for i, b := range steps {
		x := first + i + 1
		if x%stride != 0 && i != len(steps)-1 {
			continue
		}
		t.add(float64(x), b, true, func(rank int) (metrics.Float, bool) {
			v, ok := at(w.Values[p.Name], rank)
			return metrics.Float(spreadAt(p, float64(b), float64(last), float64(v))), ok && lastOK
		})
	}
}

// spreadAt is a rank's value at a step whose base is base, from its value
// at the window's last step, when the base was last: its slot keeps the
// same ratio to the base (multiplicative and geometric spreads) or the same
// distance (additive), clamped to p's bounds. A spread that narrows within
// the window or a clamped last value makes it approximate.
func spreadAt(p metrics.Param, base, last, value float64) float64 {
	v := value // no ratio to a zero base: the last value
	switch {
	case p.Spread == "additive":
		v = base + value - last
	case last != 0:
		v = base * value / last
	}
	if p.Lower < p.Upper {
		v = math.Min(math.Max(v, p.Lower), p.Upper)
	}
	return v
}

func orNaN(v metrics.Float, ok bool) float64 {
	if !ok {
		return math.NaN()
	}
	return float64(v)
}
