package cc

import (
	"math"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// This file holds BBR's path model: round counting, the max-bandwidth
// filter, ACK aggregation, full-pipe detection and the min RTT estimate.

// startRound begins a new round trip: it ends when a packet sent after
// now is acked.
func (b *BBR) startRound() { b.nextRoundDelivered = b.rs.Delivered() }

// updateRound advances the round count when the sample's packet was sent
// after the current round started (round counting by delivered bytes).
func (b *BBR) updateRound(rs *RateSample) {
	if rs.PriorDelivered >= b.nextRoundDelivered {
		b.startRound()
		b.roundCount++
		b.roundsSinceProbe++
		b.roundStart = true
		b.cwndLimited = b.cwndLimitedNow
		b.cwndLimitedNow = false
		b.packetConservation = false
		if b.recoveryInRound {
			b.recoveryRounds++
		} else {
			b.recoveryRounds = 0
		}
		b.recoveryInRound = b.inRecovery
	} else {
		b.roundStart = false
	}
}

// updateLatestDeliverySignals tracks the largest delivery rate and volume
// seen in the current loss round (bw_latest, inflight_latest).
func (b *BBR) updateLatestDeliverySignals(rs *RateSample) {
	b.lossRoundStart = false
	if rs.Valid {
		b.bwLatest = max(b.bwLatest, rs.DeliveryRateBps)
	}
	b.inflightLatest = max(b.inflightLatest, int(rs.Delivered))
	if rs.PriorDelivered >= b.lossRoundDelivered {
		b.lossRoundDelivered = b.rs.Delivered()
		b.lossRoundStart = true
	}
}

// advanceLatestDeliverySignals starts the next loss round's maxima.
func (b *BBR) advanceLatestDeliverySignals(rs *RateSample) {
	if b.lossRoundStart {
		b.bwLatest = 0
		if rs.Valid {
			b.bwLatest = rs.DeliveryRateBps
		}
		b.inflightLatest = int(rs.Delivered)
	}
}

// updateMaxBw feeds the sample into the 2-cycle max filter.
func (b *BBR) updateMaxBw(rs *RateSample) {
	b.updateRound(rs)
	if !rs.Valid {
		return
	}
	if rs.DeliveryRateBps >= b.maxBw || !rs.IsAppLimited {
		b.bwSlots[1] = max(b.bwSlots[1], rs.DeliveryRateBps)
		b.maxBw = max(b.bwSlots[0], b.bwSlots[1])
	}
}

// advanceMaxBwFilter ages the max filter by one ProbeBW cycle.
func (b *BBR) advanceMaxBwFilter() {
	b.cycleCount++
	b.bwSlots[0], b.bwSlots[1] = b.bwSlots[1], 0
	b.maxBw = b.bwSlots[0]
}

// boundBwForModel sets the bandwidth the model uses.
func (b *BBR) boundBwForModel() { b.bw = min(b.maxBw, b.bwLo) }

// updateAckAggregation estimates the excess of ACKed data over what the
// bandwidth estimate explains (ACK aggregation), max-filtered over 10
// rounds, so cwnd can keep the pipe full across ACK bursts.
func (b *BBR) updateAckAggregation(now monotime.Time, rs *RateSample) {
	interval := now.Sub(b.extraAckedT0)
	expected := int(bytesAtRate(b.bw, interval))
	if b.extraAckedSum <= expected {
		b.extraAckedSum = 0
		b.extraAckedT0 = now
		expected = 0
	}
	b.extraAckedSum += rs.NewlyAcked
	extra := min(b.extraAckedSum-expected, b.cwnd)
	b.extraAcked.Update(extra, b.roundCount)
}

// resetFullBw restarts plateau detection.
func (b *BBR) resetFullBw() {
	b.fullBw = 0
	b.fullBwCount = 0
	b.fullBwNow = false
}

// checkFullBwReached declares the pipe full after bbrFullBwCount rounds in
// which the max bandwidth grew less than 25 %.
func (b *BBR) checkFullBwReached(rs *RateSample) {
	if b.fullBwNow || !b.roundStart || rs.IsAppLimited || !rs.Valid {
		return
	}
	if float64(b.maxBw) >= float64(b.fullBw)*bbrFullBwThresh {
		b.fullBw = b.maxBw
		b.fullBwCount = 0
		return
	}
	b.fullBwCount++
	b.fullBwNow = b.fullBwCount >= bbrFullBwCount
	if b.fullBwNow {
		b.filledPipe = true
	}
}

// enterStartup starts (or restarts) the Startup state.
func (b *BBR) enterStartup() {
	b.mode = BBRStartup
	b.pacingGain = bbrStartupPacingGain
	b.cwndGain = bbrStartupCwndGain
}

// checkStartupDone leaves Startup for Drain once the pipe is full.
func (b *BBR) checkStartupDone() {
	if b.mode == BBRStartup && b.filledPipe {
		b.mode = BBRDrain
		b.pacingGain = bbrDrainPacingGain
		b.cwndGain = bbrStartupCwndGain
	}
}

// checkDrain enters ProbeBW once the Startup queue drained (inflight at
// most one BDP).
func (b *BBR) checkDrain(now monotime.Time) {
	if b.mode == BBRDrain && b.inflight <= b.inflightAt(b.bw, 1.0) {
		b.startProbeBWDown(now)
	}
}

// updateMinRTT maintains min_rtt over a 10 s window and the 5 s ProbeRTT
// timer.
//
// Deviation from the draft, on purpose: a sample within minRTTTolerance
// of the current ProbeRTT min (not only a lower one) refreshes the
// ProbeRTT timer, keeping the lower value, so a path whose propagation
// delay is re-measured in ProbeBW_DOWN skips ProbeRTT, as the draft
// intends.
func (b *BBR) updateMinRTT(now monotime.Time, rs *RateSample) {
	b.probeRTTExpired = now.After(b.probeRTTMinStamp.Add(bbrProbeRTTInterval))
	switch {
	case rs.RTT <= 0:
	case rs.RTT < b.probeRTTMinDelay || b.probeRTTExpired:
		b.probeRTTMinDelay = rs.RTT
		b.probeRTTMinStamp = now
	case rs.RTT <= b.probeRTTMinDelay+b.minRTTTolerance():
		b.probeRTTMinStamp = now // the propagation delay was seen again
	}
	minRTTExpired := now.After(b.minRTTStamp.Add(bbrMinRTTFilterLen))
	if b.probeRTTMinDelay < b.minRTT || b.minRTT == 0 || minRTTExpired {
		if b.probeRTTMinDelay != time.Duration(math.MaxInt64) {
			b.minRTT = b.probeRTTMinDelay
			b.minRTTStamp = b.probeRTTMinStamp
		}
	}
}

// minRTTTolerance is how far above the ProbeRTT min an RTT sample may be
// and still count as seeing the path's propagation delay again: the larger
// of
//   - the serialisation time of one full-size packet at the bandwidth
//     estimate, since a small packet (a PING) may have set the minimum;
//   - 1/minRTTToleranceDiv of the min RTT, for the jitter of a real path
//     (host scheduling, link-layer retries).
//
// Without it ProbeRTT runs every 5 s. A path whose delay grew still gets
// its ProbeRTT. The tolerance is 0 until the bandwidth is estimated.
func (b *BBR) minRTTTolerance() time.Duration {
	if b.bw == 0 {
		return 0
	}
	serialisation := time.Duration(mulDiv(uint64(b.mss)*8, uint64(time.Second), b.bw))
	jitter := time.Duration(0)
	if b.probeRTTMinDelay != time.Duration(math.MaxInt64) {
		jitter = b.probeRTTMinDelay / minRTTToleranceDiv
	}
	return max(serialisation, jitter)
}

// minRTTToleranceDiv sets the jitter part of minRTTTolerance: 1/8 of the
// min RTT, under the standing queue ProbeRTT exists to find (BBR's own
// queue stays below 0.25 min RTT), and above the jitter of a radio hop or
// a busy router.
const minRTTToleranceDiv = 8

// bdp returns the bandwidth-delay product at bw in bytes, or the initial
// window while min RTT is unknown.
func (b *BBR) bdp(bw uint64) int {
	if b.minRTT == 0 {
		return b.initCwnd
	}
	return int(min(bytesAtRate(bw, b.minRTT), math.MaxInt32))
}

// bdpMultiple returns gain × BDP at bw, in bytes.
func (b *BBR) bdpMultiple(bw uint64, gain float64) int {
	if b.minRTT == 0 {
		return b.initCwnd
	}
	return int(gain * float64(b.bdp(bw)))
}

// quantizationBudget adds room for offload bursts and the minimum window.
func (b *BBR) quantizationBudget(inflight int) int {
	inflight = max(inflight, 3*b.sendQuantum, b.minPipeCwnd())
	if b.mode == BBRProbeBWUp {
		inflight += 2 * b.mss
	}
	return inflight
}

// inflightAt is the draft's BBRInflight(bw, gain): the volume that keeps
// a path at bw full with the given gain, quantization budget included.
func (b *BBR) inflightAt(bw uint64, gain float64) int {
	return b.quantizationBudget(b.bdpMultiple(bw, gain))
}

// targetInflight is min(BDP, cwnd): the volume this flow aims to keep.
func (b *BBR) targetInflight() int { return min(b.bdp(b.bw), b.cwnd) }

func (b *BBR) minPipeCwnd() int { return bbrMinPipeCwndPkts * b.mss }
