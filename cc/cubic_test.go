package cc

import (
	"math"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// cubicDriver feeds a Cubic an ack clock: one packet acked at a time,
// always window-limited, with a constant RTT, so a full window is acked
// per RTT.
type cubicDriver struct {
	c   *Cubic
	rtt *RTTStats
	now monotime.Time
	ev  AckEvent
	mss int
}

func newCubicDriver(initPkts int, rtt time.Duration) *cubicDriver {
	d := &cubicDriver{c: NewCubic(DefaultMSS, initPkts), rtt: NewRTTStats(0), now: monotime.Time(time.Second), mss: DefaultMSS}
	d.rtt.UpdateRTT(rtt, 0)
	return d
}

// ackOne advances time by rtt/window and acks one packet (lost: one loss).
func (d *cubicDriver) ackOne(lost bool) {
	cwnd := d.c.CongestionWindow()
	pkts := max(cwnd/d.mss, 1)
	d.now = d.now.Add(d.rtt.SmoothedRTT() / time.Duration(pkts))
	p := PacketState{SentTime: d.now.Add(-d.rtt.SmoothedRTT()), Bytes: d.mss}
	d.ev = AckEvent{Now: d.now, Acked: []PacketState{p}, PriorInFlight: cwnd, BytesInFlight: cwnd - d.mss, RTT: d.rtt}
	if lost {
		// A packet sent just now (after any earlier recovery) is lost.
		d.ev.Lost = []PacketState{{SentTime: d.now, Bytes: d.mss}}
		d.ev.Acked = nil
	}
	d.c.OnAck(&d.ev)
}

func TestCubicReductionAndConcaveGrowth(t *testing.T) {
	tests := []struct {
		name     string
		wmaxPkts int
		rtt      time.Duration
	}{
		{"1000pkts-100ms", 1000, 100 * time.Millisecond},
		{"3000pkts-250ms", 3000, 250 * time.Millisecond},
		{"400pkts-50ms", 400, 50 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newCubicDriver(tc.wmaxPkts, tc.rtt)
			before := d.c.CongestionWindow()
			d.ackOne(true)
			after := d.c.CongestionWindow()
			if want := int(float64(before) * cubicBeta); after != want {
				t.Fatalf("cwnd after loss %d, want β×%d = %d", after, before, want)
			}
			if d.c.SlowStartThreshold() != after || d.c.WMaxBytes() != before {
				t.Fatalf("ssthresh %d / W_max %d, want %d / %d", d.c.SlowStartThreshold(), d.c.WMaxBytes(), after, before)
			}
			// The first ACK after the loss acks a packet sent before it, so
			// recovery lasts one more RTT; after that CUBIC must follow
			// W_cubic(t) = C(t-K)³ + W_max with t from the epoch start.
			wmax := float64(tc.wmaxPkts)
			k := math.Cbrt(wmax * (1 - cubicBeta) / cubicC)
			epoch := monotime.Time(0)
			worst := 0.0
			for d.now.Sub(monotime.Time(time.Second)) < time.Duration(1.5*k*float64(time.Second)) {
				d.ackOne(false)
				if epoch == 0 && d.c.epochStart != 0 {
					epoch = d.c.epochStart
				}
				if epoch == 0 {
					continue
				}
				ts := d.now.Sub(epoch).Seconds()
				want := cubicC*math.Pow(ts-k, 3) + wmax
				got := float64(d.c.CongestionWindow()) / float64(d.mss)
				// cwnd aims at W_cubic one RTT ahead and gets there over
				// that RTT, so allow the curve's change over one RTT.
				slack := math.Abs(cubicC*math.Pow(ts+tc.rtt.Seconds()-k, 3)+wmax-want) + 2
				if err := math.Abs(got - want); err > slack {
					t.Fatalf("t=%.2fs: cwnd %.1f pkts, W_cubic %.1f (slack %.1f)", ts, got, want, slack)
				}
				worst = max(worst, math.Abs(got-want)/want)
			}
			t.Logf("K=%.2fs, worst relative error %.2f%%", k, 100*worst)
		})
	}
}

func TestCubicRenoFriendlyRegion(t *testing.T) {
	// With a small W_max and a short RTT the cubic curve grows slower than
	// Reno would; cwnd must follow the Reno-friendly estimate, about
	// alpha = 3(1-β)/(1+β) ≈ 0.53 packets per RTT.
	d := newCubicDriver(20, 10*time.Millisecond)
	d.ackOne(true)
	for range 20 { // leave recovery
		d.ackOne(false)
	}
	start := d.c.CongestionWindow()
	rounds := 40
	for range rounds {
		n := d.c.CongestionWindow() / d.mss
		for range n {
			d.ackOne(false)
		}
	}
	gotPerRTT := float64(d.c.CongestionWindow()-start) / float64(d.mss) / float64(rounds)
	if gotPerRTT < 0.4 || gotPerRTT > 1.1 {
		t.Fatalf("Reno-friendly growth %.2f packets/RTT, want about %.2f", gotPerRTT, cubicAlpha)
	}
}

func TestCubicFastConvergenceAndRecovery(t *testing.T) {
	d := newCubicDriver(1000, 100*time.Millisecond)
	d.ackOne(true)
	w1 := d.c.CongestionWindow()
	// A second loss in the same recovery period must not reduce again.
	d.c.OnAck(&AckEvent{Now: d.now, Lost: []PacketState{{SentTime: d.now.Add(-time.Millisecond), Bytes: d.mss}}, RTT: d.rtt})
	if d.c.CongestionWindow() != w1 {
		t.Fatalf("second reduction within one recovery period: %d -> %d", w1, d.c.CongestionWindow())
	}
	for range 200 {
		d.ackOne(false)
	}
	w2 := d.c.CongestionWindow()
	d.ackOne(true) // new loss below W_max: fast convergence
	if got, want := d.c.WMaxBytes(), int(float64(w2)*(1+cubicBeta)/2); got != want {
		t.Fatalf("W_max after fast convergence %d, want %d", got, want)
	}
	d.c.OnPersistentCongestion(d.now)
	if d.c.CongestionWindow() != 2*d.mss {
		t.Fatalf("cwnd after persistent congestion %d", d.c.CongestionWindow())
	}
}

func TestCubicOverSimulatedLink(t *testing.T) {
	// End to end over the simulator: CUBIC must fill a 20 Mbit/s, 40 ms
	// path with a 1-BDP buffer reasonably (it is the baseline, not BBR).
	const seed = 600
	cfg := simConfig{rateBps: 20e6, rtt: 40 * time.Millisecond, seed: seed}
	cfg.queueBytes = cfg.bdpBytes()
	c := NewCubic(0, 0)
	s := newSim(t, cfg, c)
	s.run(2*time.Second, nil)
	share := s.linkShare(10 * time.Second)
	if share < 0.85 || s.droppedQueue == 0 {
		t.Fatalf("seed %d: CUBIC used %.1f%% of the link with %d drops", seed, 100*share, s.droppedQueue)
	}
	if c.PacingRateBps() == 0 || c.Name() != "cubic" {
		t.Fatalf("pacing %d name %q", c.PacingRateBps(), c.Name())
	}
}
