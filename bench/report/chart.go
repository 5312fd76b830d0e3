package report

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// XY is one point of a series.
type XY = plotter.XY

// Kind is how a series is drawn.
type Kind int

const (
	// LinePoints is a line through its points, each marked; a single
	// point still shows.
	LinePoints Kind = iota
	// Line is the line alone.
	Line
	// Points is the points alone, unjoined.
	Points
)

// Glyph is a point's mark.
type Glyph int

const (
	// Ring is gonum's default mark.
	Ring Glyph = iota
	Box
	Cross
	Plus
)

// Series is one legend entry: points, how they are drawn, in what colour.
type Series struct {
	Name   string // legend; empty: none
	Points []XY
	Kind   Kind
	Color  color.Color // nil: black
	// Width is the line's width in points; 0: 2 for LinePoints, gonum's
	// default for Line.
	Width float64
	// Dashes is the line's dash pattern in points; nil: solid.
	Dashes []float64
	Glyph  Glyph
	// Radius is the mark's radius in points; 0: gonum's default.
	Radius float64
}

// Panel is one plot: title, axes, legend place and series, drawn in order
// over a grid.
type Panel struct {
	Title, XLabel, YLabel  string
	XMin, XMax, YMin, YMax float64
	// XStep and YStep, if positive, label the axis every step units.
	XStep, YStep float64
	// LegendTop and LegendLeft place the legend; false: bottom, right.
	LegendTop, LegendLeft bool
	Series                []Series
}

// Chart is one or more panels side by side in a PNG of Width × Height
// inches (Width for each panel).
type Chart struct {
	Panels        []Panel
	Width, Height float64
	// Tiled lays the panels out as padded tiles, even a single one, so a
	// chart of one panel looks like its many-panel versions.
	Tiled bool
}

// Save draws the chart into a PNG file at path.
func (c *Chart) Save(path string) error {
	plots := make([]*plot.Plot, len(c.Panels))
	for i, p := range c.Panels {
		var err error
		if plots[i], err = p.plot(); err != nil {
			return fmt.Errorf("chart %s: %w", path, err)
		}
	}
	w, h := vg.Length(c.Width)*vg.Inch, vg.Length(c.Height)*vg.Inch
	if len(plots) == 1 && !c.Tiled {
		return plots[0].Save(w, h, path)
	}
	img := vgimg.New(vg.Length(len(plots))*w, h)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: 4 * vg.Millimeter, PadTop: 2 * vg.Millimeter,
		PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	cs := plot.Align([][]*plot.Plot{plots}, tiles, draw.New(img))
	for i, p := range plots {
		p.Draw(cs[0][i])
	}
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(fh); err != nil {
		fh.Close()
		return fmt.Errorf("write chart %s: %w", path, err)
	}
	return fh.Close()
}

func (pn Panel) plot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.Title
	p.X.Label.Text, p.Y.Label.Text = pn.XLabel, pn.YLabel
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = pn.XMin, pn.XMax, pn.YMin, pn.YMax
	if pn.XStep > 0 {
		p.X.Tick.Marker = stepTicks(pn.XStep)
	}
	if pn.YStep > 0 {
		p.Y.Tick.Marker = stepTicks(pn.YStep)
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = pn.LegendTop, pn.LegendLeft
	for _, s := range pn.Series {
		ths, err := s.plotters()
		if err != nil {
			return nil, err
		}
		for _, t := range ths {
			p.Add(t.(plot.Plotter))
		}
		if s.Name != "" {
			p.Legend.Add(s.Name, ths...)
		}
	}
	return p, nil
}

// plotters are the series' line and marks.
func (s Series) plotters() ([]plot.Thumbnailer, error) {
	c := s.Color
	if c == nil {
		c = color.Black
	}
	xys := plotter.XYs(s.Points)
	var line *plotter.Line
	var pts *plotter.Scatter
	var err error
	switch s.Kind {
	case LinePoints:
		line, pts, err = plotter.NewLinePoints(xys)
	case Line:
		line, err = plotter.NewLine(xys)
	case Points:
		pts, err = plotter.NewScatter(xys)
	}
	if err != nil {
		return nil, err
	}
	var out []plot.Thumbnailer
	if line != nil {
		line.Color = c
		if s.Width > 0 {
			line.Width = vg.Points(s.Width)
		} else if s.Kind == LinePoints {
			line.Width = vg.Points(2)
		}
		for _, d := range s.Dashes {
			line.Dashes = append(line.Dashes, vg.Points(d))
		}
		out = append(out, line)
	}
	if pts != nil {
		pts.Color = c
		switch s.Glyph {
		case Box:
			pts.Shape = draw.BoxGlyph{}
		case Cross:
			pts.Shape = draw.CrossGlyph{}
		case Plus:
			pts.Shape = draw.PlusGlyph{}
		}
		if s.Radius > 0 {
			pts.Radius = vg.Points(s.Radius)
		}
		out = append(out, pts)
	}
	return out, nil
}

// stepTicks labels an axis every step units.
type stepTicks float64

func (s stepTicks) Ticks(min, max float64) []plot.Tick {
	var t []plot.Tick
	for v := math.Ceil(min/float64(s)) * float64(s); v <= max; v += float64(s) {
		v += 0 // no "-0" label
		t = append(t, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return t
}
