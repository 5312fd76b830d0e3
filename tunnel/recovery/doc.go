// Package recovery is the tunnel connection's loss-recovery layer: it tracks
// sent packets, detects losses and probes with the RFC 9002 algorithms, drives
// a cc.Controller and a cc.Pacer (Sender), and decides what and when to
// acknowledge (Receiver).
//
// Like the rest of the tunnel core it is sans-IO: no goroutines, sockets or
// clock. Every entry point takes now, a monotime.Time that must be nonzero
// and must not go backwards between calls. Neither type is safe for
// concurrent use; the owning connection serialises calls.
//
// # Packet numbers
//
// The connection has a single packet-number space. Packet numbers start
// at 0 and increase by exactly one per packet sent; none is reused, and
// retransmitted data travels in new packets. The Sender sees every packet
// number (OnPacketSent in order, ACK-only packets included), so it keeps
// its records in a ring indexed by packet number.
//
// # Tokens
//
// The Sender does not know frames. With every packet the connection passes
// an opaque uint64 token. Every token is handed back exactly once: to the
// ackedFn callback of OnAck when the packet is newly acknowledged, or to
// the lostFn callback of OnAck or OnTimeout when it is declared lost. A
// packet declared lost and acknowledged later (a spurious loss) is counted
// in Stats, but its token is not reported again: stream data is
// offset-based, so retransmitting data that did arrive is harmless.
//
// # Driving a Sender
//
//	for each packet built:    s.OnPacketSent(now, pn, bytes, ackEliciting, token)
//	for each ACK frame read:  err := s.OnAck(now, &f, acked, lost)  // err: close with a protocol violation
//	before sending:           t := s.TimeToSend(now)  // now: go; later: wait until t; 0: cwnd full, wait for an ACK
//	nothing to send:          s.OnAppLimited(now)
//	timer:                    arm at s.NextTimeout(); on expiry probes := s.OnTimeout(now, lost)
//
// After OnTimeout returns probes > 0 the connection sends that many
// ack-eliciting packets at once (new data, a retransmission, or a PING),
// regardless of cwnd and pacing; TimeToSend returns now until they are sent.
//
// # Driving a Receiver
//
//	for each packet authenticated:  dup := r.OnPacketReceived(now, pn, ackEliciting)
//	when building a packet:         if r.AckDue(now) (or piggybacking anyway) { r.BuildAck(now, &f); write f; r.OnAckSent(now) }
//	timer:                          arm at r.NextTimeout(); on expiry AckDue(now) is true: send an ACK-only packet
//	when the peer acks a packet that carried our ACK frame with largest L:  r.OnAckOfAckReceived(L)
//
// The connection itself must remember which of its sent packets carried an
// ACK frame and that frame's largest acknowledged packet number (it learns
// the token back from the Sender's ackedFn).
//
// A connection that only sends ACK-only packets (a pure receiver) must
// make one of them ack-eliciting (add a PING) now and then (RFC 9000
// §13.2.4), or the peer never acknowledges them and their records pile
// up in the Sender (Stats.TrackedPackets).
package recovery
