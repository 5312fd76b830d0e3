package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/wanopt/wanopt/bench/exp"
	"github.com/wanopt/wanopt/bench/harness"
)

func runBaseline(ctx context.Context, log *slog.Logger, args []string) error {
	fs := flags("baseline", "")
	pf := addPublishedFlags(fs, "baseline", []string{"modern"})
	ccs := fs.StringSlice("cc", []string{"cubic", "bbr"}, "kernel congestion controls")
	captureDir := fs.String("capture", "", "folder for header captures (pcap) of each point's first run, client and server side, for 'wanopt analyze'")
	pub, profiles, done, err := parsePublished[exp.BaselineResult](fs, pf, args, log)
	if done {
		return err
	}
	o := exp.BaselineOptions{Published: pub, CCs: *ccs, Profiles: profiles, CaptureDir: *captureDir}
	start := time.Now()
	o.Progress = func(done, total int, p exp.Point, r harness.IperfResult) {
		fmt.Fprintf(os.Stderr, "[%3d/%d %4.0fs] rtt=%gms cc=%s profile=%s: %.1f Mbit/s in %.2f s\n",
			done, total, time.Since(start).Seconds(), p.RTTms, p.CC, p.Profile, r.Mbps, r.Seconds)
	}
	res, err := exp.Baseline(ctx, o)
	if err != nil {
		return err
	}
	if err := res.WriteFiles(*pf.out); err != nil {
		return err
	}
	fmt.Printf("\nPlain TCP, link %.0f Mbit/s, %.1f MB drop-tail queue, iperf -n %dMB -P %d -R, %d runs per point:\n\n",
		res.RateMbps, float64(res.QueueBytes)/1e6, res.BytesPerStream>>20, res.Streams, o.Runs)
	fmt.Print(res.Markdown())
	fmt.Printf("\nwrote %s/baseline.{json,md,png}\n", *pf.out)
	fmt.Println(res.Line())
	return nil
}
