package exp

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/measure"
	"github.com/wanopt/wanopt/bench/wanem"
)

// CheckOptions configure Check.
type CheckOptions struct {
	RTT          time.Duration // round-trip time to emulate (split evenly each way)
	RateBps      uint64        // link rate, bits/s of IP bytes
	RateDuration time.Duration // how long the rate flow runs; 0 means 3 s
	LinkCommand  []string
	Logger       *slog.Logger
}

// CheckResult holds the emulator's measured precision against the setting.
type CheckResult struct {
	RTTSetMs      float64 `json:"rtt_set_ms"`
	RTTMs         float64 `json:"rtt_ms"` // median of idle probes
	RTTMinMs      float64 `json:"rtt_min_ms"`
	RTTMaxMs      float64 `json:"rtt_max_ms"`
	RTTErrorMs    float64 `json:"rtt_error_ms"`
	RTTTolMs      float64 `json:"rtt_tolerance_ms"`
	RateSetMbps   float64 `json:"rate_set_mbps"`
	RateMbps      float64 `json:"rate_mbps"`
	RateErrorPct  float64 `json:"rate_error_pct"`
	RateTolPct    float64 `json:"rate_tolerance_pct"`
	Link          lab.LinkStats
	OfferedMbps   float64 `json:"offered_mbps"` // what the probe's sender managed
	Saturated     bool    `json:"saturated"`    // the link's queue overflowed
	RateProbeSent int     `json:"rate_probe_sent"`
	RateProbeRcvd int     `json:"rate_probe_received"`
}

// The tolerances the emulator promises: RTT within 0.5 ms + 1 % of the
// setting; a saturating flow sees the rate within 2 %.
const (
	rttTolAbs  = 500 * time.Microsecond
	rttTolFrac = 0.01
	rateTolPct = 2.0
)

// OK reports whether both figures are within tolerance on a saturated link.
func (r CheckResult) OK() bool {
	return r.Saturated && math.Abs(r.RTTErrorMs) <= r.RTTTolMs && math.Abs(r.RateErrorPct) <= r.RateTolPct
}

// Line is the one-line key=value summary.
func (r CheckResult) Line() string {
	return fmt.Sprintf("rtt_ms=%.3f rtt_error_ms=%.3f rate_mbps=%.2f rate_error_pct=%.2f",
		r.RTTMs, r.RTTErrorMs, r.RateMbps, r.RateErrorPct)
}

// Check builds the direct lab at the given RTT and rate, measures the RTT with
// idle UDP probes and the rate with a UDP flow at 110 % of it, and compares.
func Check(ctx context.Context, o CheckOptions) (CheckResult, error) {
	if o.RateDuration == 0 {
		o.RateDuration = 3 * time.Second
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l, err := lab.Build(ctx, lab.Options{Kind: lab.Direct, LinkCommand: o.LinkCommand, Realtime: true, Logger: log})
	if err != nil {
		return CheckResult{}, err
	}
	defer l.Close()
	// Deep enough to keep the link busy through the sender's scheduling
	// gaps, shallow enough that the probe's 10 % excess overflows it
	// halfway through the run.
	queue := min(max(o.RateDuration/20, 50*time.Millisecond), 250*time.Millisecond)
	oneWay := wanem.Config{Delay: o.RTT / 2, RateBps: o.RateBps, QueueDelay: queue}
	if err := l.StartLink(ctx, oneWay, oneWay); err != nil {
		return CheckResult{}, err
	}
	r := CheckResult{RTTSetMs: ms(o.RTT), RateSetMbps: float64(o.RateBps) / 1e6, RateTolPct: rateTolPct}
	r.RTTTolMs = ms(rttTolAbs) + rttTolFrac*ms(o.RTT)

	log.Info("measuring RTT", "probes", 40)
	rtt, err := measure.RTT(ctx, l.Client.NS, l.Client.Addr, l.Server.NS, l.Server.Addr, 40, 10*time.Millisecond, o.RTT+time.Second)
	if err != nil {
		return r, err
	}
	r.RTTMs, r.RTTMinMs, r.RTTMaxMs = ms(rtt.Median), ms(rtt.Min), ms(rtt.Max)
	r.RTTErrorMs = r.RTTMs - r.RTTSetMs

	log.Info("measuring rate", "offered_mbps", 1.1*r.RateSetMbps, "seconds", o.RateDuration.Seconds())
	rate, err := measure.Rate(ctx, l.Client.NS, l.Client.Addr, l.Server.NS, l.Server.Addr,
		1.1*float64(o.RateBps), 1472, o.RateDuration, o.RTT/2+time.Second)
	if err != nil {
		return r, err
	}
	r.RateProbeSent, r.RateProbeRcvd = rate.SentPackets, rate.ReceivedPackets
	r.RateMbps = rate.RateBps / 1e6
	r.RateErrorPct = (r.RateMbps - r.RateSetMbps) / r.RateSetMbps * 100
	r.Link = l.StopLink()
	r.OfferedMbps = float64(rate.SentPackets) * 1500 * 8 / o.RateDuration.Seconds() / 1e6
	// Only a full queue proves the link, not the sender, set the pace: a
	// probe that never filled it measured its own rate.
	r.Saturated = r.Link.AB.QueueDrops > 0
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
