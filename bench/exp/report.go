package exp

import (
	"fmt"
	"image/color"
	"strings"

	"github.com/wanopt/wanopt/bench/report"
)

// Published reference points for plain TCP in the reproduced test (the
// 200-250 ms range drawn at its middle).
var publishedPlainTCP = []report.XY{{X: 0, Y: 248}, {X: 200, Y: 61}, {X: 250, Y: 61}}

// Markdown renders the baseline as a markdown table.
func (r BaselineResult) Markdown() string {
	t := report.NewTable(report.Num("RTT ms"), report.Text("cc"), report.Text("profile"), report.Num("Mbit/s"), report.Num("seconds"), report.Text("runs (Mbit/s)"))
	for _, row := range r.Rows {
		runs := make([]string, len(row.Runs))
		for i, x := range row.Runs {
			runs[i] = fmt.Sprintf("%.0f", x.Mbps)
		}
		t.Addf("%.0f | %s | %s | %.1f | %.2f | %s", row.RTTms, row.CC, row.Profile, row.Mbps, row.Seconds, strings.Join(runs, " "))
	}
	return t.Markdown()
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
	return report.Write(dir, "baseline", r, r.Markdown(), r.Chart())
}

// Chart draws throughput against RTT per congestion control and profile,
// with the published plain-TCP figures.
func (r BaselineResult) Chart() *report.Chart {
	p := report.Panel{
		Title:  fmt.Sprintf("Plain TCP over a %.0f Mbit/s link: iperf -P %d -R, %d MiB per stream", r.RateMbps, r.Streams, r.BytesPerStream>>20),
		XLabel: "RTT (ms)", YLabel: "throughput (Mbit/s)",
		XMin: -10, XMax: 260, YMin: 0, YMax: r.RateMbps * 1.05, XStep: 50, YStep: 50, LegendLeft: true,
	}
	series := map[string][]report.XY{}
	var order []string
	for _, row := range r.Rows {
		k := row.CC + " (" + row.Profile + ")"
		if _, ok := series[k]; !ok {
			order = append(order, k)
		}
		series[k] = append(series[k], report.XY{X: row.RTTms, Y: row.Mbps})
	}
	for i, k := range order {
		p.Series = append(p.Series, report.Series{Name: "measured, " + k, Points: series[k], Color: palette[i%len(palette)]})
	}
	p.Series = append(p.Series, publishedSeries("published plain TCP", publishedPlainTCP, report.Cross))
	return &report.Chart{Panels: []report.Panel{p}, Width: 8, Height: 5}
}

// palette colours a chart's series in turn.
var palette = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255}, color.RGBA{R: 148, G: 103, B: 189, A: 255},
}

// profileColors colour the endpoint profiles alike in every chart.
var profileColors = map[string]color.Color{
	"modern": color.RGBA{R: 31, G: 119, B: 180, A: 255},
	"legacy": color.RGBA{R: 214, G: 39, B: 40, A: 255},
}

// publishedSeries marks published reference figures.
func publishedSeries(name string, xys []report.XY, g report.Glyph) report.Series {
	return report.Series{Name: name, Points: xys, Kind: report.Points, Glyph: g, Radius: 5, Color: color.Black}
}
