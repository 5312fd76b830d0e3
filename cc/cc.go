// Package cc holds wanopt's congestion controllers (BBR, CUBIC, a fixed
// rate), the pacer, delivery-rate estimation and RTT statistics.
//
// Everything here is pure code: no goroutines, no sockets, no clock. Every
// entry point takes the current time as a monotime.Time, and no type is
// safe for concurrent use; the owning connection serialises calls.
//
// # Units
//
//   - Sizes and windows are in bytes (int).
//   - Rates are in bits per second (uint64): the suffix Bps always means
//     bits per second, as link speeds are quoted. A pacing rate of 0 means
//     "unpaced".
//   - Durations are time.Duration; instants are monotime.Time.
//
// # How the loss/ack layer drives a Controller
//
// The controller keeps no map of sent packets. The loss/ack layer (package
// tunnel) owns sent-packet bookkeeping and bytes in flight:
//
//  1. A packet may be sent while bytesInFlight < CongestionWindow() (the
//     last may overshoot by less than one packet) and a Pacer fed with
//     PacingRateBps() has budget for it.
//  2. For every ack-eliciting packet it calls OnPacketSent with the bytes
//     in flight *before* the packet, and stores the returned PacketState
//     with it. Pure ACKs are not reported.
//  3. For every ACK frame it removes the newly acked and newly lost (RFC
//     9002 packet or time threshold) packets, updates RTTStats, then calls
//     OnAck once with both lists in ascending send order. Losses declared
//     by the loss-detection timer come the same way with no Acked.
//  4. When it has nothing to send although cwnd and pacer allow it, it
//     calls OnAppLimited, so samples taken while under-using the path do
//     not lower the model.
//  5. When RFC 9002 §7.6 declares persistent congestion it calls
//     OnPersistentCongestion. A PTO alone does not touch the controller
//     (RFC 9002 §6.2).
//
// Packet numbers are never reused, so an acked PacketState is unambiguous;
// retransmitted data travels in new packets with their own PacketState.
package cc

import (
	"math/bits"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// DefaultMSS is the default maximum datagram payload, in bytes, that the
// tunnel puts in one packet; controllers use it for their packet-based
// minimums and increments when given mss <= 0.
const DefaultMSS = 1350

// PacketState is the per-packet record created by Controller.OnPacketSent.
// The loss/ack layer stores it unchanged with the sent packet and hands it
// back, by value, in AckEvent.Acked or AckEvent.Lost. The fields other than
// SentTime and Bytes are the delivery-rate snapshot of
// draft-cheng-iccrg-delivery-rate-estimation and are meaningful only to the
// controller that produced them.
type PacketState struct {
	// SentTime is when the packet was sent.
	SentTime monotime.Time
	// Bytes is the packet's size as counted in bytes in flight.
	Bytes int
	// Delivered is the connection's delivered byte count when it was sent
	// (P.delivered).
	Delivered int64
	// DeliveredTime is the connection's delivered time when it was sent
	// (P.delivered_time).
	DeliveredTime monotime.Time
	// FirstSentTime is the send time of the packet that started the
	// current send-rate interval (P.first_sent_time).
	FirstSentTime monotime.Time
	// Lost is the connection's lost byte count when it was sent (P.lost).
	Lost int64
	// TxInFlight is the bytes in flight including this packet, just after
	// it was sent (P.tx_in_flight).
	TxInFlight int
	// IsAppLimited reports that the connection was application-limited
	// when the packet was sent (P.is_app_limited).
	IsAppLimited bool
}

// AckEvent is everything one ACK frame (or one loss-detection timeout)
// taught the loss/ack layer. It is passed by pointer so the layer can reuse
// one AckEvent and its slices across calls; the controller does not retain
// the event or its slices after OnAck returns.
type AckEvent struct {
	// Now is when the ACK frame was processed.
	Now monotime.Time
	// Acked lists the packets newly acknowledged by this frame, in
	// ascending send order (ascending packet number).
	Acked []PacketState
	// Lost lists the packets newly declared lost while processing this
	// frame (or by the loss timer), in ascending send order.
	Lost []PacketState
	// PriorInFlight is bytes in flight before Acked and Lost were removed.
	PriorInFlight int
	// BytesInFlight is bytes in flight after Acked and Lost were removed.
	BytesInFlight int
	// RTT holds the path's RTT statistics, already updated with this
	// frame's sample (if it produced one). It must not be nil.
	RTT *RTTStats
	// ECNCE is the number of packets newly reported as ECN-CE marked by
	// this frame (the increase of the ECN-CE counter); 0 if ECN is unused.
	ECNCE int
}

// Controller is a congestion controller driven by the loss/ack layer as the
// package documentation describes. Implementations are not safe for
// concurrent use.
type Controller interface {
	// OnPacketSent records a packet of bytes that counts toward bytes in
	// flight, sent at now while bytesInFlight bytes (excluding this packet)
	// were already in flight. The returned state must be handed back in
	// an AckEvent when the packet is acked or declared lost.
	OnPacketSent(now monotime.Time, bytes, bytesInFlight int) PacketState
	// OnAck processes one ACK frame: all newly acked and newly lost
	// packets together. ev.RTT must already include this frame's sample.
	OnAck(ev *AckEvent)
	// OnAppLimited tells the controller that the sender had no data to
	// send at now although cwnd and pacing allowed it, with bytesInFlight
	// in flight.
	OnAppLimited(now monotime.Time, bytesInFlight int)
	// OnPersistentCongestion is called when RFC 9002 §7.6 declares
	// persistent congestion (after the lost packets were reported through
	// OnAck).
	OnPersistentCongestion(now monotime.Time)
	// CongestionWindow returns the bytes allowed in flight.
	CongestionWindow() int
	// PacingRateBps returns the pacing rate in bits per second; 0 means
	// the controller does not ask for pacing.
	PacingRateBps() uint64
	// Name returns a short lower-case name ("bbr", "cubic", "fixed").
	Name() string
}

// MSSSetter is implemented by controllers whose packet size can change
// during the connection (the tunnel's path MTU discovery): SetMSS sets
// the largest packet payload, in bytes, that minimums and increments are
// counted in from now on. The window already granted is kept in bytes.
type MSSSetter interface {
	SetMSS(mss int)
}

// mulDiv returns a*b/c rounded down, without intermediate overflow. It
// saturates at the maximum uint64 when the quotient does not fit, and
// returns 0 when c is 0.
func mulDiv(a, b, c uint64) uint64 {
	if c == 0 {
		return 0
	}
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return ^uint64(0)
	}
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// bytesAtRate returns how many bytes a rate of rateBps bits per second
// carries in d (0 for negative d).
func bytesAtRate(rateBps uint64, d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return mulDiv(rateBps, uint64(d), 8*uint64(time.Second))
}

// rateOf returns the rate in bits per second of bytes delivered over d; 0
// if d is not positive.
func rateOf(bytes int64, d time.Duration) uint64 {
	if d <= 0 || bytes <= 0 {
		return 0
	}
	return mulDiv(uint64(bytes)*8, uint64(time.Second), uint64(d))
}
