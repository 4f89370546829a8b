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
func windowSteps(r *Run) []float64 {
	xs := make([]float64, len(r.Windows))
	for i, w := range r.Windows {
		xs[i] = float64(w.Step)
	}
	return xs
}

// column extracts one value per window; missing values are NaN.
func column(r *Run, f func(metrics.Record) (metrics.Float, bool)) []float64 {
	ys := make([]float64, len(r.Windows))
	for i, w := range r.Windows {
		ys[i] = math.NaN()
		if v, ok := f(w); ok {
			ys[i] = float64(v)
		}
	}
	return ys
}

// evalSeries is one evaluation metric at the steps that have an
// evaluation; windows without one are skipped, not gaps, so the points join.
func evalSeries(r *Run, f func(metrics.Eval) metrics.Float) (xs, ys []float64) {
	for _, e := range r.Evals() {
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
	xs := windowSteps(r)
	cols := rankColors(r.Ranks)
	legend := func(rank int) string {
		if r.Ranks <= maxLegendRanks {
			return fmt.Sprintf("rank %d", rank)
		}
		return ""
	}

	for _, p := range r.Params {
		logY := p.Scale == "log"
		c := newChart(p.Name+": value per rank and base", "step", p.Name, logY)
		for rank := range r.Ranks {
			ys := column(r, func(w metrics.Record) (metrics.Float, bool) { return at(w.Values[p.Name], rank) })
			if err := c.series(xs, ys, cols[rank], vg.Points(0.8), vg.Points(1.8), false, legend(rank)); err != nil {
				return nil, err
			}
		}
		base := column(r, func(w metrics.Record) (metrics.Float, bool) { v, ok := w.Base[p.Name]; return v, ok })
		if err := c.series(xs, base, black, vg.Points(2.5), 0, false, "base"); err != nil {
			return nil, err
		}
		caption := fmt.Sprintf("%s: the value each rank used at the last step of each window, and the base (bold)", p.Name)
		if logY {
			caption += "; log axis"
		}
		if err := add(c, "hparam-"+fileStem(p.Name), caption); err != nil {
			return nil, err
		}
	}

	if err := plotOffsets(r, xs, add); err != nil {
		return nil, err
	}
	if err := plotLoss(r, xs, cols, legend, add); err != nil {
		return nil, err
	}
	if err := plotWeights(r, dir, &figs); err != nil {
		return nil, err
	}

	c := newChart("seconds per window", "step", "seconds", false)
	fan := column(r, func(w metrics.Record) (metrics.Float, bool) { return metrics.Float(w.FanoutSeconds), true })
	conv := column(r, func(w metrics.Record) (metrics.Float, bool) { return metrics.Float(w.ConvergeSeconds), true })
	if err := c.series(xs, fan, color.RGBA{R: 31, G: 119, B: 180, A: 255}, vg.Points(1.5), vg.Points(2), false, "fan-out (training)"); err != nil {
		return nil, err
	}
	if err := c.series(xs, conv, color.RGBA{R: 214, G: 39, B: 40, A: 255}, vg.Points(1.5), vg.Points(2), false, "converge (all-reduce)"); err != nil {
		return nil, err
	}
	plan := column(r, func(w metrics.Record) (metrics.Float, bool) { return metrics.Float(w.PlanSeconds), true })
	if err := c.series(xs, plan, color.RGBA{R: 44, G: 160, B: 44, A: 255}, vg.Points(1.5), vg.Points(2), false, "plan (controller + broadcast)"); err != nil {
		return nil, err
	}
	if err := add(c, "timing", "Fan-out (training), converge (parameter averaging) and plan (rank 0's controller and the plan broadcast) seconds per window"); err != nil {
		return nil, err
	}
	return figs, nil
}

func plotLoss(r *Run, xs []float64, cols []color.Color, legend func(int) string, add func(*chart, string, string) error) error {
	ranks := make([][]float64, r.Ranks)
	sp := newSpan()
	for rank := range r.Ranks {
		ranks[rank] = column(r, func(w metrics.Record) (metrics.Float, bool) { return at(w.Losses, rank) })
		sp.add(ranks[rank]...)
	}
	c := newChart("window loss", "step", "loss", sp.wide())
	for rank := range r.Ranks {
		if err := c.series(xs, ranks[rank], cols[rank], vg.Points(0.8), vg.Points(1.5), false, legend(rank)); err != nil {
			return err
		}
	}
	mean := make([]float64, len(r.Windows))
	for i, w := range r.Windows {
		mean[i] = MeanLoss(w)
	}
	if err := c.series(xs, mean, black, vg.Points(2.5), 0, false, "mean (healthy ranks)"); err != nil {
		return err
	}
	tx, test := evalSeries(r, func(e metrics.Eval) metrics.Float { return e.Loss })
	if err := c.series(tx, test, black, vg.Points(1.5), vg.Points(2.5), true, "test loss"); err != nil {
		return err
	}
	if err := add(c, "loss", "Mean training loss of each rank over each window, their mean over healthy ranks (bold) and the test loss (dashed)"); err != nil {
		return err
	}

	ax, acc := evalSeries(r, func(e metrics.Eval) metrics.Float { return e.Accuracy })
	c = newChart("test accuracy", "step", "accuracy", false)
	if err := c.series(ax, acc, black, vg.Points(1.5), vg.Points(2.5), false, ""); err != nil {
		return err
	}
	return add(c, "accuracy", "Test-set accuracy at each evaluation")
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
	if r.Ranks == 0 || len(r.Windows) == 0 {
		return nil
	}
	type named struct {
		name string
		g    weightGrid
	}
	var grids []named
	for _, p := range r.Params {
		g := weightGrid{z: make([][]float64, len(r.Windows))}
		has := false
		for i, w := range r.Windows {
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
		*figs = append(*figs, Figure{Name: name, Caption: caption + "; windows before the auto phase are grey"})
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
