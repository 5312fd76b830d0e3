package cc

import (
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// This file turns BBR's model into control parameters: pacing rate, send
// quantum and cwnd, including the light packet-conservation recovery.

// initPacingRate paces the first flight at the Startup gain times the
// initial window per srtt.
func (b *BBR) initPacingRate(srtt time.Duration) {
	if srtt <= 0 {
		srtt = time.Millisecond
	}
	nominal := rateOf(int64(b.initCwnd), srtt)
	b.pacingRateBps = uint64(bbrStartupPacingGain * float64(nominal))
}

// setPacingRate paces at gain × bw less the 1 % margin. Before the pipe
// is full the rate never decreases, so a low early sample cannot slow
// Startup down.
func (b *BBR) setPacingRate(gain float64) {
	if b.bw == 0 {
		return
	}
	rate := uint64(gain * float64(b.bw) * (1 - bbrPacingMargin))
	if b.filledPipe || rate > b.pacingRateBps {
		b.pacingRateBps = rate
	}
}

// setSendQuantum sizes bursts to 1 ms at the pacing rate, between 2
// packets and 64 KiB.
func (b *BBR) setSendQuantum() {
	q := int(min(bytesAtRate(b.pacingRateBps, time.Millisecond), bbrMaxSendQuantum))
	b.sendQuantum = max(q, 2*b.mss)
}

// maxInflight is cwnd_gain × BDP plus the ACK-aggregation allowance plus
// three send quanta. The draft takes the larger of the model's window and
// the quanta; Linux's BBR adds them, as here, so that where the BDP is
// small a sender or receiver not scheduled for a millisecond does not
// leave the link idle. The targets that decide when to stop probing or
// draining (inflightAt) keep the draft's rule.
func (b *BBR) maxInflight() int {
	return b.quantizationBudget(b.bdpMultiple(b.bw, b.cwndGain) + b.extraAcked.Get() + 3*b.sendQuantum)
}

// saveCwnd remembers the cwnd to restore after recovery or ProbeRTT.
func (b *BBR) saveCwnd() {
	if !b.inRecovery && b.mode != BBRProbeRTT {
		b.priorCwnd = b.cwnd
	} else {
		b.priorCwnd = max(b.priorCwnd, b.cwnd)
	}
}

// restoreCwnd undoes a temporary cwnd reduction.
func (b *BBR) restoreCwnd() { b.cwnd = max(b.cwnd, b.priorCwnd) }

// updateRecovery enters recovery on the first congestive loss of a new
// loss episode (a lost packet sent after the previous episode began) and
// leaves it when a packet sent after the episode began is acked. On entry
// cwnd drops to what is in flight plus what this ACK delivered, and for
// the rest of the round packet conservation holds (one packet out per
// packet acked).
//
// Deviation from the draft, on purpose: once the pipe is full, a loss
// enters recovery only when it is congestive by the draft's own measure
// (isLossCongestive). Random loss would otherwise open an episode every
// round, each pinning cwnd to the bytes in flight, and after idle or
// ProbeRTT cwnd would regrow by a few packets per round instead of
// returning to the model's target. Startup keeps the draft's rule (any
// loss).
func (b *BBR) updateRecovery(ev *AckEvent, rs *RateSample) {
	if b.inRecovery && len(ev.Acked) > 0 && ev.Acked[len(ev.Acked)-1].SentTime.After(b.recoveryStart) {
		b.inRecovery = false
		b.packetConservation = false
		b.restoreCwnd()
	}
	if len(ev.Lost) == 0 || b.filledPipe && !b.isLossCongestive(ev.Lost) {
		return
	}
	lastLost := ev.Lost[len(ev.Lost)-1].SentTime
	if b.inRecovery && !lastLost.After(b.recoveryStart) {
		return
	}
	b.recoveryInRound = true
	b.saveCwnd()
	b.inRecovery = true
	b.recoveryStart = ev.Now
	b.packetConservation = true
	b.cwnd = max(ev.BytesInFlight+max(rs.NewlyAcked, b.mss), b.minPipeCwnd())
}

// isLossCongestive reports whether any of the newly lost packets saw a
// loss rate above bbrLossThresh of its tx_in_flight between its sending
// and now. It is called after the rate sampler counted the losses.
func (b *BBR) isLossCongestive(lost []PacketState) bool {
	total := b.rs.LostBytes()
	for i := range lost {
		p := &lost[i]
		if b.isInflightTooHigh(total-p.Lost, p.TxInFlight, 0, 0) {
			return true
		}
	}
	return false
}

// setCwnd grows cwnd by what was acked, up to the model's max inflight,
// then applies the ProbeRTT and model bounds.
func (b *BBR) setCwnd(rs *RateSample) {
	if b.inRecovery && rs.NewlyLost > 0 {
		b.cwnd = max(b.cwnd-rs.NewlyLost, b.mss)
	}
	target := b.maxInflight()
	switch {
	case b.packetConservation:
		b.cwnd = max(b.cwnd, b.inflight+rs.NewlyAcked)
	case b.filledPipe:
		b.cwnd = min(b.cwnd+rs.NewlyAcked, target)
	case b.cwnd < target || b.rs.Delivered() < int64(b.initCwnd):
		b.cwnd += rs.NewlyAcked
	}
	b.cwnd = max(b.cwnd, b.minPipeCwnd())
	if b.mode == BBRProbeRTT {
		b.cwnd = min(b.cwnd, b.probeRTTCwnd())
	}
	b.boundCwndForModel()
}

// boundCwndForModel caps cwnd by inflight_hi (with headroom while
// cruising or in ProbeRTT) and by inflight_lo.
func (b *BBR) boundCwndForModel() {
	limit := int(^uint(0) >> 1)
	switch {
	case b.mode.IsProbeBW() && b.mode != BBRProbeBWCruise:
		limit = b.inflightHi
	case b.mode == BBRProbeRTT || b.mode == BBRProbeBWCruise:
		limit = b.inflightWithHeadroom()
	}
	limit = min(limit, b.inflightLo)
	limit = max(limit, b.minPipeCwnd())
	b.cwnd = min(b.cwnd, limit)
}

// handleRestartFromIdle runs when an app-limited, idle connection sends
// again. The model is kept (a warm tunnel keeps its bandwidth and RTT):
// in ProbeBW the first flight is paced at the estimated bandwidth rather
// than a probing gain, and a ProbeRTT whose time is up ends now.
func (b *BBR) handleRestartFromIdle(now monotime.Time) {
	b.idleRestart = true
	b.extraAckedT0 = now
	b.extraAckedSum = 0
	if b.mode.IsProbeBW() {
		b.setPacingRate(1)
	} else if b.mode == BBRProbeRTT {
		b.checkProbeRTTDone(now)
	}
}
