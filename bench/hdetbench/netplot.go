package main

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// netColors are the rows' colours, in the order of netSettings.configs.
var netColors = []color.Color{
	color.RGBA{A: 255},
	color.RGBA{R: 214, G: 39, B: 40, A: 255},
	color.RGBA{R: 31, G: 119, B: 180, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255},
	color.RGBA{R: 148, G: 103, B: 189, A: 255},
	color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 140, G: 86, B: 75, A: 255},
}

// plotNet draws test accuracy against training wall time, one panel per
// link, one line per row; a grey dashed line marks the target.
func plotNet(path string, s netSettings, res []netResult) error {
	panels := make([][]*plot.Plot, len(s.Links))
	for i, l := range s.Links {
		p, err := netPanel(s, l, res)
		if err != nil {
			return err
		}
		panels[i] = []*plot.Plot{p}
	}
	w, h := 8*vg.Inch, vg.Length(len(s.Links))*3.4*vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(s.Links), Cols: 1, PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadY: 3 * vg.Millimeter}
	for i, row := range plot.Align(panels, tiles, dc) {
		panels[i][0].Draw(row[0])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot: %w", err)
	}
	return f.Close()
}

// netPanel is one link's accuracy against time.
func netPanel(s netSettings, l netLink, res []netResult) (*plot.Plot, error) {
	p := plot.New()
	name := l.Name
	if netDelayMissing(l, res) {
		name += " (delay not applied)"
	}
	p.Title.Text = fmt.Sprintf("%s: test accuracy against training wall time (%d hosts x %d ranks, MNIST MLP)", name, s.Hosts, s.Slots)
	p.X.Label.Text = "wall seconds from the run's start, evaluations taken out (HDET: the search pass included)"
	p.Y.Label.Text = "test accuracy (%)"
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.XOffs = -vg.Millimeter
	lo, xmax := 100.0, 0.0
	for i, c := range s.configs() {
		var xy plotter.XYs
		for _, r := range res {
			if r.Link != l || r.Config != c || r.Failed != "" {
				continue
			}
			for _, pt := range r.Curve {
				xy = append(xy, plotter.XY{X: pt.Seconds, Y: 100 * pt.Accuracy})
				lo, xmax = min(lo, 100*pt.Accuracy), max(xmax, pt.Seconds)
			}
		}
		if len(xy) == 0 {
			continue
		}
		line, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, fmt.Errorf("plot: %w", err)
		}
		col := netColors[i%len(netColors)]
		line.Color, pts.Color = col, col
		pts.Shape, pts.Radius = draw.CircleGlyph{}, vg.Points(2.5)
		p.Add(line, pts)
		p.Legend.Add(c.Label, line, pts)
	}
	target := plotter.XYs{{X: 0, Y: 100 * s.Target}, {X: max(xmax, 1), Y: 100 * s.Target}}
	tl, err := plotter.NewLine(target)
	if err != nil {
		return nil, fmt.Errorf("plot: %w", err)
	}
	tl.Color, tl.Dashes = color.Gray{Y: 128}, []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(tl)
	p.Legend.Add(fmt.Sprintf("target %s%%", num(100*s.Target, 1)), tl)
	p.X.Min = 0
	p.Y.Min, p.Y.Max = max(lo-0.5, 80), 100
	return p, nil
}
