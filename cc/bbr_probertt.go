package cc

import "github.com/wanopt/wanopt/internal/monotime"

// This file holds ProbeRTT: when min RTT was not re-measured for 5 s, BBR
// cuts inflight to half a BDP for at least 200 ms and one round so that
// the path's queue (its own included) drains and the propagation delay
// shows.

// probeRTTCwnd is the ProbeRTT window: 0.5 × BDP, at least 4 packets.
func (b *BBR) probeRTTCwnd() int {
	return max(b.bdpMultiple(b.bw, bbrProbeRTTCwndGain), b.minPipeCwnd())
}

// checkProbeRTT enters ProbeRTT when due and runs it while in it.
func (b *BBR) checkProbeRTT(now monotime.Time, rs *RateSample) {
	if b.mode != BBRProbeRTT && b.probeRTTExpired && !b.idleRestart {
		b.saveCwnd()
		b.setMode(BBRProbeRTT)
		b.probeRTTCount++
		b.probeRTTDoneStamp = 0
		b.ackPhase = acksProbeStopping
		b.startRound()
	}
	if b.mode == BBRProbeRTT {
		b.handleProbeRTT(now)
	}
	if rs.Delivered > 0 {
		b.idleRestart = false
	}
}

// handleProbeRTT waits for inflight to reach the ProbeRTT window, then
// holds it for bbrProbeRTTDuration and at least one round.
func (b *BBR) handleProbeRTT(now monotime.Time) {
	// Samples taken with the reduced window say nothing about bandwidth.
	b.rs.OnAppLimited(b.inflight)
	if b.probeRTTDoneStamp == 0 && b.inflight <= b.probeRTTCwnd() {
		b.probeRTTDoneStamp = now.Add(bbrProbeRTTDuration)
		b.probeRTTRoundDone = false
		b.startRound()
	} else if b.probeRTTDoneStamp != 0 {
		if b.roundStart {
			b.probeRTTRoundDone = true
		}
		if b.probeRTTRoundDone {
			b.checkProbeRTTDone(now)
		}
	}
}

// checkProbeRTTDone leaves ProbeRTT once its time is up.
func (b *BBR) checkProbeRTTDone(now monotime.Time) {
	if b.probeRTTDoneStamp == 0 || !now.After(b.probeRTTDoneStamp) {
		return
	}
	b.probeRTTMinStamp = now // next ProbeRTT in 5 s at the earliest
	b.restoreCwnd()
	b.resetLowerBounds()
	if b.filledPipe {
		b.startProbeBWDown(now)
		b.startProbeBWCruise()
	} else {
		b.enterStartup()
	}
}
