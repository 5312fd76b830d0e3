package cc

import (
	"math"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// CUBIC constants of RFC 9438.
const (
	cubicC          = 0.4 // segments / s³
	cubicBeta       = 0.7
	cubicAlpha      = 3 * (1 - cubicBeta) / (1 + cubicBeta) // Reno-friendly additive increase
	cubicMinCwndPkt = 2
	// Pacing gains over cwnd/srtt, as Linux uses: double in slow start,
	// 1.2× in congestion avoidance.
	cubicSSPacingGain = 2.0
	cubicCAPacingGain = 1.2
)

// Cubic is the CUBIC congestion controller of RFC 9438 (C = 0.4, β = 0.7,
// fast convergence, Reno-friendly region, no HyStart), with a QUIC-style
// recovery period: one window reduction per round trip of losses. It
// implements Controller and is the comparison baseline for BBR. Not safe
// for concurrent use.
//
// Pacing: PacingRateBps is cwnd/srtt × 2 in slow start and × 1.2 in
// congestion avoidance, and 0 (unpaced) until the first RTT sample.
type Cubic struct {
	mss      int
	cwnd     int
	ssthresh int
	srtt     time.Duration

	// Current congestion-avoidance epoch (RFC 9438 §4).
	epochStart monotime.Time // 0: no epoch yet
	wMaxBytes  float64       // window before the last reduction
	kSec       float64       // time to regrow to wMax, seconds
	wEstBytes  float64       // Reno-friendly estimate
	cwndFrac   float64       // fractional bytes of growth not yet applied

	inRecovery    bool
	recoveryStart monotime.Time
	lastAck       monotime.Time
	appLimited    bool
}

var _ Controller = (*Cubic)(nil)

// NewCubic returns CUBIC in slow start with an initial window of
// initialCwndPackets (10 if <= 0) packets of mss bytes (DefaultMSS if
// <= 0).
func NewCubic(mss, initialCwndPackets int) *Cubic {
	if mss <= 0 {
		mss = DefaultMSS
	}
	if initialCwndPackets <= 0 {
		initialCwndPackets = 10
	}
	return &Cubic{mss: mss, cwnd: initialCwndPackets * mss, ssthresh: math.MaxInt}
}

// Name returns "cubic".
func (c *Cubic) Name() string { return "cubic" }

// CongestionWindow implements Controller.
func (c *Cubic) CongestionWindow() int { return c.cwnd }

// SlowStartThreshold returns ssthresh in bytes (math.MaxInt before the
// first congestion event).
func (c *Cubic) SlowStartThreshold() int { return c.ssthresh }

// WMaxBytes returns W_max, the window before the latest reduction.
func (c *Cubic) WMaxBytes() int { return int(c.wMaxBytes) }

// PacingRateBps implements Controller.
func (c *Cubic) PacingRateBps() uint64 {
	if c.srtt <= 0 {
		return 0
	}
	gain := cubicCAPacingGain
	if c.cwnd < c.ssthresh {
		gain = cubicSSPacingGain
	}
	return uint64(gain * float64(rateOf(int64(c.cwnd), c.srtt)))
}

// OnPacketSent implements Controller.
func (c *Cubic) OnPacketSent(now monotime.Time, bytes, bytesInFlight int) PacketState {
	if bytesInFlight == 0 && c.appLimited && !c.epochStart.IsZero() && !c.lastAck.IsZero() {
		// RFC 9438 §5.8: the idle period does not count as epoch time.
		if idle := now.Sub(c.lastAck); idle > 0 {
			c.epochStart = c.epochStart.Add(idle)
		}
	}
	c.appLimited = false
	return PacketState{SentTime: now, Bytes: bytes, TxInFlight: bytesInFlight + bytes}
}

// OnAppLimited implements Controller: window growth pauses until the
// sender fills the window again.
func (c *Cubic) OnAppLimited(now monotime.Time, bytesInFlight int) { c.appLimited = true }

// OnPersistentCongestion implements Controller: the window collapses to 2
// packets (RFC 9002 §7.6.2) and a new epoch starts from there.
func (c *Cubic) OnPersistentCongestion(now monotime.Time) {
	c.cwnd = cubicMinCwndPkt * c.mss
	c.epochStart = 0
	c.inRecovery = false
}

// OnAck implements Controller.
func (c *Cubic) OnAck(ev *AckEvent) {
	if ev.RTT != nil && ev.RTT.HasSample() {
		c.srtt = ev.RTT.SmoothedRTT()
	}
	if len(ev.Lost) > 0 {
		last := ev.Lost[len(ev.Lost)-1].SentTime
		if !c.inRecovery || last.After(c.recoveryStart) {
			c.onCongestionEvent(ev.Now)
		}
	}
	acked := 0
	for i := range ev.Acked {
		p := &ev.Acked[i]
		if c.inRecovery && p.SentTime.After(c.recoveryStart) {
			c.inRecovery = false
		}
		acked += p.Bytes
	}
	if acked == 0 {
		return
	}
	// Grow only when the window was the limit (RFC 9438 §5.8), and not
	// during recovery.
	limited := ev.PriorInFlight+2*c.mss >= c.cwnd || (c.cwnd < c.ssthresh && ev.PriorInFlight >= c.cwnd/2)
	if !c.inRecovery && limited && !c.appLimited {
		if c.cwnd < c.ssthresh {
			c.cwnd += min(acked, c.ssthresh-c.cwnd)
		} else {
			c.congestionAvoidance(ev.Now, acked)
		}
	}
	c.lastAck = ev.Now
}

// onCongestionEvent reduces the window by β and starts a new epoch.
func (c *Cubic) onCongestionEvent(now monotime.Time) {
	c.inRecovery = true
	c.recoveryStart = now
	w := float64(c.cwnd)
	if w < c.wMaxBytes {
		// Fast convergence: release bandwidth to newer flows.
		c.wMaxBytes = w * (1 + cubicBeta) / 2
	} else {
		c.wMaxBytes = w
	}
	c.cwnd = max(int(w*cubicBeta), cubicMinCwndPkt*c.mss)
	c.ssthresh = c.cwnd
	c.epochStart = 0
	c.cwndFrac = 0
}

// wCubic returns W_cubic(t) in bytes for t seconds into the epoch.
func (c *Cubic) wCubic(t float64) float64 {
	d := t - c.kSec
	return (cubicC*d*d*d)*float64(c.mss) + c.wMaxBytes
}

// congestionAvoidance grows cwnd toward W_cubic(t+RTT), or the
// Reno-friendly estimate when that is larger.
func (c *Cubic) congestionAvoidance(now monotime.Time, acked int) {
	mss := float64(c.mss)
	cwnd := float64(c.cwnd)
	if c.epochStart.IsZero() {
		c.epochStart = now
		if c.wMaxBytes < cwnd {
			// No reduction to recover from (slow start ended by
			// ssthresh): the plateau is here.
			c.wMaxBytes = cwnd
			c.kSec = 0
		} else {
			c.kSec = math.Cbrt((c.wMaxBytes - cwnd) / mss / cubicC)
		}
		c.wEstBytes = cwnd
	}
	t := now.Sub(c.epochStart).Seconds()
	rtt := c.srtt.Seconds()
	target := c.wCubic(t + rtt)
	target = min(max(target, cwnd), 1.5*cwnd)

	// Reno-friendly estimate (RFC 9438 §4.3): alpha segments per window
	// acked, with alpha 1 once W_est passed W_max.
	alpha := cubicAlpha
	if c.wEstBytes >= c.wMaxBytes {
		alpha = 1
	}
	c.wEstBytes += alpha * mss * float64(acked) / cwnd

	var grow float64
	if c.wCubic(t) < c.wEstBytes {
		grow = max(c.wEstBytes-cwnd, 0)
	} else {
		grow = (target - cwnd) * float64(acked) / cwnd
	}
	c.cwndFrac += grow
	if whole := math.Floor(c.cwndFrac); whole >= 1 {
		c.cwnd += int(whole)
		c.cwndFrac -= whole
	}
}

// SetMSS sets the packet size minimums and increments are counted in
// (cc.MSSSetter); mss <= 0 is ignored.
func (c *Cubic) SetMSS(mss int) {
	if mss > 0 {
		c.mss = mss
	}
}
