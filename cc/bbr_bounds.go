package cc

import (
	"math"

	"github.com/wanopt/wanopt/internal/monotime"
)

// This file holds BBR's loss- and ECN-driven bounds: the long-term upper
// bound inflight_hi (learnt when a bandwidth probe pushes loss above 2 %
// or CE marks above 50 %) and the short-term lower bounds bw_lo and
// inflight_lo (cut by beta on congestion outside bandwidth probing).

// isInflightTooHigh reports whether the sample saw a loss rate above
// bbrLossThresh of the volume in flight when its packet was sent, or an
// ECN-CE rate above bbrECNThresh.
func (b *BBR) isInflightTooHigh(lost int64, txInFlight int, ceBytes, ackedBytes int) bool {
	if lost > 0 && txInFlight > 0 && float64(lost) > float64(txInFlight)*bbrLossThresh {
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
	lostPrefix := (bbrLossThresh*inflightPrev - lostPrev) / (1 - bbrLossThresh)
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
	if !b.lossRoundStart {
		return
	}
	b.checkStartupHighLoss()
	b.adaptLowerBoundsFromCongestion()
	b.prevAckedInRound, b.prevLostInRound = b.ackedInRound, b.lostInRound
	b.lossInRound = false
	b.lossEventsInRound = 0
	b.lostInRound = 0
	b.ackedInRound = 0
	b.appLimitedInRound = false
}

// checkStartupHighLoss ends Startup when the queue overflowed before the
// bandwidth plateau was seen: as the draft's BBRCheckStartupHighLoss, the
// connection has been in loss recovery for a round trip (here: recovery
// was active in the previous completed round), the loss rate exceeded
// bbrLossThresh and the round saw at least bbrStartupFullLoss loss
// events.
//
// Deviation from the draft, on purpose: the loss rate is taken over the
// last two loss rounds, not one. Startup's rounds are a few hundred
// packets when random loss starts to show, and at that size 1 % random
// loss exceeds 2 % in a single round often enough (a few % of rounds)
// that about one Startup in ten ended at a fraction of the path's
// bandwidth, with inflight_hi set there; over two rounds (twice the
// packets, and loss that persisted) that becomes rare. A queue overflow
// loses far more than 2 % and still ends Startup within a round of the
// draft's exit.
func (b *BBR) checkStartupHighLoss() {
	if b.mode != BBRStartup || b.filledPipe || b.recoveryRounds < 1 {
		return
	}
	if b.lossEventsInRound < bbrStartupFullLoss {
		return
	}
	lost := b.lostInRound + b.prevLostInRound
	total := b.ackedInRound + b.prevAckedInRound + lost
	if float64(lost) <= float64(total)*bbrLossThresh {
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
// Deviation from the draft, on purpose: a round counts as congested only
// if its loss rate exceeds bbrLossThresh (the same 2 % that inflight_hi
// uses), not on any single loss. Otherwise random, non-congestive loss
// (1 % on a radio or satellite hop) cuts bw_lo by the loss rate and the
// pacing margin every round and ratchets throughput down between probes.
//
// Likewise, a round in which a rate sample was application-limited does
// not count: the flow was not filling its share of the pipe, so its loss
// says nothing about inflight being too high, and such rounds are small
// (after an idle period a round may carry a hundred packets), so the
// loss rate of a few random losses easily passes 2 %. bw_latest of such
// a round is the application's rate, not the path's, and would cut bw_lo
// by the full beta until the next probe.
func (b *BBR) adaptLowerBoundsFromCongestion() {
	if b.isProbingBw() || !b.lossInRound || b.appLimitedInRound {
		return
	}
	total := b.ackedInRound + b.lostInRound
	if float64(b.lostInRound) <= float64(total)*bbrLossThresh {
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

// resetCongestionSignals starts a fresh loss round's accounting.
func (b *BBR) resetCongestionSignals() {
	b.lossInRound = false
	b.lossEventsInRound = 0
	b.lostInRound = 0
	b.ackedInRound = 0
	b.appLimitedInRound = false
	b.bwLatest = 0
	b.inflightLatest = 0
}
