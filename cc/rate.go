package cc

import (
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// RateSample is one delivery-rate sample of
// draft-cheng-iccrg-delivery-rate-estimation, generated per ACK event from
// the most recently sent packet it acknowledged.
type RateSample struct {
	// Valid reports whether DeliveryRateBps is usable: the event acked at
	// least one packet and the sampling interval was at least min RTT.
	Valid bool
	// DeliveryRateBps is Delivered over Interval, in bits per second.
	DeliveryRateBps uint64
	// Interval is max(send elapsed, ack elapsed) of the sample.
	Interval time.Duration
	// Delivered is the bytes delivered over Interval (rs.delivered).
	Delivered int64
	// PriorDelivered is the connection's delivered count when the
	// sample's packet was sent (rs.prior_delivered).
	PriorDelivered int64
	// NewlyAcked and NewlyLost are the bytes acked and lost by this event.
	NewlyAcked, NewlyLost int
	// Lost is the bytes lost between sending the sample's packet and now
	// (C.lost - P.lost).
	Lost int64
	// TxInFlight is the bytes in flight when the sample's packet was sent.
	TxInFlight int
	// RTT is now minus the send time of the sample's packet (0 if none).
	RTT time.Duration
	// IsAppLimited reports that the sample's packet was sent while the
	// connection was application-limited.
	IsAppLimited bool
}

// RateSampler is the connection-level state of delivery-rate estimation:
// C.delivered, C.delivered_time, C.first_sent_time, C.lost and the
// app-limited marker. Controllers embed one; the zero value is ready.
type RateSampler struct {
	delivered     int64
	deliveredTime monotime.Time
	firstSentTime monotime.Time
	lost          int64
	appLimitedEnd int64 // C.app_limited: 0, or the delivered count that ends it
}

// Delivered returns the bytes delivered (acked) so far.
func (s *RateSampler) Delivered() int64 { return s.delivered }

// LostBytes returns the bytes declared lost so far.
func (s *RateSampler) LostBytes() int64 { return s.lost }

// AppLimited reports whether the connection is currently marked
// application-limited.
func (s *RateSampler) AppLimited() bool { return s.appLimitedEnd != 0 }

// OnPacketSent snapshots the connection state into the new packet's
// PacketState. bytesInFlight excludes the packet.
func (s *RateSampler) OnPacketSent(now monotime.Time, bytes, bytesInFlight int) PacketState {
	if bytesInFlight == 0 {
		// Restarting from idle: begin new send and ack intervals now.
		s.firstSentTime = now
		s.deliveredTime = now
	}
	return PacketState{
		SentTime:      now,
		Bytes:         bytes,
		Delivered:     s.delivered,
		DeliveredTime: s.deliveredTime,
		FirstSentTime: s.firstSentTime,
		Lost:          s.lost,
		TxInFlight:    bytesInFlight + bytes,
		IsAppLimited:  s.appLimitedEnd != 0,
	}
}

// OnAppLimited marks the connection application-limited until everything
// now in flight is delivered (C.app_limited = C.delivered + inflight).
func (s *RateSampler) OnAppLimited(bytesInFlight int) {
	s.appLimitedEnd = max(s.delivered+int64(bytesInFlight), 1)
}

// OnAck accounts the event's acked and lost packets and returns the rate
// sample. minRTT is the current min RTT estimate; samples over a shorter
// interval are marked invalid (ACK compression would inflate them). A
// minRTT of 0 disables that check.
func (s *RateSampler) OnAck(now monotime.Time, acked, lost []PacketState, minRTT time.Duration) RateSample {
	var rs RateSample
	for i := range lost {
		rs.NewlyLost += lost[i].Bytes
	}
	s.lost += int64(rs.NewlyLost)
	var newest *PacketState
	for i := range acked {
		p := &acked[i]
		rs.NewlyAcked += p.Bytes
		// Packet numbers are never reused, so every acked packet is
		// newly delivered; the newest by send time drives the sample.
		if newest == nil || !p.SentTime.Before(newest.SentTime) {
			newest = p
		}
	}
	if newest == nil {
		return rs
	}
	s.delivered += int64(rs.NewlyAcked)
	s.deliveredTime = now
	if s.appLimitedEnd != 0 && s.delivered > s.appLimitedEnd {
		s.appLimitedEnd = 0
	}
	s.firstSentTime = newest.SentTime

	rs.PriorDelivered = newest.Delivered
	rs.Delivered = s.delivered - newest.Delivered
	rs.Lost = s.lost - newest.Lost
	rs.TxInFlight = newest.TxInFlight
	rs.IsAppLimited = newest.IsAppLimited
	rs.RTT = now.Sub(newest.SentTime)
	sendElapsed := newest.SentTime.Sub(newest.FirstSentTime)
	ackElapsed := now.Sub(newest.DeliveredTime)
	rs.Interval = max(sendElapsed, ackElapsed)
	if rs.Interval <= 0 || rs.Interval < minRTT {
		return rs
	}
	rs.DeliveryRateBps = rateOf(rs.Delivered, rs.Interval)
	rs.Valid = true
	return rs
}
