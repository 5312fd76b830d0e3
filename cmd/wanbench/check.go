package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/wanopt/wanopt/bench/exp"
)

func runCheck(ctx context.Context, log *slog.Logger, args []string) error {
	fs := flags("check", "")
	rtt := fs.Duration("rtt", 200*time.Millisecond, "round-trip time to emulate")
	rateS := fs.String("rate", "250mbit", "link rate (IP bytes), e.g. 1gbit, 250mbit")
	secs := fs.Duration("duration", 3*time.Second, "how long the rate flow runs")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	rate, err := parseRate(*rateS)
	if err != nil {
		return err
	}
	if rate == 0 {
		return fmt.Errorf("--rate must be above 0 to check a rate")
	}
	link, err := selfLinkCommand()
	if err != nil {
		return err
	}
	r, err := exp.Check(ctx, exp.CheckOptions{RTT: *rtt, RateBps: rate, RateDuration: *secs, LinkCommand: link, Logger: log})
	if err != nil {
		return err
	}
	fmt.Printf("setting:  rtt %.1f ms, rate %.1f Mbit/s\n", r.RTTSetMs, r.RateSetMbps)
	fmt.Printf("rtt:      median %.3f ms (min %.3f, max %.3f), error %+.3f ms, tolerance ±%.3f ms\n",
		r.RTTMs, r.RTTMinMs, r.RTTMaxMs, r.RTTErrorMs, r.RTTTolMs)
	fmt.Printf("rate:     %.2f Mbit/s, error %+.2f %%, tolerance ±%.1f %% (%d of %d probe packets arrived)\n",
		r.RateMbps, r.RateErrorPct, r.RateTolPct, r.RateProbeRcvd, r.RateProbeSent)
	fmt.Printf("emulator: %d packets forwarded, %d queue drops, release lateness p99 %v max %v, early at most %v\n",
		r.Link.AB.Packets, r.Link.AB.QueueDrops, r.Link.AB.Lateness.Quantile(0.99), r.Link.AB.Lateness.Max, r.Link.AB.EarlyMax)
	if !r.Saturated {
		fmt.Printf("warning:  the probe offered only %.1f Mbit/s and never filled the link's queue: the rate figure measures the sender, not the link (machine too busy?)\n", r.OfferedMbps)
	}
	fmt.Println(r.Line())
	if !r.OK() {
		return exitError{code: 3, msg: "measured link is outside the emulator's tolerances"}
	}
	return nil
}
