package cc

import (
	"math"
	"math/bits"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// creditPerByte is the pacer's credit unit: one byte is worth 8e9
// rate-nanoseconds (bits/s × ns), so refilling is an exact integer
// product rate×elapsed and no rounding error accumulates.
const creditPerByte = 8 * uint64(time.Second)

// DefaultPacerBurst is the time at the rate the pacer releases at once
// after idle, and twice the quantum it waits for once its credit ran out
// (see Pacer). PacerBurstFor lengthens it on long paths.
const DefaultPacerBurst = 2 * time.Millisecond

// maxPacerBurst bounds PacerBurstFor: a quantum of 4 ms.
const maxPacerBurst = 8 * time.Millisecond

// PacerBurstFor is the pacer burst for a path whose minimum RTT is
// minRTT: a 25th of it, at least minGrownBurst and at most 8 ms. The
// pacer grows its burst to that only as far as grownBurstPackets
// packets, which halves the sender's pacing wake-ups while a batch still
// leaves within 2 % of the RTT.
func PacerBurstFor(minRTT time.Duration) time.Duration {
	return min(max(minRTT/25, minGrownBurst), maxPacerBurst)
}

// minGrownBurst is the shortest burst PacerBurstFor gives, however short
// the path: the time 96 packets of 1350 bytes take at 250 Mbit/s, so a
// sender at that rate waits for a quantum of 48 packets rather than 23.
// The bottleneck's queue takes at most 1.1 ms more of burst while the
// sender streams, and the sender's pacing sleeps fall to about a quarter.
const minGrownBurst = 4200 * time.Microsecond

// grownBurstPackets bounds a burst lengthened by SetBurstTime: 96
// packets (130 KB of 1350-byte packets), a quantum of 48 (65 KB), about
// what Linux's TSO autosizing lets a TCP sender put in one burst (1 ms
// at the rate, at most 64 KB). Unbounded bursts hurt recovery on lossy
// paths (the random-loss bars of `wanbench sim --bars`); the sender
// therefore grows the burst only after eight round trips without a loss.
const grownBurstPackets = 96

// maxPacerBurstBytes caps the burst at very high rates (2 ms at 10 Gbit/s
// is 2.5 MB); it keeps credit arithmetic far from overflow.
const maxPacerBurstBytes = 4 << 20

// Pacer spreads packets at a rate set by the congestion controller. It is a
// byte bucket: credit accrues at the rate, up to a burst of
// max(2 packets, 2 ms at the rate; see SetBurstTime), and each sent packet
// spends its size.
// A packet may be sent when the credit is positive; the credit may then go
// negative by less than one packet, which delays the next send by exactly
// that much, so the long-run rate is exact (integer arithmetic, no drift).
//
// Once the credit is spent, the pacer waits for a quantum of half a burst
// (1 ms at the rate by default, at least one packet; SetBurstTime raises
// it) before it releases more. A sender also woken by ACKs then sends in
// batches instead of one or two packets per wake-up. The long-run rate is
// the same; a batch leaves at most 1 ms later, and the bottleneck's queue
// takes at most 1 ms of extra burst, as Linux's TSO autosizing allows.
//
// A rate of 0 means unpaced: Budget is unlimited and NextSendTime is now.
// A Pacer is not safe for concurrent use.
type Pacer struct {
	mss        int
	rateBps    uint64
	credit     int64 // in creditPerByte units; may be negative
	maxCredit  int64
	quantum    int64 // credit a sender waits for once it has spent it all
	waiting    bool  // the credit ran out: hold until it reaches quantum
	lastUpdate monotime.Time
	started    bool
	burstTime  time.Duration // SetBurstTime
}

// NewPacer returns a pacer for packets of at most mss bytes (DefaultMSS if
// mss <= 0), unpaced until SetRate.
func NewPacer(mss int) *Pacer {
	if mss <= 0 {
		mss = DefaultMSS
	}
	return &Pacer{mss: mss, burstTime: DefaultPacerBurst}
}

// RateBps returns the current rate in bits per second (0: unpaced).
func (p *Pacer) RateBps() uint64 { return p.rateBps }

// BurstBytes returns the largest number of bytes the pacer releases at
// once after an idle period: max(2×mss, the burst time at the rate).
func (p *Pacer) BurstBytes() int { return int(p.maxCredit / int64(creditPerByte)) }

// SetRate changes the rate at now. Credit earned before now is kept at the
// old rate. Call it whenever the controller's PacingRateBps may have
// changed (after OnAck); setting the same rate again is cheap.
func (p *Pacer) SetRate(now monotime.Time, rateBps uint64) {
	if rateBps == p.rateBps && p.started {
		p.refill(now)
		return
	}
	p.refill(now)
	p.rateBps = rateBps
	p.setBurst()
}

// SetBurstTime lengthens the burst to d at the rate (DefaultPacerBurst if
// d <= 0), from now on, as far as grownBurstPackets packets; the quantum
// is half of it. A sender sets it from its path's RTT with
// PacerBurstFor.
func (p *Pacer) SetBurstTime(now monotime.Time, d time.Duration) {
	if d <= 0 {
		d = DefaultPacerBurst
	}
	if d == p.burstTime {
		return
	}
	p.refill(now)
	p.burstTime = d
	if p.started {
		p.setBurst()
	}
}

// setBurst sizes the bucket and the quantum for the rate and burst time.
func (p *Pacer) setBurst() {
	burst := uint64(2 * p.mss)
	if p.rateBps > 0 {
		burst = max(burst, bytesAtRate(p.rateBps, DefaultPacerBurst))
		if p.burstTime > DefaultPacerBurst {
			burst = max(burst, min(bytesAtRate(p.rateBps, p.burstTime), grownBurstPackets*uint64(p.mss)))
		}
	}
	burst = min(burst, maxPacerBurstBytes)
	p.maxCredit = int64(burst * creditPerByte)
	p.quantum = max(p.maxCredit/2, int64(creditPerByte))
	if !p.started {
		p.started = true
		p.credit = p.maxCredit
	}
	p.credit = min(p.credit, p.maxCredit)
}

// refill adds the credit earned since the last update.
func (p *Pacer) refill(now monotime.Time) {
	if !p.started {
		p.lastUpdate = now
		return
	}
	d := now.Sub(p.lastUpdate)
	if d <= 0 {
		return
	}
	p.lastUpdate = now
	if p.rateBps == 0 {
		p.credit = p.maxCredit
		return
	}
	missing := uint64(p.maxCredit - p.credit) // > 0 unless full
	hi, lo := bits.Mul64(p.rateBps, uint64(d))
	if hi != 0 || lo >= missing {
		p.credit = p.maxCredit
		return
	}
	p.credit += int64(lo)
}

// Budget returns how many bytes may be sent at now without waiting: the
// accumulated credit rounded down, 0 while the pacer waits for its
// quantum, or math.MaxInt when unpaced. A packet may be sent whenever
// Budget > 0, even if it is larger than the budget.
func (p *Pacer) Budget(now monotime.Time) int {
	if p.rateBps == 0 {
		return math.MaxInt
	}
	if !p.ready(now) {
		return 0
	}
	return int(uint64(p.credit) / creditPerByte)
}

// ready refills at now and says whether a packet may be sent: the credit
// is at least one byte, and at least the quantum if it ran out before.
func (p *Pacer) ready(now monotime.Time) bool {
	p.refill(now)
	if p.credit < int64(creditPerByte) {
		p.waiting = true
		return false
	}
	if p.waiting && p.credit < p.quantum {
		return false
	}
	p.waiting = false
	return true
}

// NextSendTime returns the earliest instant, not before now, at which a
// packet may be sent (see ready). It returns now when a packet may go
// immediately or the pacer is unpaced.
func (p *Pacer) NextSendTime(now monotime.Time) monotime.Time {
	if p.rateBps == 0 || p.ready(now) {
		return now
	}
	need := uint64(p.quantum - p.credit) // ns×rate units
	waitNs := (need + p.rateBps - 1) / p.rateBps
	return now.Add(time.Duration(waitNs))
}

// OnSent spends bytes of credit for a packet sent at now. Sending is
// allowed to overdraw the credit; the debt is repaid before the next send.
func (p *Pacer) OnSent(now monotime.Time, bytes int) {
	if p.rateBps == 0 {
		return
	}
	p.refill(now)
	p.credit -= int64(bytes) * int64(creditPerByte)
	// Bound the debt so a caller ignoring the pacer cannot stall it for
	// long: at most one burst of debt.
	if p.credit < -p.maxCredit {
		p.credit = -p.maxCredit
	}
}
