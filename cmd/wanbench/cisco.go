package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/pflag"
	"github.com/wanopt/wanopt/bench/exp"
)

// runCisco is 'wanbench cisco': the published experiment with plain TCP
// and through a pair of wanopt edges, side by side on the edges lab.
func runCisco(ctx context.Context, log *slog.Logger, args []string) error {
	fs := pflag.NewFlagSet("cisco", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `Usage: wanbench cisco [flags]

The published test (link capped at 250 Mbit/s, 2 MB queue, iperf 2
'iperf -c SERVER -n 100MB -P 4 -R', 5 runs, highest and lowest dropped)
on the edges lab: plain TCP through edges that only forward, then through a
pair of wanopt edges (the first run on a cold tunnel reported apart). Needs
root, iperf (version 2) and a wanopt binary (--wanopt, next to wanbench, or
on PATH; 'make build' puts both in bin/).

Flags:
`)
		fs.PrintDefaults()
	}
	quick := fs.Bool("quick", false, "3 runs of -n 25MB per point (a smoke test: short transfers weigh the first byte's trip more)")
	runs := fs.Int("runs", 5, "iperf runs per point and path (highest and lowest dropped)")
	bytesS := fs.String("bytes", "100MB", "iperf -n, per stream")
	rtts := fs.DurationSlice("rtt", nil, "RTTs to test (default 0,50,100,150,200,250ms)")
	profiles := fs.StringSlice("profile", []string{"modern", "legacy"}, "endpoint TCP profiles: modern (Linux defaults), legacy (windows capped at 512 KB)")
	cc := fs.String("cc", "cubic", "the end hosts' kernel congestion control")
	rateS := fs.String("rate", "250mbit", "link rate")
	wanopt := fs.String("wanopt", "", "the wanopt binary (default: next to wanbench, else on PATH)")
	out := fs.String("out", "out/cisco", "folder for cisco.json, .md and .png")
	replot := fs.String("replot", "", "redraw the table and chart from a cisco.json into --out, without measuring")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *replot != "" {
		js, err := os.ReadFile(*replot)
		if err != nil {
			return err
		}
		var res exp.CiscoResult
		if err := json.Unmarshal(js, &res); err != nil {
			return fmt.Errorf("%s: %w", *replot, err)
		}
		if err := res.WriteFiles(*out); err != nil {
			return err
		}
		fmt.Print(res.Markdown())
		fmt.Println(res.Line())
		return nil
	}
	o := exp.CiscoOptions{RTTs: *rtts, CC: *cc, Runs: *runs, Logger: log}
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
	if o.Runs < 1 {
		return fmt.Errorf("--runs %d: want at least 1", o.Runs)
	}
	if o.RateBps, err = parseRate(*rateS); err != nil {
		return err
	}
	if o.RateBps == 0 {
		return fmt.Errorf("--rate %q: the experiment needs a capped link", *rateS)
	}
	for _, name := range *profiles {
		p, err := exp.ProfileByName(name)
		if err != nil {
			return err
		}
		o.Profiles = append(o.Profiles, p)
	}
	if o.Wanopt, err = exp.FindWanopt(*wanopt); err != nil {
		return err
	}
	if o.LinkCommand, err = selfLinkCommand(); err != nil {
		return err
	}
	start := time.Now()
	o.Progress = func(done, total int, p exp.Point, what string, r exp.IperfResult) {
		fmt.Fprintf(os.Stderr, "[%3d/%d %4.0fs] rtt=%gms profile=%s %-9s %6.1f Mbit/s in %.2f s\n",
			done, total, time.Since(start).Seconds(), p.RTTms, p.Profile, what+":", r.Mbps, r.Seconds)
	}
	res, err := exp.Cisco(ctx, o)
	if err != nil {
		return err
	}
	if err := res.WriteFiles(*out); err != nil {
		return err
	}
	fmt.Printf("\nPlain TCP and wanopt, link %.0f Mbit/s, %.1f MB drop-tail queue, iperf -n %dMB -P %d -R, %d runs per point, %s end hosts (%.0f s):\n\n",
		res.RateMbps, float64(res.QueueBytes)/1e6, res.BytesPerStream>>20, res.Streams, res.Runs, res.CC, time.Since(start).Seconds())
	fmt.Print(res.Markdown())
	fmt.Printf("\nwanopt / plain 0 ms: against plain TCP's own 0 ms figure in this run (%s). Cold tunnel: the first run on a fresh pair of edges.\n", fmtRefs(res.Plain0ms))
	fmt.Printf("wrote %s/cisco.{json,md,png}\n", *out)
	fmt.Println(res.Line())
	return nil
}

func fmtRefs(m map[string]float64) string {
	s := ""
	for _, k := range []string{"modern", "legacy"} {
		if v, ok := m[k]; ok {
			if s != "" {
				s += ", "
			}
			s += fmt.Sprintf("%s %.1f Mbit/s", k, v)
		}
	}
	return s
}
