package recovery

import (
	"fmt"
	"math"
	"time"

	"github.com/wanopt/wanopt/cc"
	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// maxAckDelayMicros is the largest ack delay, in microseconds, that fits a
// time.Duration; larger values from the network are clamped to it before
// the RTT statistics cap them at the peer's max ack delay.
const maxAckDelayMicros = uint64(math.MaxInt64 / int64(time.Microsecond))

// OnAck processes ACK frame f received at now (RFC 9002 §6, appendix A.7).
//
// Malformed ranges return an error wrapping ErrAckInvalid, an
// acknowledgment of a packet number never sent one wrapping ErrAckUnsent;
// either way nothing changed except Stats.BadAcks, and the connection
// should close with a protocol violation.
//
// Otherwise it calls ackedFn with the token of every newly acknowledged
// packet, in ascending packet-number order; takes an RTT sample when the
// largest acknowledged packet is newly acknowledged along with an
// ack-eliciting one (AckDelay in µs, capped at the peer's max ack delay);
// declares lost, calling lostFn in ascending order, the packets the
// packet and time thresholds condemn (§6.1); then calls the controller's
// OnAck once, and OnPersistentCongestion if §7.6 establishes it. A frame
// that acknowledges nothing new changes nothing but spurious-loss counts.
// ackedFn and lostFn may be nil and must not call back into the Sender.
// f is not retained.
func (s *Sender) OnAck(now monotime.Time, f *wire.AckFrame, ackedFn, lostFn func(token uint64)) error {
	if err := f.Validate(); err != nil {
		s.stats.BadAcks++
		return fmt.Errorf("recovery: %w: %w", ErrAckInvalid, err)
	}
	largest := f.Largest()
	if largest >= s.ring.next {
		s.stats.BadAcks++
		return fmt.Errorf("recovery: ACK of packet %d, next to send is %d: %w", largest, s.ring.next, ErrAckUnsent)
	}

	ev := s.beginEvent(now)

	largestNewlyAcked := false
	var largestSent monotime.Time
	newlyAcked, ackElicitingAcked := 0, 0
	// Ranges are descending; walk them backwards to ack in ascending order.
	for i := len(f.Ranges) - 1; i >= 0; i-- {
		r := f.Ranges[i]
		if s.lost.count > 0 {
			n, reorder := s.lost.markAcked(r.Smallest, r.Largest)
			s.stats.SpuriousLosses += uint64(n)
			s.adaptPacketThreshold(reorder)
		}
		lo := max(r.Smallest, s.ring.base)
		for pn := lo; pn <= r.Largest; pn++ {
			p := s.ring.at(pn)
			if p.status != statusOutstanding {
				continue
			}
			p.status = statusAcked
			newlyAcked++
			if pn == largest {
				largestNewlyAcked = true
				largestSent = p.sentTime
			}
			if p.ackEliciting {
				ackElicitingAcked++
				s.removeInFlight(p)
				ev.Acked = append(ev.Acked, p.cc)
			}
			if ackedFn != nil {
				ackedFn(p.token)
			}
		}
	}
	if newlyAcked == 0 {
		return nil
	}
	s.stats.PacketsAcked += uint64(newlyAcked)
	if s.largestAcked == wire.NoPacketNumber || largest > s.largestAcked {
		s.largestAcked = largest
	}
	if largestNewlyAcked && ackElicitingAcked > 0 {
		delay := time.Duration(min(f.AckDelay, maxAckDelayMicros)) * time.Microsecond
		if delay > s.cfg.PeerMaxAckDelay {
			s.stats.AckDelayCapped++
		}
		s.rtt.UpdateRTT(now.Sub(largestSent), delay)
		if s.firstRTTSampleAt == 0 {
			s.firstRTTSampleAt = now
		}
	}
	if f.ECN && f.CE > s.peerCE {
		// The counter's increase, bounded by what this frame newly
		// acknowledged: a peer cannot have marked more.
		ev.ECNCE = int(min(f.CE-s.peerCE, uint64(ackElicitingAcked)))
		s.peerCE = f.CE
	}

	persistent := s.detectLost(now, lostFn)
	s.ptoCount = 0
	s.finishEvent(now, persistent)
	return nil
}

// removeInFlight takes an ack-eliciting packet out of bytes in flight.
func (s *Sender) removeInFlight(p *sentPacket) {
	s.bytesInFlight -= p.bytes
	s.ackElicitingInFlight--
}

// beginEvent empties s.ev for the packets acked or lost at now, keeping
// its slices' storage.
func (s *Sender) beginEvent(now monotime.Time) *cc.AckEvent {
	ev := &s.ev
	ev.Now = now
	ev.Acked = ev.Acked[:0]
	ev.Lost = ev.Lost[:0]
	ev.PriorInFlight = s.bytesInFlight
	ev.ECNCE = 0
	return ev
}

// finishEvent reports s.ev to the controller if it holds any packet,
// signals persistent congestion, refreshes the pacer and drops resolved
// records.
func (s *Sender) finishEvent(now monotime.Time, persistent bool) {
	ev := &s.ev
	ev.BytesInFlight = s.bytesInFlight
	if len(ev.Acked) > 0 || len(ev.Lost) > 0 {
		s.ctrl.OnAck(ev)
	}
	if persistent {
		s.stats.PersistentCongestions++
		s.rtt.OnPersistentCongestion()
		s.ctrl.OnPersistentCongestion(now)
	}
	s.pacerStarted = true
	s.pacer.SetBurstTime(now, s.pacerBurst(now))
	s.pacer.SetRate(now, s.pacingRate())
	s.ring.popResolved()
	s.lost.expire(now.Add(-s.ptoPeriod()))
}

// burstQuietRTTs is how many smoothed RTTs without a packet declared lost
// the pacer's burst waits before it grows with the path (pacerBurst).
const burstQuietRTTs = 8

// pacerBurst is the pacer's burst time at now: cc.PacerBurstFor the path's
// minimum RTT once no packet was declared lost for burstQuietRTTs smoothed
// RTTs, else cc.DefaultPacerBurst. Grown bursts save pacing wake-ups on a
// clean long path, but on a lossy one they cost goodput
// (TestThroughputWarmBBRHighLoss).
func (s *Sender) pacerBurst(now monotime.Time) time.Duration {
	quietFrom := max(s.lastLossAt, s.firstRTTSampleAt)
	if quietFrom == 0 || now.Sub(quietFrom) < burstQuietRTTs*s.rtt.SmoothedRTT() {
		return cc.DefaultPacerBurst
	}
	return cc.PacerBurstFor(s.rtt.MinRTT())
}

// lossDelay is RFC 9002's kTimeThreshold × max(smoothed, latest RTT), at
// least kGranularity.
func (s *Sender) lossDelay() time.Duration {
	rtt := max(s.rtt.SmoothedRTT(), s.rtt.LatestRTT())
	d := rtt * time.Duration(s.cfg.TimeThresholdNum) / time.Duration(s.cfg.TimeThresholdDen)
	return max(d, s.cfg.Granularity)
}

// detectLost declares lost the outstanding packets at or below the
// largest acknowledged one that the packet or time threshold condemns
// (RFC 9002 §6.1, appendix A.10), appends the ack-eliciting ones to
// s.ev.Lost, sets s.lossTime for the earliest remaining candidate, and
// reports whether the newly lost packets establish persistent congestion
// (§7.6.2): two ack-eliciting packets, both sent after the first RTT
// sample, further apart than the persistent congestion duration, with no
// packet between them acknowledged.
func (s *Sender) detectLost(now monotime.Time, lostFn func(token uint64)) (persistent bool) {
	s.lossTime = 0
	if s.largestAcked == wire.NoPacketNumber {
		return false
	}
	delay := s.lossDelay()
	lostSentBy := now.Add(-delay) // packets sent at or before are lost
	pcDuration := s.persistentCongestionDuration()
	inRun := false
	var runStart monotime.Time
	end := min(s.largestAcked, s.ring.next-1)
	for pn := s.ring.base; pn <= end; pn++ {
		p := s.ring.at(pn)
		switch p.status {
		case statusAcked:
			inRun = false
			continue
		case statusLost:
			continue
		}
		if p.sentTime.After(lostSentBy) && pn+s.packetThreshold > s.largestAcked {
			t := p.sentTime.Add(delay)
			if s.lossTime == 0 || t.Before(s.lossTime) {
				s.lossTime = t
			}
			continue
		}
		p.status = statusLost
		s.stats.PacketsLost++
		s.lastLossAt = now
		s.lost.push(pn, now, s.largestAcked)
		if p.ackEliciting {
			s.removeInFlight(p)
			s.ev.Lost = append(s.ev.Lost, p.cc)
			if s.firstRTTSampleAt != 0 && p.sentTime.After(s.firstRTTSampleAt) {
				if !inRun {
					inRun, runStart = true, p.sentTime
				} else if p.sentTime.Sub(runStart) > pcDuration {
					persistent = true
				}
			}
		}
		if lostFn != nil {
			lostFn(p.token)
		}
	}
	return persistent
}

// adaptPacketThreshold raises the packet threshold past reorder, the
// distance by which later packets overtook a packet declared lost that was
// then acknowledged (RFC 9002 §6.1.1 allows it; RFC 8985's RACK does the
// same). On a path that reorders, a fixed threshold of 3 takes every
// reordered packet for lost (at 250 Mbit/s a packet held back 2 ms is
// overtaken by about 40). The time threshold (9/8 RTT) still declares
// real losses. The threshold never goes down: a path that reordered once
// is likely to again.
func (s *Sender) adaptPacketThreshold(reorder uint64) {
	if reorder < s.packetThreshold {
		return
	}
	s.packetThreshold = min(reorder+1, maxPacketThreshold)
	s.stats.PacketThreshold = s.packetThreshold
}

// persistentCongestionDuration is RFC 9002 §7.6.1's (smoothed_rtt +
// max(4×rttvar, kGranularity) + max_ack_delay) × kPersistentCongestionThreshold.
func (s *Sender) persistentCongestionDuration() time.Duration {
	return persistentCongestionThreshold * s.ptoPeriod()
}

// ptoPeriod is the probe timeout without backoff (RFC 9002 §6.2.1).
func (s *Sender) ptoPeriod() time.Duration {
	return s.rtt.SmoothedRTT() + max(4*s.rtt.RTTVar(), s.cfg.Granularity) + s.cfg.PeerMaxAckDelay
}

// ptoDeadline returns when the PTO expires, or 0 when no ack-eliciting
// packet is in flight.
func (s *Sender) ptoDeadline() monotime.Time {
	if s.ackElicitingInFlight == 0 {
		return 0
	}
	base := s.ptoPeriod()
	limit := min(max(2*base, s.cfg.MaxProbeInterval), maxPTOPeriod)
	d := base
	for i := 0; i < s.ptoCount && d < limit; i++ {
		d *= 2
	}
	return s.lastAckElicitingSent.Add(min(d, limit))
}

// NextTimeout returns when OnTimeout must be called next: the
// time-threshold loss deadline if one is pending, else the PTO deadline
// while ack-eliciting packets are in flight, else 0 (no timer). Call it
// again after every OnPacketSent, OnAck and OnTimeout.
func (s *Sender) NextTimeout() monotime.Time {
	if s.lossTime != 0 {
		return s.lossTime
	}
	return s.ptoDeadline()
}

// OnTimeout runs the loss-detection timer at now (RFC 9002 appendix A.9).
// If the time-threshold deadline has passed it declares those packets lost
// (lostFn for each, then the controller's OnAck with an empty Acked list)
// and returns 0. Otherwise, if the PTO has expired, it doubles the next
// PTO and returns the number of probe packets (1 or 2) the connection must
// send now, ack-eliciting, whatever the window and pacer say. Early or
// spurious calls return 0 and change nothing.
func (s *Sender) OnTimeout(now monotime.Time, lostFn func(token uint64)) (probes int) {
	if s.lossTime != 0 {
		if now.Before(s.lossTime) {
			return 0
		}
		s.beginEvent(now)
		persistent := s.detectLost(now, lostFn)
		s.finishEvent(now, persistent)
		return 0
	}
	deadline := s.ptoDeadline()
	if deadline == 0 || now.Before(deadline) {
		return 0
	}
	s.ptoCount++
	s.stats.PTOs++
	s.probesPending = s.cfg.ProbePackets
	return s.cfg.ProbePackets
}
