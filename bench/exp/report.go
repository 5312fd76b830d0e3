package exp

import (
	"fmt"
	"image/color"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Published reference points for plain TCP in the reproduced test (the
// 200-250 ms range drawn at its middle).
var publishedPlainTCP = plotter.XYs{{X: 0, Y: 248}, {X: 200, Y: 61}, {X: 250, Y: 61}}

// Markdown renders the baseline as a markdown table.
func (r BaselineResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| RTT ms | cc | profile | Mbit/s | seconds | runs (Mbit/s) |\n|---:|---|---|---:|---:|---|\n")
	for _, row := range r.Rows {
		runs := make([]string, len(row.Runs))
		for i, x := range row.Runs {
			runs[i] = fmt.Sprintf("%.0f", x.Mbps)
		}
		fmt.Fprintf(&b, "| %.0f | %s | %s | %.1f | %.2f | %s |\n", row.RTTms, row.CC, row.Profile, row.Mbps, row.Seconds, strings.Join(runs, " "))
	}
	return b.String()
}

// Line is the closing key=value summary: the figure at the first and the
// last RTT for each congestion control and profile.
func (r BaselineResult) Line() string {
	var parts []string
	for _, row := range r.Rows {
		parts = append(parts, fmt.Sprintf("%s_%s_%.0fms_mbps=%.1f", row.CC, row.Profile, row.RTTms, row.Mbps))
	}
	return strings.Join(parts, " ")
}

// WriteFiles writes baseline.json, baseline.md and baseline.png into dir.
func (r BaselineResult) WriteFiles(dir string) error {
	return writeReport(dir, "baseline", r, r.Markdown(), r.chart)
}

func (r BaselineResult) chart(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Plain TCP over a %.0f Mbit/s link: iperf -P %d -R, %d MiB per stream", r.RateMbps, r.Streams, r.BytesPerStream>>20)
	p.X.Label.Text = "RTT (ms)"
	p.Y.Label.Text = "throughput (Mbit/s)"
	p.Y.Min, p.Y.Max = 0, r.RateMbps*1.05
	p.X.Min, p.X.Max = -10, 260
	p.Y.Tick.Marker = stepTicks(50)
	p.X.Tick.Marker = stepTicks(50)
	p.Add(plotter.NewGrid())
	p.Legend.Top = false
	p.Legend.Left = true

	series := map[string]plotter.XYs{}
	var order []string
	for _, row := range r.Rows {
		k := row.CC + " (" + row.Profile + ")"
		if _, ok := series[k]; !ok {
			order = append(order, k)
		}
		series[k] = append(series[k], plotter.XY{X: row.RTTms, Y: row.Mbps})
	}
	palette := []color.Color{
		color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 255, G: 127, B: 14, A: 255},
		color.RGBA{R: 44, G: 160, B: 44, A: 255}, color.RGBA{R: 148, G: 103, B: 189, A: 255},
	}
	for i, k := range order {
		l, s, err := plotter.NewLinePoints(series[k])
		if err != nil {
			return err
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(2)
		s.Color = l.Color
		p.Add(l, s)
		p.Legend.Add("measured, "+k, l, s)
	}
	pub, err := plotter.NewScatter(publishedPlainTCP)
	if err != nil {
		return err
	}
	pub.GlyphStyle.Shape = draw.CrossGlyph{}
	pub.GlyphStyle.Radius = vg.Points(5)
	pub.Color = color.Black
	p.Add(pub)
	p.Legend.Add("published plain TCP", pub)
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
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
