package cc

import "time"

// InitialRTT is the RTT assumed before the first sample (RFC 9002 §6.2.2).
const InitialRTT = 333 * time.Millisecond

// TimerGranularity is the loss-detection timer granularity kGranularity of
// RFC 9002 §6.1.2.
const TimerGranularity = time.Millisecond

// RTTStats keeps one path's RTT estimates by the rules of RFC 9002 §5:
// min RTT from raw samples, the peer's ack delay subtracted only when that
// does not take the sample below min RTT, and exponential smoothing with
// gains 1/8 (smoothed RTT) and 1/4 (RTT variation). The zero value is not
// ready for use; call NewRTTStats.
type RTTStats struct {
	initialRTT  time.Duration
	latestRTT   time.Duration
	minRTT      time.Duration
	smoothedRTT time.Duration
	rttVar      time.Duration
	maxAckDelay time.Duration
	hasSample   bool
}

// NewRTTStats returns statistics with no sample, which report initialRTT
// as smoothed RTT (InitialRTT if initialRTT <= 0) and initialRTT/2 as RTT
// variation until the first sample.
func NewRTTStats(initialRTT time.Duration) *RTTStats {
	if initialRTT <= 0 {
		initialRTT = InitialRTT
	}
	return &RTTStats{initialRTT: initialRTT}
}

// SetMaxAckDelay sets the peer's max_ack_delay transport parameter. Once it
// is set (handshake confirmed), reported ack delays are capped at it.
func (r *RTTStats) SetMaxAckDelay(d time.Duration) { r.maxAckDelay = d }

// MaxAckDelay returns the peer's max_ack_delay (0 until set).
func (r *RTTStats) MaxAckDelay() time.Duration { return r.maxAckDelay }

// UpdateRTT adds a sample: latestRTT is the time from sending the largest
// newly acked packet to receiving its ACK, ackDelay the delay the peer
// reported in that ACK frame. Samples <= 0 are ignored.
func (r *RTTStats) UpdateRTT(latestRTT, ackDelay time.Duration) {
	if latestRTT <= 0 {
		return
	}
	r.latestRTT = latestRTT
	if !r.hasSample {
		r.hasSample = true
		r.minRTT = latestRTT
		r.smoothedRTT = latestRTT
		r.rttVar = latestRTT / 2
		return
	}
	r.minRTT = min(r.minRTT, latestRTT)
	if ackDelay < 0 {
		ackDelay = 0
	}
	if r.maxAckDelay > 0 {
		ackDelay = min(ackDelay, r.maxAckDelay)
	}
	adjusted := latestRTT
	if latestRTT >= r.minRTT+ackDelay {
		adjusted = latestRTT - ackDelay
	}
	diff := r.smoothedRTT - adjusted
	if diff < 0 {
		diff = -diff
	}
	r.rttVar = (3*r.rttVar + diff) / 4
	r.smoothedRTT = (7*r.smoothedRTT + adjusted) / 8
}

// HasSample reports whether at least one RTT sample was taken.
func (r *RTTStats) HasSample() bool { return r.hasSample }

// LatestRTT returns the most recent raw sample (0 before any sample).
func (r *RTTStats) LatestRTT() time.Duration { return r.latestRTT }

// MinRTT returns the minimum raw sample over the connection's lifetime (0
// before any sample). Ack delay is never subtracted from it.
func (r *RTTStats) MinRTT() time.Duration { return r.minRTT }

// SmoothedRTT returns the smoothed RTT, or the initial RTT before any
// sample.
func (r *RTTStats) SmoothedRTT() time.Duration {
	if !r.hasSample {
		return r.initialRTT
	}
	return r.smoothedRTT
}

// RTTVar returns the RTT variation, or half the initial RTT before any
// sample.
func (r *RTTStats) RTTVar() time.Duration {
	if !r.hasSample {
		return r.initialRTT / 2
	}
	return r.rttVar
}

// PTO returns the probe timeout period of RFC 9002 §6.2.1:
// smoothed_rtt + max(4*rttvar, kGranularity), plus max_ack_delay when
// includeMaxAckDelay (application data packet number space). The caller
// applies the exponential backoff.
func (r *RTTStats) PTO(includeMaxAckDelay bool) time.Duration {
	pto := r.SmoothedRTT() + max(4*r.RTTVar(), TimerGranularity)
	if includeMaxAckDelay {
		pto += r.maxAckDelay
	}
	return pto
}

// OnPersistentCongestion resets min RTT to the latest sample, as RFC 9002
// §5.2 recommends once persistent congestion is established, so that a
// route change to a longer path is learnt. Smoothed RTT and variation keep
// their values.
func (r *RTTStats) OnPersistentCongestion() {
	if r.hasSample {
		r.minRTT = r.latestRTT
	}
}
