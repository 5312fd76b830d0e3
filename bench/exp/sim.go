package exp

import (
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/netsim"
	"github.com/wanopt/wanopt/internal/netsim/simtcp"
)

// SimOptions describe one simulated scenario: a dumbbell bottleneck and
// Streams transfers of BytesPerStream each (iperf's -P and -n).
type SimOptions struct {
	RateBps int64
	RTT     time.Duration
	// LinkImpairments apply to both directions of the bottleneck, as in
	// the lab. The outage starts OutageAt after the measured transfer;
	// unlike the emulator, the simulator drops packets whose transmission
	// ends inside it, so the queue drains into it.
	LinkImpairments
	QueueBytes     int // drop-tail queue; 0 means 2 × BDP (at least 64 KiB)
	Streams        int
	BytesPerStream int64
	CC             string // bbr, cubic, fixed (tunnel); cubic, reno (plain TCP)
	Cold           bool   // tunnel only: no warm-up transfer first
	// WANRateHint tells the tunnel the link's rate (--wan-rate).
	WANRateHint bool
	// HubShare, for SimShares: the tunnels' senders are capped as a hub
	// with --hub-rate caps its branches' tunnels (package share).
	HubShare bool
	Seed     uint64
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
	// With an outage, as in the lab (see IperfResult): when it began and
	// ended since the measured transfer started, and the recovery time.
	OutageStartS float64 `json:"outage_start_s,omitempty"`
	OutageEndS   float64 `json:"outage_end_s,omitempty"`
	RecoveryS    float64 `json:"recovery_s,omitempty"`
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

// dumbbell builds the bottleneck: one link each way with half the RTT and
// the impairments but the outage (see trackOutage), which must be valid.
func dumbbell(sim *netsim.Sim, o SimOptions, overhead int) (fwd, rev *netsim.Link) {
	cfg := netsim.LinkConfig{RateBps: o.RateBps, Delay: o.RTT / 2, QueueBytes: o.QueueBytes, OverheadBytes: overhead}
	o.LinkImpairments.applySim(&cfg)
	return sim.NewLink(cfg), sim.NewLink(cfg)
}

// simOutage is a simulated outage and the samples that time its recovery.
type simOutage struct {
	sim       *netsim.Sim
	o         SimOptions
	start     monotime.Time
	step      time.Duration
	delivered func() int64
	last      int64
	lastAt    monotime.Time
	iv        []harness.RateInterval
}

// trackOutage places o's outage on links, OutageAt from now, and samples
// delivered every ReportInterval. It returns nil if o has no outage.
func trackOutage(sim *netsim.Sim, o SimOptions, links []*netsim.Link, delivered func() int64) *simOutage {
	if !o.HasOutage() {
		return nil
	}
	el := sim.Elapsed()
	for _, l := range links {
		cfg := l.Config()
		// Outages count from the simulation's start; the warm-up came first.
		cfg.Outages = []netsim.Outage{{Start: el + o.OutageAt, End: el + o.OutageAt + o.OutageFor}}
		l.SetConfig(cfg)
	}
	t := &simOutage{sim: sim, o: o, start: sim.Now(), step: harness.ReportInterval(o.RTT), delivered: delivered}
	t.last, t.lastAt = delivered(), t.start
	var tick func()
	tick = func() {
		t.sample()
		sim.At(sim.Now().Add(t.step), tick)
	}
	sim.At(t.start.Add(t.step), tick)
	return t
}

// sample records the interval since the last sample.
func (t *simOutage) sample() {
	now, n := t.sim.Now(), t.delivered()
	if now > t.lastAt {
		t.iv = append(t.iv, harness.RateInterval{StartS: t.lastAt.Sub(t.start).Seconds(), EndS: now.Sub(t.start).Seconds(),
			Mbps: float64(n-t.last) * 8 / now.Sub(t.lastAt).Seconds() / 1e6})
	}
	t.last, t.lastAt = n, now
}

// fill records the outage and the recovery in r once the transfer has
// ended after elapsed, leaving out a last interval under half a step.
func (t *simOutage) fill(r *SimResult, elapsed time.Duration) {
	if t == nil || elapsed <= t.o.OutageAt {
		return
	}
	if end := t.start.Add(elapsed); end.Sub(t.lastAt) >= t.step/2 {
		n := t.delivered()
		t.iv = append(t.iv, harness.RateInterval{StartS: t.lastAt.Sub(t.start).Seconds(), EndS: elapsed.Seconds(),
			Mbps: float64(n-t.last) * 8 / end.Sub(t.lastAt).Seconds() / 1e6})
	}
	r.OutageStartS = t.o.OutageAt.Seconds()
	r.OutageEndS = (t.o.OutageAt + t.o.OutageFor).Seconds()
	r.RecoveryS = harness.RecoveryTime(t.iv, r.OutageEndS, harness.RecoveryBar*harness.GoodputLimitMbps(float64(t.o.RateBps)))
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
	if err := o.LinkImpairments.Validate(); err != nil {
		return SimResult{}, fmt.Errorf("link impairments: %w", err)
	}
	cpu0 := cpuTime()
	sim := netsim.New(o.Seed)
	fwd, rev := dumbbell(sim, o, 0)
	start := sim.Now()
	senders := make([]*simtcp.Sender, o.Streams)
	receivers := make([]*simtcp.Receiver, o.Streams)
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
		senders[i], receivers[i] = s, r
		sim.AddFlow(s, r, fwd, rev, netsim.FlowOptions{})
	}
	outage := trackOutage(sim, o, []*netsim.Link{fwd, rev}, func() int64 {
		var n int64
		for _, r := range receivers {
			n += r.Stats().DeliveredBytes
		}
		return n
	})
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
	outage.fill(&res, elapsed)
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
