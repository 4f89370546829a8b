package main

import (
	"fmt"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// series is one set of points of the sweep plot.
type series struct {
	Label string
	LR    []float64 // starting max_lr
	Loss  []float64 // final test loss; non-finite points are left out
}

func (s series) xys() plotter.XYs {
	var xy plotter.XYs
	for i := range s.LR {
		if l := s.Loss[i]; !math.IsNaN(l) && !math.IsInf(l, 0) && l > 0 && s.LR[i] > 0 {
			xy = append(xy, plotter.XY{X: s.LR[i], Y: l})
		}
	}
	return xy
}

// plotSweep draws final test loss against the starting learning rate, both
// axes logarithmic: the sweep as a line with dots, each further series
// (HDET runs) as markers only.
func plotSweep(path, title string, sweep series, others ...series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "starting max_lr (OneCycle peak)"
	p.Y.Label.Text = "final loss (the title says which)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = ticks125{}, ticks125{}
	p.Add(plotter.NewGrid())
	// The legend goes in headroom above the data (see below): a sweep is
	// U-shaped, and its corners hold the runs from the extreme starts.
	p.Legend.Top, p.Legend.Left = true, true

	xy := sweep.xys()
	if len(xy) == 0 {
		return fmt.Errorf("plot: the sweep has no finite point")
	}
	line, pts, err := plotter.NewLinePoints(xy)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	black := color.RGBA{A: 255}
	line.Color, pts.Color = black, black
	pts.Shape = draw.CircleGlyph{}
	pts.Radius = vg.Points(3)
	p.Add(line, pts)
	p.Legend.Add(sweep.Label, line, pts)

	cols := []color.Color{
		color.RGBA{R: 214, G: 39, B: 40, A: 255},
		color.RGBA{R: 31, G: 119, B: 180, A: 255},
		color.RGBA{R: 44, G: 160, B: 44, A: 255},
	}
	shapes := []draw.GlyphDrawer{draw.TriangleGlyph{}, draw.SquareGlyph{}, draw.PyramidGlyph{}}
	for i, s := range others {
		xy := s.xys()
		if len(xy) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(xy)
		if err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		sc.Color = cols[i%len(cols)]
		sc.Shape = shapes[i%len(shapes)]
		sc.Radius = vg.Points(5)
		p.Add(sc)
		p.Legend.Add(s.Label, sc)
	}
	// Room above the highest point for the legend, and beside the outermost
	// starts so that their markers are not cut in half.
	p.X.Min, p.X.Max = p.X.Min/1.3, p.X.Max*1.3
	p.Y.Min, p.Y.Max = p.Y.Min/1.1, p.Y.Max*math.Pow(p.Y.Max/p.Y.Min, 0.6)
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// ticks125 labels 1, 2 and 5 times the powers of ten on a log axis;
// plot.LogTicks labels only the powers, which leaves a loss axis that spans
// less than two decades nearly bare.
type ticks125 struct{}

func (ticks125) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for m := 1.0; m < 10; m++ {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', 3, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}
