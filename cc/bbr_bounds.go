package cc

import (
	"math"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// This file holds BBR's loss- and ECN-driven bounds: the long-term upper
// bound inflight_hi (learnt when a bandwidth probe pushes loss above 2 %
// or CE marks above 50 %) and the short-term lower bounds bw_lo and
// inflight_lo (cut by beta on congestion outside bandwidth probing).

// Random loss.
//
// The draft treats a loss rate above 2 % as congestion. On a path that
// loses packets at random (radio, satellite, a dirty fibre span) every
// round then looks congested, the bounds are cut round after round and
// the tunnel falls to a few Mbit/s. So BBR here learns the loss the path
// has without any queue and counts only the loss above it as congestion:
// the threshold is bbrLossThresh above the learnt rate
// (TestBBRLearnsHighRandomLoss; the loss bars of `wanbench sim --bars`).
//
// The rate is learnt from quiet rounds: ProbeBW DOWN or CRUISE, not
// application-limited, at least quietMinPackets packets, and a least RTT
// sample within quietRTTSlack of the min RTT, so no queue stood at the
// bottleneck. A drop-tail queue that was seen empty dropped nothing; a
// competing flow keeps a standing queue, so its congestion losses are not
// taken for the path's (the tunnel still yields to CUBIC). The sums decay
// by quietDecay per quiet round (about the last eight count), and the
// rate is capped at maxRandomLoss.
const (
	quietMinPackets = 64
	quietDecay      = 0.875
	maxRandomLoss   = 0.15
)

// quietRTTSlack is how far above the min RTT a quiet round's least RTT
// sample may be: a millisecond or 1/16 of the min RTT, for timer and ACK
// delay noise.
func quietRTTSlack(minRTT time.Duration) time.Duration {
	return max(time.Millisecond, minRTT/16)
}

// randomLossRate returns the path's learnt random loss rate (0 until
// quiet rounds were seen).
func (b *BBR) randomLossRate() float64 {
	if b.quietTotal < float64(quietMinPackets*b.mss) {
		return 0
	}
	return min(b.quietLost/b.quietTotal, maxRandomLoss)
}

// lossThresh is the loss rate above which inflight counts as too high.
func (b *BBR) lossThresh() float64 { return bbrLossThresh + b.randomLossRate() }

// learnRandomLoss adds the loss round just completed to the random-loss
// estimate if it was quiet.
func (b *BBR) learnRandomLoss() {
	total := b.ackedInRound + b.lostInRound
	quiet := (b.mode == BBRProbeBWDown || b.mode == BBRProbeBWCruise) && !b.appLimitedInRound &&
		total >= quietMinPackets*b.mss && b.minRTT > 0 && b.minRTTInRound > 0 &&
		b.minRTTInRound <= b.minRTT+quietRTTSlack(b.minRTT)
	if !quiet {
		return
	}
	b.quietLost = b.quietLost*quietDecay + float64(b.lostInRound)
	b.quietTotal = b.quietTotal*quietDecay + float64(total)
}

// isInflightTooHigh reports whether the sample saw a loss rate above
// lossThresh of the volume in flight when its packet was sent, or an
// ECN-CE rate above bbrECNThresh.
func (b *BBR) isInflightTooHigh(lost int64, txInFlight int, ceBytes, ackedBytes int) bool {
	if lost > 0 && txInFlight > 0 && float64(lost) > float64(txInFlight)*b.lossThresh() {
		return true
	}
	return ceBytes > 0 && ackedBytes > 0 && float64(ceBytes) > float64(ackedBytes)*bbrECNThresh
}

// onLosses handles each newly lost packet as it is declared (the draft's
// BBRHandleLostPacket): during a bandwidth probe, a loss rate above the
// threshold caps inflight_hi at the volume where the threshold was
// crossed.
func (b *BBR) onLosses(now monotime.Time, ev *AckEvent) {
	lost := b.rs.LostBytes()
	for i := range ev.Lost {
		p := &ev.Lost[i]
		lost += int64(p.Bytes)
		if !b.probeSamples {
			continue
		}
		lostSince := lost - p.Lost
		if b.isInflightTooHigh(lostSince, p.TxInFlight, 0, 0) {
			txInFlight := b.inflightHiFromLostPacket(p, lostSince)
			b.handleInflightTooHigh(now, txInFlight, p.IsAppLimited)
		}
	}
}

// inflightHiFromLostPacket estimates the volume in flight at which the
// loss rate crossed the threshold, interpolating inside the lost packet.
func (b *BBR) inflightHiFromLostPacket(p *PacketState, lostSince int64) int {
	size := float64(p.Bytes)
	inflightPrev := float64(p.TxInFlight) - size
	lostPrev := float64(lostSince) - size
	thresh := b.lossThresh()
	lostPrefix := (thresh*inflightPrev - lostPrev) / (1 - thresh)
	return int(inflightPrev + lostPrefix)
}

// handleInflightTooHigh lowers inflight_hi to the volume that proved too
// much and ends a probe in UP.
func (b *BBR) handleInflightTooHigh(now monotime.Time, txInFlight int, appLimited bool) {
	b.probeSamples = false
	if !appLimited {
		b.inflightHi = max(txInFlight, int(float64(b.targetInflight())*bbrBeta))
	}
	if b.mode == BBRProbeBWUp {
		b.startProbeBWDown(now)
	}
}

// checkInflightTooHigh reports whether the ACK's sample saw too much loss
// or CE, acting on it while probe samples are expected.
func (b *BBR) checkInflightTooHigh(now monotime.Time, rs *RateSample, ceBytes int) bool {
	if !b.isInflightTooHigh(rs.Lost, rs.TxInFlight, ceBytes, rs.NewlyAcked) {
		return false
	}
	if b.probeSamples {
		b.handleInflightTooHigh(now, rs.TxInFlight, rs.IsAppLimited)
	}
	return true
}

// adaptUpperBounds raises inflight_hi when a probe saw acceptable loss and
// advances the max-bandwidth filter once per cycle.
func (b *BBR) adaptUpperBounds(now monotime.Time, rs *RateSample) {
	if b.ackPhase == acksProbeStarting && b.roundStart {
		b.ackPhase = acksProbeFeedback // first ACKs of the probe's data
	}
	if b.ackPhase == acksProbeStopping && b.roundStart {
		// The probe's samples are in; the current sample is the best
		// chance to see the highest available bw, so now is the time to
		// forget the previous cycle's samples.
		b.probeSamples = false
		b.ackPhase = acksInit
		if b.mode.IsProbeBW() && !rs.IsAppLimited {
			b.advanceMaxBwFilter()
		}
	}
	if b.checkInflightTooHigh(now, rs, b.ceBytes) {
		return
	}
	if b.inflightHi == math.MaxInt {
		return // no upper bound to raise
	}
	if rs.TxInFlight > b.inflightHi {
		b.inflightHi = rs.TxInFlight
	}
	if b.mode == BBRProbeBWUp {
		b.probeInflightHiUpward(rs)
	}
}

// raiseInflightHiSlope doubles, each round of UP, how fast inflight_hi
// grows: 1, 2, 4, … packets per round.
func (b *BBR) raiseInflightHiSlope() {
	growth := b.mss << min(b.probeUpRounds, bbrMaxProbeUpRounds)
	b.probeUpRounds = min(b.probeUpRounds+1, bbrMaxProbeUpRounds)
	b.probeUpCnt = max(b.cwnd/growth, 1) // packets acked per 1-packet raise
}

// probeInflightHiUpward raises inflight_hi while UP is limited by it.
func (b *BBR) probeInflightHiUpward(rs *RateSample) {
	if !b.cwndLimited || b.cwnd < b.inflightHi {
		return
	}
	b.probeUpAcks += rs.NewlyAcked
	cnt := b.probeUpCnt * b.mss // bytes acked per raise of one packet
	if b.probeUpAcks >= cnt {
		delta := b.probeUpAcks / cnt
		b.probeUpAcks -= delta * cnt
		b.inflightHi += delta * b.mss
	}
	if b.roundStart {
		b.raiseInflightHiSlope()
	}
}

// inflightWithHeadroom leaves bbrHeadroom of inflight_hi to other flows.
func (b *BBR) inflightWithHeadroom() int {
	if b.inflightHi == math.MaxInt {
		return math.MaxInt
	}
	headroom := max(b.mss, int(bbrHeadroom*float64(b.inflightHi)))
	return max(b.inflightHi-headroom, b.minPipeCwnd())
}

// updateCongestionSignals feeds the bandwidth filter and, once per loss
// round, the lower bounds and the Startup loss exit.
func (b *BBR) updateCongestionSignals(rs *RateSample, ev *AckEvent) {
	b.updateMaxBw(rs)
	b.ackedInRound += rs.NewlyAcked
	if rs.IsAppLimited {
		b.appLimitedInRound = true
	}
	if rs.NewlyLost > 0 {
		b.lossInRound = true
		b.lossEventsInRound++
		b.lostInRound += rs.NewlyLost
	}
	// Only a packet sent while the flow pushed (not application-limited)
	// tells whether the flow's own sending left the queue empty: after
	// idle, a burst's first flight goes out app-limited into an empty
	// queue, and its samples at the min RTT would make the round quiet
	// even when the rest of the burst overflowed the queue.
	if rs.RTT > 0 && !rs.IsAppLimited && (b.minRTTInRound == 0 || rs.RTT < b.minRTTInRound) {
		b.minRTTInRound = rs.RTT
	}
	if !b.lossRoundStart {
		return
	}
	b.learnRandomLoss()
	b.checkStartupHighLoss()
	b.adaptLowerBoundsFromCongestion()
	b.prevAckedInRound, b.prevLostInRound = b.ackedInRound, b.lostInRound
	b.resetRoundSignals()
}

// checkStartupHighLoss ends Startup when the queue overflowed before the
// bandwidth plateau was seen: as the draft's BBRCheckStartupHighLoss, the
// connection has been in loss recovery for a round trip (here: recovery
// was active in the previous completed round), the loss rate exceeded
// bbrLossThresh and the round saw at least bbrStartupFullLoss loss
// events.
//
// Deviations from the draft, on purpose: the loss rate is taken over the
// last two loss rounds, not one, because in Startup's small rounds 1 %
// random loss often exceeds 2 % in a single round; a queue overflow loses
// far more and still ends Startup within a round. And a round in which
// the queue was seen empty does not end Startup on loss at all (random
// loss, not overflow).
func (b *BBR) checkStartupHighLoss() {
	if b.mode != BBRStartup || b.filledPipe || b.recoveryRounds < 1 {
		return
	}
	if b.lossEventsInRound < bbrStartupFullLoss {
		return
	}
	if b.minRTT > 0 && b.minRTTInRound > 0 && b.minRTTInRound <= b.minRTT+quietRTTSlack(b.minRTT) {
		// The queue was empty at some time in the round: the loss is
		// the path's, not an overflow (see learnRandomLoss).
		return
	}
	lost := b.lostInRound + b.prevLostInRound
	total := b.ackedInRound + b.prevAckedInRound + lost
	if float64(lost) <= float64(total)*b.lossThresh() {
		return
	}
	b.filledPipe = true
	b.inflightHi = max(b.bdp(b.maxBw), b.inflightLatest)
}

// isProbingBw reports the states that push inflight up on purpose and so
// ignore the lower bounds.
func (b *BBR) isProbingBw() bool {
	return b.mode == BBRStartup || b.mode == BBRProbeBWRefill || b.mode == BBRProbeBWUp
}

// adaptLowerBoundsFromCongestion cuts bw_lo and inflight_lo after a loss
// round that saw congestive loss, outside bandwidth probing.
//
// Deviations from the draft, on purpose: a round counts as congested only
// if its loss rate exceeds lossThresh, not on any single loss, or random
// loss would ratchet bw_lo down between probes. And a round with an
// application-limited sample does not count: its loss says nothing about
// inflight being too high, and its bw_latest is the application's rate,
// not the path's.
func (b *BBR) adaptLowerBoundsFromCongestion() {
	if b.isProbingBw() || !b.lossInRound || b.appLimitedInRound {
		return
	}
	total := b.ackedInRound + b.lostInRound
	if float64(b.lostInRound) <= float64(total)*b.lossThresh() {
		return
	}
	if b.bwLo == math.MaxUint64 {
		b.bwLo = b.maxBw
	}
	if b.inflightLo == math.MaxInt {
		b.inflightLo = b.cwnd
	}
	b.bwLo = max(b.bwLatest, uint64(bbrBeta*float64(b.bwLo)))
	b.inflightLo = max(b.inflightLatest, int(bbrBeta*float64(b.inflightLo)))
}

// resetLowerBounds lifts bw_lo and inflight_lo.
func (b *BBR) resetLowerBounds() {
	b.bwLo = math.MaxUint64
	b.inflightLo = math.MaxInt
}

// resetCongestionSignals starts a fresh loss round's accounting and drops
// the latest delivery samples.
func (b *BBR) resetCongestionSignals() {
	b.resetRoundSignals()
	b.bwLatest = 0
	b.inflightLatest = 0
}

// resetRoundSignals clears what the loss round just ended accumulated.
func (b *BBR) resetRoundSignals() {
	b.lossInRound = false
	b.lossEventsInRound = 0
	b.lostInRound = 0
	b.ackedInRound = 0
	b.appLimitedInRound = false
	b.minRTTInRound = 0
}
