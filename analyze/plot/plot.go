// Package plot draws the charts of an analysed flow with gonum/plot: the
// advertised receive window against the bytes in flight (the window-scaling
// picture), and goodput against the rate put on the wire, over time.
package plot

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/wanopt/wanopt/analyze"
)

// ErrFormat is returned (wrapped) for an image format other than png or svg.
var ErrFormat = errors.New("unsupported plot format")

// FlowFile writes the chart of flow f's main direction (the verdict's) into
// dir as flow<ID>.<format> and returns the file's path. format is "png" or
// "svg". The directory is created if needed.
func FlowFile(dir, format string, f *analyze.FlowReport) (string, error) {
	if format != "png" && format != "svg" {
		return "", fmt.Errorf("%w %q: use png or svg", ErrFormat, format)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create plot directory: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("flow%d.%s", f.ID, format))
	out, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("create plot file: %w", err)
	}
	if err := Flow(out, format, f); err != nil {
		out.Close()
		return "", err
	}
	if err := out.Close(); err != nil {
		return "", fmt.Errorf("write plot file %s: %w", path, err)
	}
	return path, nil
}

// Flow draws the chart of flow f's main direction to w in the given format.
func Flow(w io.Writer, format string, f *analyze.FlowReport) error {
	d := &f.Dirs[f.Verdict.Direction]
	win, infl, good, sent := plotter.XYs{}, plotter.XYs{}, plotter.XYs{}, plotter.XYs{}
	for _, p := range d.Series {
		if p.Window >= 0 {
			win = append(win, plotter.XY{X: p.T, Y: float64(p.MinWindow) / 1024})
		}
		infl = append(infl, plotter.XY{X: p.T, Y: float64(p.InFlight) / 1024})
	}
	// Rates per slice swing with every round trip: average them over at
	// least one RTT (and 50 ms) so the plateau is visible.
	k := 1
	if n := len(d.Series); n > 1 {
		width := d.Series[1].T - d.Series[0].T
		span := max(f.Verdict.RTTms/1e3, 0.05)
		k = max(int(math.Ceil(span/width)), 1)
	}
	for i := 0; i < len(d.Series); i += k {
		var g, s float64
		j := i
		for ; j < min(i+k, len(d.Series)); j++ {
			g += d.Series[j].Mbps
			s += d.Series[j].SentMbps
		}
		n := float64(j - i)
		good = append(good, plotter.XY{X: d.Series[i].T, Y: g / n})
		sent = append(sent, plotter.XY{X: d.Series[i].T, Y: s / n})
	}

	top := plot.New()
	top.Title.Text = fmt.Sprintf("flow %d %s → %s — verdict: %s", f.ID, d.From, d.To, f.Verdict.Name)
	top.Y.Label.Text = "KiB"
	top.Y.Min = 0
	top.Legend.Top = true
	if err := addLines(top, []string{"receive window (advertised)", "bytes in flight"}, win, infl); err != nil {
		return err
	}
	top.Y.Max *= 1.15 // room for the legend
	bot := plot.New()
	bot.X.Label.Text = "time since first packet (s)"
	bot.Y.Label.Text = "Mbit/s (averaged over max(RTT, 50 ms))"
	bot.Y.Min = 0
	bot.Legend.Top = true
	if err := addLines(bot, []string{"goodput (acknowledged)", "sent (incl. retransmissions)"}, good, sent); err != nil {
		return err
	}
	bot.Y.Max *= 1.15

	width, height := 9*vg.Inch, 7*vg.Inch
	var c draw.Canvas
	var wt io.WriterTo
	switch format {
	case "png":
		img := vgimg.New(width, height)
		c, wt = draw.New(img), vgimg.PngCanvas{Canvas: img}
	case "svg":
		svg := vgsvg.New(width, height)
		c, wt = draw.New(svg), svg
	default:
		return fmt.Errorf("%w %q: use png or svg", ErrFormat, format)
	}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	plots := [][]*plot.Plot{{top}, {bot}}
	cs := plot.Align(plots, tiles, c)
	top.Draw(cs[0][0])
	bot.Draw(cs[1][0])
	if _, err := wt.WriteTo(w); err != nil {
		return fmt.Errorf("write %s chart: %w", format, err)
	}
	return nil
}

func addLines(p *plot.Plot, names []string, data ...plotter.XYs) error {
	for i, xy := range data {
		if len(xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return fmt.Errorf("plot %s: %w", names[i], err)
		}
		l.Color = plotColor(i)
		if i == 0 {
			l.Width = vg.Points(2)
		}
		p.Add(l)
		p.Legend.Add(names[i], l)
	}
	return nil
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
}

func plotColor(i int) color.Color { return palette[i%len(palette)] }
