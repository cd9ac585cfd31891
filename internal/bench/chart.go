package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// chartPanel is one expiry's lateness distributions, one line per strategy.
type chartPanel struct {
	title  string
	series []chartSeries
}

type chartSeries struct {
	name string
	late []time.Duration
}

// cdfPoints is the empirical CDF of late in milliseconds, sampled at 400
// quantiles so the SVG stays small whatever the number of orders.
func cdfPoints(late []time.Duration) plotter.XYs {
	s := slices.Clone(late)
	slices.Sort(s)
	const n = 400
	pts := make(plotter.XYs, 0, n+1)
	for i := 0; i <= n; i++ {
		j := min(len(s)-1, i*len(s)/n)
		pts = append(pts, plotter.XY{X: float64(s[j]) / float64(time.Millisecond), Y: float64(j+1) / float64(len(s))})
	}
	return pts
}

// writeLatenessChart draws the panels side by side into an SVG file (a PNG
// if path ends in .png).
func writeLatenessChart(path string, panels []chartPanel) error {
	plots := make([][]*plot.Plot, 1)
	for _, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "late after expire_at (ms)"
		p.Y.Label.Text = "share of orders cancelled"
		p.Y.Min, p.Y.Max = 0, 1
		p.Legend.Left, p.Legend.Top = false, false
		p.Add(plotter.NewGrid())
		for i, s := range pn.series {
			if len(s.late) == 0 {
				continue
			}
			l, err := plotter.NewLine(cdfPoints(s.late))
			if err != nil {
				return fmt.Errorf("chart %s: %w", s.name, err)
			}
			l.Color = plotutil.Color(i)
			l.Dashes = plotutil.Dashes(i)
			l.Width = vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(s.name, l)
		}
		plots[0] = append(plots[0], p)
	}
	w, h := vg.Length(len(panels))*5*vg.Inch, 3.6*vg.Inch
	var c interface {
		vg.CanvasSizer
		io.WriterTo
	}
	if strings.HasSuffix(path, ".png") {
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))}
	} else {
		c = vgsvg.New(w, h)
	}
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, tiles, draw.New(c))
	for i, p := range plots[0] {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("chart: %w", err)
	}
	return f.Close()
}
