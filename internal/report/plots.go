package report

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/hdet-dev/hdet/internal/atomicfile"
	"github.com/hdet-dev/hdet/internal/metrics"
)

// Figure is one plot written as Name.png and Name.svg.
type Figure struct {
	Name    string // file stem
	Caption string
}

const figW, figH = 8 * vg.Inch, 4.5 * vg.Inch

// maxLegendRanks is the most ranks that get a legend entry each; beyond it
// the legend would cover the plot.
const maxLegendRanks = 8

// chart wraps a plot with the bookkeeping the report needs: whether the Y
// axis is logarithmic (points that cannot be drawn on it are dropped) and
// the data range, which a log axis needs to be set by hand.
type chart struct {
	p          *plot.Plot
	legend     plot.Legend // drawn beside the plot, not over the data
	entries    int
	logY       bool
	points     int
	ymin, ymax float64
	markLine   *vline // see mark
	markLabel  string
}

func newChart(title, xlabel, ylabel string, logY bool) *chart {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
	}
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	return &chart{p: p, legend: legend, logY: logY, ymin: math.Inf(1), ymax: math.Inf(-1)}
}

// segments splits (xs, ys) where a point cannot be drawn (NaN, ±Inf, or not
// positive on a log axis), so a diverged window leaves a gap in the line.
func (c *chart) segments(xs, ys []float64) []plotter.XYs {
	var segs []plotter.XYs
	var cur plotter.XYs
	for i := range xs {
		y := ys[i]
		if !finite(y) || (c.logY && y <= 0) {
			if len(cur) > 0 {
				segs = append(segs, cur)
				cur = nil
			}
			continue
		}
		cur = append(cur, plotter.XY{X: xs[i], Y: y})
	}
	if len(cur) > 0 {
		segs = append(segs, cur)
	}
	return segs
}

// series adds one curve; a glyph radius of 0 draws no points. label, when
// not empty, becomes a legend entry.
func (c *chart) series(xs, ys []float64, col color.Color, width, glyph vg.Length, dashed bool, label string) error {
	for i, seg := range c.segments(xs, ys) {
		line, points, err := plotter.NewLinePoints(seg)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		line.Color = col
		line.Width = width
		if dashed {
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		points.Color = col
		points.Radius = glyph
		points.Shape = draw.CircleGlyph{}
		if len(seg) == 1 && glyph == 0 { // a lone point of a bare line would not show
			points.Radius = width
		}
		c.p.Add(line, points)
		if i == 0 && label != "" {
			c.legend.Add(label, line, points)
			c.entries++
		}
		for _, pt := range seg {
			c.ymin, c.ymax = math.Min(c.ymin, pt.Y), math.Max(c.ymax, pt.Y)
		}
		c.points += len(seg)
	}
	return nil
}

// save writes the chart as dir/name.png and dir/name.svg. A chart with
// nothing to draw is not written and reports false.
func (c *chart) save(dir, name string) (bool, error) {
	if c.points == 0 {
		return false, nil
	}
	if c.logY {
		// plot's automatic range breaks on a log axis when all values are
		// equal (it pads to min-1, which may be ≤ 0).
		lo, hi := c.ymin, c.ymax
		if lo == hi {
			lo, hi = lo/2, hi*2
		}
		pad := math.Pow(hi/lo, 0.05)
		c.p.Y.Min, c.p.Y.Max = lo/pad, hi*pad
	}
	if c.markLine != nil {
		c.legend.Add(c.markLabel, c.markLine)
		c.entries++
	}
	var legend *plot.Legend
	if c.entries > 0 {
		legend = &c.legend
	}
	return true, savePlot(c.p, legend, dir, name)
}

// savePlot writes p, with legend (if not nil) in a column on its right, as
// dir/name.png and dir/name.svg.
func savePlot(p *plot.Plot, legend *plot.Legend, dir, name string) error {
	for _, format := range []string{"png", "svg"} {
		cw, err := draw.NewFormattedCanvas(figW, figH, format)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		dc := draw.New(cw)
		if legend == nil {
			p.Draw(dc)
		} else {
			pad := vg.Points(8)
			w := legend.Rectangle(dc).Size().X + 2*pad
			p.Draw(draw.Crop(dc, 0, -w, 0, 0))
			legend.Draw(draw.Crop(dc, figW-w+pad, 0, 0, -3*pad))
		}
		if err := atomicfile.WriteFunc(filepath.Join(dir, name+"."+format), func(f io.Writer) error {
			if _, err := cw.WriteTo(f); err != nil {
				return fmt.Errorf("report: write %s.%s: %w", name, format, err)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// logTicks labels powers of ten and, over a narrow range, 2× and 5×
// multiples; plot.LogTicks leaves a range within one decade unlabelled.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	eLo, eHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	narrow := eHi-eLo <= 2
	var ticks []plot.Tick
	labelled := 0
	for e := eLo; e <= eHi; e++ {
		for m := 1.0; m < 10; m++ {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || (narrow && (m == 2 || m == 5)) {
				t.Label = tickLabel(v)
				labelled++
			}
			ticks = append(ticks, t)
		}
	}
	if labelled < 2 {
		ticks = append(ticks, plot.Tick{Value: lo, Label: tickLabel(lo)}, plot.Tick{Value: hi, Label: tickLabel(hi)})
	}
	return ticks
}

func tickLabel(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) }

// rankColors gives each rank its own hue.
func rankColors(n int) []color.Color {
	if n <= 0 {
		return nil
	}
	return palette.Rainbow(n, palette.Blue, palette.Red, 0.9, 0.85, 1).Colors()
}

var black = color.Black

// fileStem turns a hyperparameter name into a safe file name part.
func fileStem(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, name)
}

// windowSteps is the x coordinate of every window: the step at its end.
func windowSteps(ws []metrics.WindowRecord) []float64 {
	xs := make([]float64, len(ws))
	for i, w := range ws {
		xs[i] = float64(w.Step)
	}
	return xs
}

// column extracts one value per window; missing values are NaN.
func column(ws []metrics.WindowRecord, f func(metrics.WindowRecord) (metrics.Float, bool)) []float64 {
	ys := make([]float64, len(ws))
	for i, w := range ws {
		ys[i] = math.NaN()
		if v, ok := f(w); ok {
			ys[i] = float64(v)
		}
	}
	return ys
}

// means is each window's mean loss over its healthy ranks.
func means(ws []metrics.WindowRecord) []float64 {
	ys := make([]float64, len(ws))
	for i, w := range ws {
		ys[i] = MeanLoss(w)
	}
	return ys
}

// evalSeries is one evaluation metric at the steps that have an
// evaluation; windows without one are skipped, not gaps, so the points join.
func evalSeries(evs []EvalAt, f func(metrics.Eval) metrics.Float) (xs, ys []float64) {
	for _, e := range evs {
		xs = append(xs, float64(e.Step))
		ys = append(ys, float64(f(e.Eval)))
	}
	return xs, ys
}

func at(vs []metrics.Float, i int) (metrics.Float, bool) {
	if i < len(vs) {
		return vs[i], true
	}
	return 0, false
}

// addFunc saves a chart as a figure of the report.
type addFunc func(c *chart, name, caption string) error

// plotRun writes every figure of one run into dir.
func plotRun(r *Run, dir string) ([]Figure, error) {
	var figs []Figure
	add := func(c *chart, name, caption string) error {
		ok, err := c.save(dir, name)
		if ok {
			figs = append(figs, Figure{Name: name, Caption: caption})
		}
		return err
	}
	cols := rankColors(r.Ranks)
	for _, p := range r.Params {
		if err := plotParam(r, p, cols, add); err != nil {
			return nil, err
		}
	}
	if err := plotOffsets(r, add); err != nil {
		return nil, err
	}
	if err := plotLoss(r, cols, add); err != nil {
		return nil, err
	}
	if err := plotAccuracy(r, add); err != nil {
		return nil, err
	}
	if err := plotWeights(r, dir, &figs); err != nil {
		return nil, err
	}
	if err := plotTiming(r, add); err != nil {
		return nil, err
	}
	return figs, nil
}

// plotTiming draws the seconds of every window of both passes, in the
// order they ran: the x axis counts the steps trained, the search pass's
// and then the main pass's.
func plotTiming(r *Run, add addFunc) error {
	xs := make([]float64, len(r.Windows))
	for i, w := range r.Windows {
		xs[i] = float64(w.Step)
		if w.Pass == passMain {
			xs[i] += float64(r.SearchSteps())
		}
	}
	xlabel := "step"
	if r.TwoPass() {
		xlabel = "steps trained (the search pass, then the main pass)"
	}
	c := newChart("seconds per window", xlabel, "seconds", false)
	if r.TwoPass() {
		c.mark(float64(r.SearchSteps()), "commit: the main pass starts")
	}
	for _, s := range []struct {
		f     func(metrics.WindowRecord) float64
		col   color.Color
		label string
	}{
		{func(w metrics.WindowRecord) float64 { return w.FanoutSeconds }, color.RGBA{R: 31, G: 119, B: 180, A: 255}, "fan-out (training)"},
		{func(w metrics.WindowRecord) float64 { return w.ConvergeSeconds }, color.RGBA{R: 214, G: 39, B: 40, A: 255}, "converge (all-reduce)"},
		{func(w metrics.WindowRecord) float64 { return w.PlanSeconds }, color.RGBA{R: 44, G: 160, B: 44, A: 255}, "plan (controller + broadcast)"},
	} {
		ys := column(r.Windows, func(w metrics.WindowRecord) (metrics.Float, bool) { return metrics.Float(s.f(w)), true })
		if err := c.series(xs, ys, s.col, vg.Points(1.5), vg.Points(2), false, s.label); err != nil {
			return err
		}
	}
	caption := "Fan-out (training), converge (parameter averaging) and plan (rank 0's controller and the plan broadcast) seconds per window"
	if r.TwoPass() {
		caption += ", the search pass's windows, then the main pass's (after the grey dotted line)"
	}
	return add(c, "timing", caption)
}

// plotLoss draws each rank's window loss and their mean, and the test
// loss; for a run that committed, those of the search pass and then the
// main pass's mean and test loss over the same steps.
func plotLoss(r *Run, cols []color.Color, add addFunc) error {
	search, main := r.pass(passSearch), r.pass(passMain)
	ranks := make([][]float64, r.Ranks)
	sp := newSpan()
	for rank := range r.Ranks {
		ranks[rank] = column(search, func(w metrics.WindowRecord) (metrics.Float, bool) { return at(w.Losses, rank) })
		sp.add(ranks[rank]...)
	}
	mainMean := means(main)
	sp.add(mainMean...)
	c := newChart("window loss", stepLabel(r), "loss", sp.wide())
	if r.TwoPass() {
		markCommit(c, r)
	}
	xs := windowSteps(search)
	for rank := range r.Ranks {
		if err := c.series(xs, ranks[rank], cols[rank], vg.Points(0.8), vg.Points(1.5), false, rankLabel(r, rank)); err != nil {
			return err
		}
	}
	mean := "mean (healthy ranks)"
	if r.TwoPass() {
		mean = "mean (search)" // the caption says of which ranks
	}
	if err := c.series(xs, means(search), black, meanWidth(r), 0, false, mean); err != nil {
		return err
	}
	if err := c.series(windowSteps(main), mainMean, mainColor, vg.Points(2.5), 0, false, "mean (main pass)"); err != nil {
		return err
	}
	for _, pass := range []int{passSearch, passMain} {
		tx, test := evalSeries(r.passEvals(pass), func(e metrics.Eval) metrics.Float { return e.Loss })
		if err := c.series(tx, test, passColor(pass), vg.Points(1.5), vg.Points(2.5), true, passLabel(r, "test loss", pass)); err != nil {
			return err
		}
	}
	caption := "Mean training loss of each rank over each window, their mean over healthy ranks (bold) and the test loss (dashed)"
	if r.TwoPass() {
		caption = "Search pass: mean training loss of each rank over each window, their mean over healthy ranks (black) and the test loss (dashed). " +
			"Main pass, from step 0 again at the committed values: the mean over healthy ranks (bold purple) and the test loss (dashed purple). " + commitNote(r)
	}
	return add(c, "loss", caption)
}

// plotAccuracy draws the test accuracy of each pass.
func plotAccuracy(r *Run, add addFunc) error {
	c := newChart("test accuracy", stepLabel(r), "accuracy", false)
	if r.TwoPass() {
		markCommit(c, r)
	}
	for _, pass := range []int{passSearch, passMain} {
		ax, acc := evalSeries(r.passEvals(pass), func(e metrics.Eval) metrics.Float { return e.Accuracy })
		label := ""
		if r.TwoPass() {
			label = passName(pass) + " pass"
		}
		if err := c.series(ax, acc, passColor(pass), vg.Points(1.5), vg.Points(2.5), false, label); err != nil {
			return err
		}
	}
	if c.points > 0 && c.ymax <= 1 {
		// An accuracy is at most 1; a lone evaluation (eval_every 0) would
		// get an axis from about -1 to 2.
		c.p.Y.Min, c.p.Y.Max = math.Max(0, c.ymin-0.05), 1
	}
	caption := "Test-set accuracy at each evaluation"
	if r.TwoPass() {
		caption += ": the search pass's (black) and the main pass's (purple). " + commitNote(r)
	}
	return add(c, "accuracy", caption)
}

// span is the range of the finite values added to it.
type span struct{ lo, hi float64 }

func newSpan() *span { return &span{lo: math.Inf(1), hi: math.Inf(-1)} }

func (s *span) add(vs ...float64) {
	for _, v := range vs {
		if finite(v) {
			s.lo, s.hi = math.Min(s.lo, v), math.Max(s.hi, v)
		}
	}
}

// wide says a loss plot needs a log axis: a replica that blew up can dwarf
// the others, so when all values are positive and span more than two
// decades a log axis keeps them readable.
func (s *span) wide() bool { return s.lo > 0 && s.hi/s.lo > 100 }

// weightGrid is ranks × windows of softmax weights for plotter.HeatMap.
type weightGrid struct {
	z [][]float64 // [window][rank]
}

func (g weightGrid) Dims() (c, r int)   { return len(g.z), len(g.z[0]) }
func (g weightGrid) Z(c, r int) float64 { return g.z[c][r] }
func (g weightGrid) X(c int) float64    { return float64(c) }
func (g weightGrid) Y(r int) float64    { return float64(r) }
func (g weightGrid) equal(o weightGrid) bool {
	for c := range g.z {
		for r := range g.z[c] {
			a, b := g.z[c][r], o.z[c][r]
			if a != b && !(math.IsNaN(a) && math.IsNaN(b)) {
				return false
			}
		}
	}
	return true
}

// plotWeights draws one heat map per hyperparameter with softmax weights,
// or a single one when every hyperparameter got the same weights (they all
// come from the same losses unless explorers use different sigmas).
func plotWeights(r *Run, dir string, figs *[]Figure) error {
	search := r.pass(passSearch) // the main pass has no spread, so no weights
	if r.Ranks == 0 || len(search) == 0 {
		return nil
	}
	type named struct {
		name string
		g    weightGrid
	}
	var grids []named
	for _, p := range r.Params {
		g := weightGrid{z: make([][]float64, len(search))}
		has := false
		for i, w := range search {
			g.z[i] = make([]float64, r.Ranks)
			for rank := range r.Ranks {
				g.z[i][rank] = math.NaN()
				if v, ok := at(w.Weights[p.Name], rank); ok {
					g.z[i][rank] = float64(v)
					has = has || finite(float64(v))
				}
			}
		}
		if has {
			grids = append(grids, named{p.Name, g})
		}
	}
	same := len(grids) > 1
	for _, n := range grids[min(1, len(grids)):] {
		same = same && n.g.equal(grids[0].g)
	}
	if same {
		grids = []named{{"", grids[0].g}}
	}
	for _, n := range grids {
		title, name, caption := "softmax weights", "weights", "Softmax weight of each rank per window (all hyperparameters)"
		if n.name != "" {
			title += ": " + n.name
			caption = "Softmax weight of each rank per window for " + n.name
			if len(grids) > 1 {
				name += "-" + fileStem(n.name)
			}
		}
		p, lo, hi := heatMap(n.g, r.Ranks)
		p.Title.Text = fmt.Sprintf("%s (dark %.3g … bright %.3g, grey: no meta-update)", title, lo, hi)
		if err := savePlot(p, nil, dir, name); err != nil {
			return err
		}
		caption += "; windows before the auto phase are grey"
		if r.TwoPass() {
			caption += ". The search pass's windows: the main pass has no spread, so no weights"
		}
		*figs = append(*figs, Figure{Name: name, Caption: caption})
	}
	return nil
}

func heatMap(g weightGrid, ranks int) (p *plot.Plot, lo, hi float64) {
	sp := newSpan()
	for _, col := range g.z {
		sp.add(col...)
	}
	lo, hi = sp.lo, sp.hi
	if lo == hi { // equal weights everywhere: give the palette a range
		lo, hi = lo-0.01, hi+0.01
	}
	h := plotter.NewHeatMap(g, moreland.Kindlmann().Palette(64))
	h.Min, h.Max = lo, hi
	h.NaN = color.Gray{Y: 200}
	p = plot.New()
	p.X.Label.Text = "window"
	p.Y.Label.Text = "rank"
	p.Add(h)
	if ranks <= 32 {
		ticks := make([]plot.Tick, ranks)
		for i := range ticks {
			ticks[i] = plot.Tick{Value: float64(i), Label: strconv.Itoa(i)}
		}
		p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	}
	return p, lo, hi
}
