package exp

import (
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/wanopt/wanopt/bench/netsim"
	"github.com/wanopt/wanopt/bench/netsim/simtcp"
)

// SimOptions describe one simulated scenario: a dumbbell whose bottleneck
// has the given rate, RTT, loss and queue, and Streams transfers of
// BytesPerStream each (iperf's -P and -n).
type SimOptions struct {
	RateBps        int64
	RTT            time.Duration
	LossPct        float64 // random loss on the bottleneck, each way
	QueueBytes     int     // drop-tail queue; 0 means 2 × BDP (at least 64 KiB)
	Streams        int
	BytesPerStream int64
	CC             string // bbr, cubic, fixed (tunnel); cubic, reno (plain TCP)
	Cold           bool   // tunnel only: no warm-up transfer first
	Seed           uint64
	// Limit bounds the simulated time; 0 means 20 minutes.
	Limit time.Duration
}

// SimResult is what one scenario achieved.
type SimResult struct {
	Scenario    string  `json:"scenario"`
	CC          string  `json:"cc"`
	GoodputMbps float64 `json:"goodput_mbps"` // application bytes / completion time
	LinkRatio   float64 `json:"link_ratio"`   // goodput / link rate
	RetransPct  float64 `json:"retrans_pct"`  // retransmitted / sent data
	QueueP95Ms  float64 `json:"queue_p95_ms"` // bottleneck queueing delay after startup
	Seconds     float64 `json:"seconds"`      // simulated completion time
	CPUSeconds  float64 `json:"cpu_s"`        // process CPU spent simulating
	Complete    bool    `json:"complete"`     // every stream delivered all its bytes
	// Tunnel only: the controller's state at the end.
	BwEstimateMbps float64 `json:"bw_estimate_mbps,omitempty"`
	ProbeRTTs      int     `json:"probe_rtts,omitempty"`
	CwndBytes      int     `json:"cwnd_bytes,omitempty"`
}

// Line is the key=value summary of a result.
func (r SimResult) Line() string {
	return fmt.Sprintf("goodput_mbps=%.1f link_ratio=%.3f retrans_pct=%.2f queue_p95_ms=%.1f cpu_s=%.2f",
		r.GoodputMbps, r.LinkRatio, r.RetransPct, r.QueueP95Ms, r.CPUSeconds)
}

func (o *SimOptions) defaults() {
	if o.Streams <= 0 {
		o.Streams = 1
	}
	if o.QueueBytes <= 0 {
		bdp := int(float64(o.RateBps) / 8 * o.RTT.Seconds())
		o.QueueBytes = max(2*bdp, 64<<10)
	}
	if o.Limit <= 0 {
		o.Limit = 20 * time.Minute
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
}

// dumbbell builds the bottleneck: one link each way with half the RTT.
func dumbbell(sim *netsim.Sim, o SimOptions, overhead int) (fwd, rev *netsim.Link) {
	cfg := netsim.LinkConfig{RateBps: o.RateBps, Delay: o.RTT / 2, QueueBytes: o.QueueBytes, OverheadBytes: overhead, LossPercent: o.LossPct}
	return sim.NewLink(cfg), sim.NewLink(cfg)
}

// startupReset clears the bottleneck's queue-delay statistics once startup
// is over (ten RTTs, at least a second), so the p95 reflects steady state.
func startupReset(sim *netsim.Sim, link *netsim.Link, rtt time.Duration) {
	sim.At(sim.Now().Add(max(10*rtt, time.Second)), link.ResetQueueDelay)
}

// SimTCP runs the scenario with simulated plain TCP: one connection per
// stream, 3 MiB buffers, the kernel-like CUBIC (or Reno) of simtcp.
func SimTCP(o SimOptions) (SimResult, error) {
	o.defaults()
	cpu0 := cpuTime()
	sim := netsim.New(o.Seed)
	fwd, rev := dumbbell(sim, o, 0)
	start := sim.Now()
	senders := make([]*simtcp.Sender, o.Streams)
	for i := range senders {
		cfg := simtcp.Config{TotalBytes: o.BytesPerStream}
		switch strings.ToLower(o.CC) {
		case "", "cubic":
			cfg.Controller = simtcp.NewCubic(1448)
		case "reno":
			cfg.Controller = simtcp.NewReno(1448)
		default:
			return SimResult{}, fmt.Errorf("plain TCP congestion control %q: want cubic or reno", o.CC)
		}
		s, r := simtcp.NewPair(cfg)
		senders[i] = s
		sim.AddFlow(s, r, fwd, rev, netsim.FlowOptions{})
	}
	startupReset(sim, fwd, o.RTT)
	done := func() bool {
		for _, s := range senders {
			if !s.Done() {
				return false
			}
		}
		return true
	}
	err := sim.RunUntil(done, start.Add(o.Limit))
	res := SimResult{Scenario: "plain TCP", CC: strings.ToLower(o.CC), Complete: done()}
	if res.CC == "" {
		res.CC = "cubic"
	}
	var segs, rexmits uint64
	var acked int64
	for _, s := range senders {
		st := s.Stats()
		segs += st.Segments
		rexmits += st.Retransmits
		acked += st.AckedBytes
	}
	elapsed := sim.Now().Sub(start)
	res.Seconds = elapsed.Seconds()
	res.GoodputMbps = float64(acked) * 8 / elapsed.Seconds() / 1e6
	res.LinkRatio = res.GoodputMbps * 1e6 / float64(o.RateBps)
	if segs > 0 {
		res.RetransPct = float64(rexmits) / float64(segs) * 100
	}
	res.QueueP95Ms = ms(fwd.QueueDelay().P95)
	res.CPUSeconds = cpuTime() - cpu0
	if err != nil && res.Complete {
		err = nil
	}
	return res, err
}

// cpuTime is the process's user+system CPU time in seconds.
func cpuTime() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
