package exp

import (
	"fmt"
	"time"

	"github.com/wanopt/wanopt/edge/share"
	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/netsim"
	"github.com/wanopt/wanopt/internal/netsim/simtcp"
)

// endless is a stream size no scenario finishes.
const endless = 1 << 40

// warmTunnel builds a tunnel pair on a fresh dumbbell, completes the
// handshake and carries a warm-up transfer of 20 BDPs.
func warmTunnel(o SimOptions) (*netsim.Sim, *netsim.Link, *tunnelPair, error) {
	o.defaults()
	cong, err := congestionByName(o.CC)
	if err != nil {
		return nil, nil, nil, err
	}
	sim := netsim.New(o.Seed)
	fwd, rev := dumbbell(sim, o, 28)
	tp, err := newTunnelPair(sim, fwd, rev, o, cong, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	deadline := sim.Now().Add(o.Limit)
	if err := sim.RunUntil(tp.cli.Established, deadline); err != nil {
		return nil, nil, nil, fmt.Errorf("handshake: %w", err)
	}
	bdp := int(float64(o.RateBps) / 8 * o.RTT.Seconds())
	b := newBulk(tp.cli, tp.srv, 1, max(20*bdp, 1<<20))
	tp.ce.onEvent, tp.se.onEvent = b.onClient, b.onServer
	b.open(sim.Now())
	sim.Wake(tp.flow)
	if err := sim.RunUntil(b.done, deadline); err != nil || b.failed != nil {
		return nil, nil, nil, fmt.Errorf("warm-up transfer: %v %v", err, b.failed)
	}
	return sim, fwd, tp, nil
}

// openOnEstablished runs one endless stream over the pair, opened as soon
// as its tunnel is established.
func openOnEstablished(tp *tunnelPair) *bulk {
	b := newBulk(tp.cli, tp.srv, 1, endless)
	tp.ce.onEvent = func(now monotime.Time, ev tunnelEvent) {
		if ev.Kind == eventEstablished {
			b.open(now)
		}
		b.onClient(now, ev)
	}
	tp.se.onEvent = b.onServer
	return b
}

// SimRamp measures how fast a new stream on a warm connection reaches the
// link rate: the RTTs from the stream's open until the receiver's rate
// over a quarter-RTT window first reaches 80 % of the link.
func SimRamp(o SimOptions) (rtts float64, err error) {
	o.defaults()
	sim, _, tp, err := warmTunnel(o)
	if err != nil {
		return 0, err
	}
	sim.RunFor(500 * time.Millisecond) // idle between transfers
	b := newBulk(tp.cli, tp.srv, 1, endless)
	tp.ce.onEvent, tp.se.onEvent = b.onClient, b.onServer
	b.open(sim.Now())
	sim.Wake(tp.flow)
	window := o.RTT / 4
	step := window / 8
	// Link rate in stream bytes: the payload share of each wire packet.
	target := 0.8 * float64(o.RateBps) / 8 * window.Seconds() * 1400 / 1500
	type sample struct {
		at monotime.Time
		n  int64
	}
	var hist []sample
	var reached monotime.Time
	var tick func()
	tick = func() {
		now := sim.Now()
		hist = append(hist, sample{now, b.received})
		for len(hist) > 1 && now.Sub(hist[0].at) > window {
			hist = hist[1:]
		}
		if b.firstOpen != 0 && now.Sub(hist[0].at) >= window-step/2 && float64(b.received-hist[0].n) >= target {
			reached = now
			return
		}
		sim.At(now.Add(step), tick)
	}
	sim.At(sim.Now().Add(step), tick)
	deadline := sim.Now().Add(30*o.RTT + 10*time.Second)
	if err := sim.RunUntil(func() bool { return reached != 0 || b.failed != nil }, deadline); err != nil {
		return 0, fmt.Errorf("the new stream never reached 80 %% of the link: %w", err)
	}
	if b.failed != nil {
		return 0, b.failed
	}
	return float64(reached.Sub(b.firstOpen)) / float64(o.RTT), nil
}

// SimShare runs two flows through one bottleneck for d and returns each
// one's share of the last two thirds: a tunnel with o.CC against another
// ("tunnel") or a plain-TCP CUBIC flow ("cubic"), starting cold together.
func SimShare(o SimOptions, competitor string, d time.Duration) (first, second float64, err error) {
	o.defaults()
	cong, err := congestionByName(o.CC)
	if err != nil {
		return 0, 0, err
	}
	sim := netsim.New(o.Seed)
	fwd, rev := dumbbell(sim, o, 28)
	a, err := newTunnelPair(sim, fwd, rev, o, cong, 0)
	if err != nil {
		return 0, 0, err
	}
	ba := openOnEstablished(a)
	var secondBytes func() int64
	switch competitor {
	case "tunnel":
		b, err := newTunnelPair(sim, fwd, rev, o, cong, 0x100)
		if err != nil {
			return 0, 0, err
		}
		bb := openOnEstablished(b)
		secondBytes = func() int64 { return bb.received }
	case "cubic":
		s, r := simtcp.NewPair(simtcp.Config{TotalBytes: -1, Controller: simtcp.NewCubic(1448)})
		sim.AddFlow(s, r, fwd, rev, netsim.FlowOptions{})
		secondBytes = func() int64 { return r.Stats().DeliveredBytes }
	default:
		return 0, 0, fmt.Errorf("competitor %q: want tunnel or cubic", competitor)
	}
	if err := sim.RunFor(d / 3); err != nil {
		return 0, 0, err
	}
	a0, b0 := ba.received, secondBytes()
	if err := sim.RunFor(d - d/3); err != nil {
		return 0, 0, err
	}
	if ba.failed != nil {
		return 0, 0, ba.failed
	}
	da, db := float64(ba.received-a0), float64(secondBytes()-b0)
	if da+db == 0 {
		return 0, 0, fmt.Errorf("nothing was delivered")
	}
	return da / (da + db), db / (da + db), nil
}

// hubShare caps the senders of bulks as a hub with the link's rate does
// (edge's shareLoop), every share.Interval of virtual time.
func hubShare(sim *netsim.Sim, bulks []*bulk, linkBps uint64) {
	use := make([]share.Tunnel, len(bulks))
	caps := make([]uint64, len(bulks))
	sent := make([]uint64, len(bulks))
	var link share.Link
	var tick func()
	tick = func() {
		for k, b := range bulks {
			s := b.cli.Stats().BytesSent
			use[k] = share.Tunnel{SentBps: (s - sent[k]) * 8 * uint64(time.Second) / uint64(share.Interval), CapBps: caps[k]}
			sent[k] = s
		}
		link.Caps(linkBps, use, caps)
		for k, b := range bulks {
			b.cli.SetRateCap(sim.Now(), caps[k])
		}
		sim.At(sim.Now().Add(share.Interval), tick)
	}
	sim.At(sim.Now().Add(share.Interval), tick)
}

// SimShares runs n tunnels with o.CC through one bottleneck, the k-th
// starting k × stagger after its handshake, and returns each one's goodput
// in Mbit/s over measure after warmup: the twin of 'wanbench hub'.
func SimShares(o SimOptions, n int, stagger, warmup, measure time.Duration) ([]float64, error) {
	o.defaults()
	cong, err := congestionByName(o.CC)
	if err != nil {
		return nil, err
	}
	sim := netsim.New(o.Seed)
	fwd, rev := dumbbell(sim, o, 28)
	bulks := make([]*bulk, n)
	for k := range n {
		tp, err := newTunnelPair(sim, fwd, rev, o, cong, uint64(k)*0x100)
		if err != nil {
			return nil, err
		}
		b := newBulk(tp.cli, tp.srv, 1, endless)
		bulks[k] = b
		delay := time.Duration(k) * stagger
		tp.ce.onEvent = func(now monotime.Time, ev tunnelEvent) {
			if ev.Kind == eventEstablished {
				sim.At(now.Add(delay), func() { b.open(sim.Now()); sim.Wake(tp.flow) })
			}
			b.onClient(now, ev)
		}
		tp.se.onEvent = b.onServer
	}
	if o.HubShare {
		hubShare(sim, bulks, uint64(o.RateBps))
	}
	if err := sim.RunFor(warmup); err != nil {
		return nil, err
	}
	start := make([]int64, n)
	for k, b := range bulks {
		start[k] = b.received
	}
	if err := sim.RunFor(measure); err != nil {
		return nil, err
	}
	out := make([]float64, n)
	for k, b := range bulks {
		if b.failed != nil {
			return nil, b.failed
		}
		out[k] = float64(b.received-start[k]) * 8 / measure.Seconds() / 1e6
	}
	return out, nil
}
