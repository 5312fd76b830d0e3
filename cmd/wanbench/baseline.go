package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/pflag"
	"github.com/wanopt/wanopt/bench/exp"
)

func runBaseline(ctx context.Context, log *slog.Logger, args []string) error {
	fs := pflag.NewFlagSet("baseline", pflag.ContinueOnError)
	quick := fs.Bool("quick", false, "3 runs of -n 25MB per point (a smoke test)")
	runs := fs.Int("runs", 5, "iperf runs per point (highest and lowest dropped)")
	bytesS := fs.String("bytes", "100MB", "iperf -n, per stream")
	rtts := fs.DurationSlice("rtt", nil, "RTTs to test (default 0,50,100,150,200,250ms)")
	ccs := fs.StringSlice("cc", []string{"cubic", "bbr"}, "kernel congestion controls")
	profiles := fs.StringSlice("profile", []string{"modern"}, "endpoint TCP profiles: modern, legacy")
	rateS := fs.String("rate", "250mbit", "link rate")
	out := fs.String("out", "out/baseline", "folder for baseline.json, .md and .png")
	captureDir := fs.String("capture", "", "folder for header captures (pcap) of each point's first run, client and server side, for 'wanopt analyze'")
	replot := fs.String("replot", "", "redraw the table and chart from a baseline.json into --out, without measuring")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *replot != "" {
		js, err := os.ReadFile(*replot)
		if err != nil {
			return err
		}
		var res exp.BaselineResult
		if err := json.Unmarshal(js, &res); err != nil {
			return fmt.Errorf("%s: %w", *replot, err)
		}
		if err := res.WriteFiles(*out); err != nil {
			return err
		}
		fmt.Print(res.Markdown())
		return nil
	}
	o := exp.BaselineOptions{RTTs: *rtts, CCs: *ccs, Runs: *runs, Logger: log, CaptureDir: *captureDir}
	var err error
	if o.BytesPerStream, err = parseBytes(*bytesS); err != nil {
		return err
	}
	if *quick {
		if !fs.Changed("runs") {
			o.Runs = 3
		}
		if !fs.Changed("bytes") {
			o.BytesPerStream = 25 << 20
		}
	}
	if o.RateBps, err = parseRate(*rateS); err != nil {
		return err
	}
	for _, name := range *profiles {
		p, err := exp.ProfileByName(name)
		if err != nil {
			return err
		}
		o.Profiles = append(o.Profiles, p)
	}
	if o.LinkCommand, err = selfLinkCommand(); err != nil {
		return err
	}
	start := time.Now()
	o.Progress = func(done, total int, p exp.Point, r exp.IperfResult) {
		fmt.Fprintf(os.Stderr, "[%3d/%d %4.0fs] rtt=%gms cc=%s profile=%s: %.1f Mbit/s in %.2f s\n",
			done, total, time.Since(start).Seconds(), p.RTTms, p.CC, p.Profile, r.Mbps, r.Seconds)
	}
	res, err := exp.Baseline(ctx, o)
	if err != nil {
		return err
	}
	if err := res.WriteFiles(*out); err != nil {
		return err
	}
	fmt.Printf("\nPlain TCP, link %.0f Mbit/s, %.1f MB drop-tail queue, iperf -n %dMB -P %d -R, %d runs per point:\n\n",
		res.RateMbps, float64(res.QueueBytes)/1e6, res.BytesPerStream>>20, res.Streams, o.Runs)
	fmt.Print(res.Markdown())
	fmt.Printf("\nwrote %s/baseline.{json,md,png}\n", *out)
	fmt.Println(res.Line())
	return nil
}
