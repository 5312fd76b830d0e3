package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/wanopt/wanopt/bench/exp"
	"github.com/wanopt/wanopt/bench/harness"
)

// runFileMix is 'wanbench file-mix' (also 'f5'): the file-mix lab's files fetched over
// HTTP, plain TCP and wanopt side by side on the edges lab.
func runFileMix(ctx context.Context, log *slog.Logger, args []string) error {
	fs := flags("file-mix", `The file-mix lab (after F5's TCP-profile test) on the edges lab: nginx on the server serves a fixed
mix of 24 files from 16 KiB to 3 MiB (27 MiB in all), and curl on the client
fetches all of it over one keep-alive connection, and over 4 connections in
parallel, each fetching a quarter. Plain TCP goes through edges that only
forward, then the same fetches go through a pair of wanopt edges (warmed by
one fetch first). Each run is captured on the far edge's LAN side, where the
zero-window segments sent toward the server are counted.

Reported: the median seconds, the ideal time (the bytes at the link rate
plus one round trip per request of the longest chain) and the zero windows.
Needs root, nginx, curl, tcpdump and a wanopt binary (--wanopt, next to
wanbench, or on PATH).
`)
	rtts := fs.DurationSlice("rtt", []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}, "RTTs to test")
	runs := fs.Int("runs", 3, "fetches per point and path (the median is reported)")
	rate := fs.String("rate", "250mbit", "link rate")
	profiles := fs.StringSlice("profile", []string{"modern", "legacy"}, "endpoint TCP profiles: modern (Linux defaults), legacy (windows capped at 512 KB)")
	conns := fs.IntSlice("conns", []int{1, 4}, "connections fetching the list: 1 is one keep-alive connection for all files; N deals file i to connection i mod N")
	cc := fs.String("cc", "cubic", "the end hosts' kernel congestion control")
	wanopt := fs.String("wanopt", "", "the wanopt binary (default: next to wanbench, else on PATH)")
	edgeArgs := fs.StringArray("edge-arg", nil, "add this argument to both wanopt edges' command lines (repeatable), e.g. --edge-arg=--wan-rate=250mbit")
	keep := fs.Bool("keep-captures", false, "keep every run's capture (far edge's LAN side) in OUT/captures, for 'wanopt analyze'")
	out := fs.String("out", "out/f5", "folder for f5.json, .md and .png")
	replotFrom := fs.String("replot", "", "redraw the table and chart from an f5.json into --out, without measuring")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if *replotFrom != "" {
		return replot[exp.FileMixResult](*replotFrom, *out)
	}
	if *runs < 1 {
		return fmt.Errorf("--runs %d: want at least 1", *runs)
	}
	o := exp.FileMixOptions{RTTs: *rtts, Runs: *runs, Conns: *conns, CC: *cc, EdgeArgs: *edgeArgs, Logger: log}
	var err error
	if o.RateBps, err = parseRate(*rate); err != nil {
		return err
	}
	if o.RateBps == 0 {
		return fmt.Errorf("--rate %q: the experiment needs a capped link", *rate)
	}
	for _, name := range *profiles {
		p, err := harness.ProfileByName(name)
		if err != nil {
			return err
		}
		o.Profiles = append(o.Profiles, p)
	}
	if *keep {
		o.CaptureDir = filepath.Join(*out, "captures")
	}
	if o.LinkCommand, err = selfLinkCommand(); err != nil {
		return err
	}
	if o.Wanopt, err = findWanopt(*wanopt); err != nil {
		return err
	}
	start := time.Now()
	o.Progress = func(done, total int, row exp.FileMixRow, what string, r exp.FileMixRun) {
		var lost string
		if r.CaptureDropped > 0 {
			lost = fmt.Sprintf(" (the capture lost %d packets)", r.CaptureDropped)
		}
		fmt.Fprintf(os.Stderr, "[%3d/%d %4.0fs] rtt=%gms profile=%s conns=%d %-7s %6.2f s (ideal %.2f s), %d zero windows toward the server of %d segments%s\n",
			done, total, time.Since(start).Seconds(), row.RTTms, row.Profile, row.Conns, what+":", r.Seconds, row.IdealS, r.ZeroWindows, r.ToServer, lost)
	}
	res, err := exp.FileMix(ctx, o)
	if err != nil {
		if len(res.Rows) == 0 {
			return err
		}
		// Keep the RTTs measured before the failure.
		if werr := res.WriteFiles(*out); werr == nil {
			fmt.Fprintf(os.Stderr, "wrote the %d rows measured before the failure to %s\n", len(res.Rows), *out)
		}
		fmt.Print(res.Markdown())
		return err
	}
	if err := res.WriteFiles(*out); err != nil {
		return err
	}
	fmt.Printf("\nThe F5 file mix (%d files, %d bytes), plain TCP and wanopt, link %.0f Mbit/s, %.1f MB drop-tail queue, %d runs per point, %s end hosts (%.0f s):\n\n",
		len(res.Files), res.TotalBytes, res.RateMbps, float64(res.QueueBytes)/1e6, res.Runs, res.CC, time.Since(start).Seconds())
	fmt.Print(res.Markdown())
	fmt.Printf("wrote %s/f5.{json,md,png}\n", *out)
	fmt.Println(res.Line())
	return nil
}
