package cc

import (
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// This file holds the ProbeBW state machine: DOWN (pace 0.9× to drain the
// queue), CRUISE (pace at the estimate with headroom for other flows),
// REFILL (one round at 1.0× with the lower bounds lifted), UP (pace 1.25×,
// raise inflight_hi) and back to DOWN. A cycle lasts a random 2–3 s of
// wall-clock time, or fewer rounds when a Reno flow would probe sooner.

// startProbeBWDown begins a cycle with its DOWN phase.
func (b *BBR) startProbeBWDown(now monotime.Time) {
	b.resetCongestionSignals()
	b.probeUpCnt = int(^uint(0) >> 1)
	b.pickProbeWait()
	b.cycleStamp = now
	b.ackPhase = acksProbeStopping
	b.startRound()
	b.setMode(BBRProbeBWDown)
}

func (b *BBR) startProbeBWCruise() { b.setMode(BBRProbeBWCruise) }

func (b *BBR) startProbeBWRefill() {
	b.resetLowerBounds()
	b.probeUpRounds = 0
	b.probeUpAcks = 0
	b.ackPhase = acksRefilling
	b.startRound()
	b.setMode(BBRProbeBWRefill)
}

func (b *BBR) startProbeBWUp(now monotime.Time, rs *RateSample) {
	b.ackPhase = acksProbeStarting
	b.startRound()
	b.resetFullBw()
	b.fullBw = b.maxBw
	b.lastProbeStart = now
	b.setMode(BBRProbeBWUp)
	b.raiseInflightHiSlope()
}

// setMode switches mode and applies the mode's pacing and cwnd gains.
func (b *BBR) setMode(m BBRMode) {
	b.mode = m
	b.cwndGain = bbrDefaultCwndGain
	switch m {
	case BBRProbeBWDown:
		b.pacingGain = bbrDownPacingGain
	case BBRProbeBWUp:
		b.pacingGain = bbrUpPacingGain
		b.cwndGain = bbrUpCwndGain
	case BBRProbeRTT:
		b.pacingGain = 1
		b.cwndGain = bbrProbeRTTCwndGain
	default:
		b.pacingGain = 1
	}
}

// pickProbeWait randomises when the next bandwidth probe starts, so flows
// sharing a bottleneck do not probe in lockstep.
func (b *BBR) pickProbeWait() {
	b.roundsSinceProbe = b.rng.IntN(2)
	b.probeWait = bbrProbeWaitBase + time.Duration(b.rng.Int64N(int64(time.Second)))
}

// hasElapsedInPhase reports whether d passed since the cycle started.
func (b *BBR) hasElapsedInPhase(now monotime.Time, d time.Duration) bool {
	return now.After(b.cycleStamp.Add(d))
}

// isRenoCoexistenceProbeTime reports whether a Reno flow with the same
// BDP would have probed by now (capped at 63 rounds).
func (b *BBR) isRenoCoexistenceProbeTime() bool {
	renoRounds := min(b.targetInflight()/b.mss, bbrMaxRenoRounds)
	return b.roundsSinceProbe >= renoRounds
}

// isTimeToProbeBW starts REFILL when the cycle's wait is over.
func (b *BBR) isTimeToProbeBW(now monotime.Time) bool {
	if b.hasElapsedInPhase(now, b.probeWait) || b.isRenoCoexistenceProbeTime() {
		b.startProbeBWRefill()
		return true
	}
	return false
}

// isTimeToCruise reports whether DOWN drained inflight to the BDP (and
// below the headroom under inflight_hi).
func (b *BBR) isTimeToCruise() bool {
	if b.inflight > b.inflightWithHeadroom() {
		return false
	}
	return b.inflight <= b.inflightAt(b.maxBw, 1.0)
}

// isTimeToGoDown ends UP once the bandwidth stopped growing; while the
// flow is held back by inflight_hi the plateau check restarts, since
// inflight_hi rather than the path limits it.
//
// UP also ends, as in draft-cardwell-iccrg-bbr-congestion-control-02
// (§4.3.3.6, "estimated queue") and Linux's BBRv3, once it has lasted a
// min RTT and inflight exceeds 1.25 × BDP at the max bandwidth: the
// probe's samples are on their way, and waiting for the 3-round plateau
// alone builds close to a BDP of queue that DOWN cannot drain within a
// cycle at long RTTs.
func (b *BBR) isTimeToGoDown(now monotime.Time, rs *RateSample) bool {
	if b.minRTT > 0 && now.Sub(b.lastProbeStart) >= b.minRTT &&
		b.inflight > b.inflightAt(b.maxBw, bbrUpPacingGain) {
		return true
	}
	if b.cwndLimited && b.cwnd >= b.inflightHi {
		b.resetFullBw()
		b.fullBw = b.maxBw
		return false
	}
	return b.fullBwNow
}

// updateProbeBWCyclePhase runs the ProbeBW state machine on each ACK.
func (b *BBR) updateProbeBWCyclePhase(now monotime.Time, rs *RateSample) {
	if !b.filledPipe {
		return
	}
	b.adaptUpperBounds(now, rs)
	if !b.mode.IsProbeBW() {
		return
	}
	switch b.mode {
	case BBRProbeBWDown:
		if b.isTimeToProbeBW(now) {
			return
		}
		if b.isTimeToCruise() {
			b.startProbeBWCruise()
		}
	case BBRProbeBWCruise:
		b.isTimeToProbeBW(now)
	case BBRProbeBWRefill:
		// After one round of REFILL, probe UP.
		if b.roundStart {
			b.probeSamples = true
			b.startProbeBWUp(now, rs)
		}
	case BBRProbeBWUp:
		if b.isTimeToGoDown(now, rs) {
			b.startProbeBWDown(now)
		}
	}
}
