package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/wanopt/wanopt/bench/exp"
	"github.com/wanopt/wanopt/bench/harness"
)

func runSim(ctx context.Context, args []string) error {
	fs := flags("sim", "")
	rateS := fs.String("rate", "250mbit", "bottleneck rate")
	rtt := fs.Duration("rtt", 200*time.Millisecond, "round-trip propagation delay")
	imp := addImpairmentFlags(fs)
	queueS := fs.String("queue", "", "bottleneck queue in bytes (default 2 x BDP)")
	streams := fs.Int("streams", 4, "parallel streams (iperf -P)")
	bytesS := fs.String("bytes", "100MB", "bytes per stream (iperf -n)")
	ccName := fs.String("cc", "bbr", "tunnel congestion control: bbr, cubic, fixed")
	cold := fs.Bool("cold", false, "measure a fresh connection instead of a warm one")
	wanRateHint := fs.Bool("wan-rate-hint", false, "tell the tunnel the link's rate (wanopt run --wan-rate): a cold tunnel starts at it")
	seed := fs.Uint64("seed", 1, "simulation seed")
	noTCP := fs.Bool("no-tcp", false, "skip the simulated plain-TCP comparison")
	bars := fs.Bool("bars", false, "measure every bar of the transport (a table of scenarios and targets) for --cc instead of one scenario")
	shareTunnels := fs.Int("share-tunnels", 0, "instead of one scenario: this many tunnels share the bottleneck (the twin of 'wanbench hub'), each starting --stagger after the one before; prints each one's share of the fair share over 30 s after 20 s")
	hubShare := fs.Bool("hub-share", false, "with --share-tunnels: cap the tunnels as a hub told the link's rate does (wanopt run --hub-rate)")
	stagger := fs.Duration("stagger", 0, "with --share-tunnels: the delay between the tunnels' starts")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if *bars {
		return runBars(ctx, *ccName, *bytesS, *seed)
	}
	if *shareTunnels > 0 {
		rate, err := parseRate(*rateS)
		if err != nil {
			return err
		}
		o := exp.SimOptions{RateBps: int64(rate), RTT: *rtt, CC: *ccName, Seed: *seed, HubShare: *hubShare}
		if *queueS != "" {
			q, err := parseBytes(*queueS)
			if err != nil {
				return err
			}
			o.QueueBytes = int(q)
		}
		mbps, err := exp.SimShares(o, *shareTunnels, *stagger, 20*time.Second, 30*time.Second)
		if err != nil {
			return err
		}
		var total float64
		for _, m := range mbps {
			total += m
		}
		fmt.Printf("%d tunnels (%s) through %.0f Mbit/s, RTT %v, starts %v apart, over 30 s after 20 s:\n", *shareTunnels, *ccName, float64(rate)/1e6, *rtt, *stagger)
		for k, m := range mbps {
			fmt.Printf("  tunnel %d: %.1f Mbit/s, %.2f of the fair share\n", k+1, m, m*float64(len(mbps))/total)
		}
		fmt.Printf("  total %.1f Mbit/s\n", total)
		return nil
	}
	o := exp.SimOptions{RTT: *rtt, Streams: *streams, CC: *ccName, Cold: *cold, Seed: *seed, WANRateHint: *wanRateHint}
	rate, err := parseRate(*rateS)
	if err != nil {
		return err
	}
	o.RateBps = int64(rate)
	if o.LinkImpairments, err = imp.impairments(); err != nil {
		return err
	}
	if o.BytesPerStream, err = parseBytes(*bytesS); err != nil {
		return err
	}
	if *queueS != "" {
		q, err := parseBytes(*queueS)
		if err != nil {
			return err
		}
		o.QueueBytes = int(q)
	}
	fmt.Printf("simulated path: %.0f Mbit/s, RTT %v, impairments each way: %s (seed %d); %d streams x %s\n\n",
		float64(o.RateBps)/1e6, o.RTT, o.LinkImpairments, o.Seed, o.Streams, strings.ToUpper(*bytesS))
	outage := o.HasOutage()
	if outage {
		fmt.Println("| scenario | cc | goodput Mbit/s | link ratio | retrans % | queue p95 ms | seconds | CPU s | recovery s |")
		fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---:|")
	} else {
		fmt.Println("| scenario | cc | goodput Mbit/s | link ratio | retrans % | queue p95 ms | seconds | CPU s |")
		fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|")
	}
	row := func(r exp.SimResult) {
		done := ""
		if !r.Complete {
			done = " (incomplete)"
		}
		fmt.Printf("| %s%s | %s | %.1f | %.3f | %.2f | %.1f | %.2f | %.2f |",
			r.Scenario, done, r.CC, r.GoodputMbps, r.LinkRatio, r.RetransPct, r.QueueP95Ms, r.Seconds, r.CPUSeconds)
		if outage {
			switch {
			case r.OutageEndS == 0:
				fmt.Print(" – |")
			case r.RecoveryS == harness.NotRecovered:
				fmt.Print(" never |")
			default:
				fmt.Printf(" %.1f |", r.RecoveryS)
			}
		}
		fmt.Println()
	}
	if !*noTCP {
		tcp := o
		tcp.CC = "cubic"
		r, err := exp.SimTCP(tcp)
		if err != nil {
			fmt.Fprintf(os.Stderr, "plain TCP: %v\n", err)
		}
		row(r)
	}
	r, err := exp.SimTunnel(o)
	row(r)
	if err != nil {
		return fmt.Errorf("tunnel: %w", err)
	}
	if r.BwEstimateMbps > 0 {
		fmt.Printf("\ntunnel controller at the end: bandwidth estimate %.1f Mbit/s, cwnd %d B, %d ProbeRTT episodes during the transfer\n",
			r.BwEstimateMbps, r.CwndBytes, r.ProbeRTTs)
	}
	if outage {
		fmt.Printf("\nrecovery: seconds from the link's return (%v after the measured transfer started) until a %v interval reached 80%% of the link's goodput limit (rate x 1448/1500); never: not before the transfer ended; –: the transfer ended before the outage\n",
			o.OutageAt+o.OutageFor, harness.ReportInterval(o.RTT))
	}
	fmt.Println()
	fmt.Println(r.Line())
	return ctx.Err()
}

func runBars(ctx context.Context, ccName, bytesS string, seed uint64) error {
	n, err := parseBytes(bytesS)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := exp.Bars(exp.BarsOptions{CC: ccName, BytesPerStream: n, Seed: seed, Progress: func(b exp.Bar) {
		fmt.Fprintf(os.Stderr, "[%4.0fs] bar %s %s: %s %.3f (%s)\n", time.Since(start).Seconds(), b.ID, b.Scenario, b.Metric, b.Value, b.Target)
	}})
	if err != nil {
		return err
	}
	fmt.Print(exp.BarsMarkdown(ccName, res))
	failed := 0
	for _, b := range res {
		if !b.Pass {
			failed++
		}
	}
	fmt.Printf("\nbars_passed=%d bars_failed=%d cc=%s\n", len(res)-failed, failed, ccName)
	return ctx.Err()
}
