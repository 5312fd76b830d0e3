package recovery

import (
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// Defaults of ReceiverConfig.
const (
	// DefaultMaxAckDelay is how long a Receiver delays an ACK at most. It
	// is 5 ms rather than RFC 9000's 25 ms: the delay matters only when
	// fewer than AckEveryPackets packets arrive (the tail of a burst, a
	// slow flow), where it adds straight to the peer's RTT samples and its
	// PTO; on a short path 25 ms would dominate both. It costs at most 200
	// extra ACKs a second.
	DefaultMaxAckDelay = 5 * time.Millisecond
	// DefaultAckEveryPackets is the number of ack-eliciting packets that
	// makes an ACK due (RFC 9000 §13.2.2) once DefaultMinAckInterval has
	// passed since the previous ACK.
	DefaultAckEveryPackets = 2
	// DefaultMinAckInterval and DefaultMaxAckEveryPackets thin ACKs at
	// high packet rates, as ACK decimation does: at most one ACK per
	// interval unless that many packets wait. Below about 24 Mbit/s
	// nothing changes; at 250 Mbit/s an ACK goes every 10 packets instead
	// of 2. The peer's controller sees ACKs at most 1 ms apart, which
	// BBR's ACK-aggregation allowance absorbs.
	DefaultMinAckInterval     = time.Millisecond
	DefaultMaxAckEveryPackets = 10
	// DefaultTrackedRanges is how many ranges of received packet numbers
	// a Receiver keeps.
	DefaultTrackedRanges = wire.MaxAckRanges
	// DefaultAckRanges is how many ranges, newest first, an ACK frame
	// reports. 32 ranges cost at most ~130 bytes on a lossy path and cover
	// 32 losses per round trip between acknowledged ACKs.
	DefaultAckRanges = 32
)

// ReceiverConfig configures NewReceiver. The zero value gives the defaults.
type ReceiverConfig struct {
	// MaxAckDelay bounds how long an ack-eliciting packet waits for its
	// ACK (DefaultMaxAckDelay if <= 0). The peer's SenderConfig
	// PeerMaxAckDelay should be at least this.
	MaxAckDelay time.Duration
	// AckEveryPackets is how many ack-eliciting packets make an ACK due
	// once MinAckInterval has passed since the last ACK
	// (DefaultAckEveryPackets if <= 0); see SetAckEveryPackets.
	AckEveryPackets int
	// MinAckInterval is the least time between two ACKs sent for
	// AckEveryPackets packets (DefaultMinAckInterval if 0; negative:
	// none, every AckEveryPackets packets are acknowledged at once).
	MinAckInterval time.Duration
	// MaxAckEveryPackets makes an ACK due at once, whatever the
	// interval (DefaultMaxAckEveryPackets if <= 0; at least
	// AckEveryPackets).
	MaxAckEveryPackets int
	// TrackedRanges bounds the ranges of received packet numbers kept;
	// when a new gap needs more, the oldest range is dropped
	// (DefaultTrackedRanges if <= 0).
	TrackedRanges int
	// AckRanges bounds the ranges per ACK frame, at most
	// wire.MaxAckRanges (DefaultAckRanges if <= 0 or too large).
	AckRanges int
}

// ReceiverStats is a snapshot of a Receiver's counters.
type ReceiverStats struct {
	PacketsReceived uint64 // new packets recorded
	Duplicates      uint64 // packets already received or below the pruned floor
	RangesDropped   uint64 // oldest ranges dropped for lack of room
	AcksSent        uint64 // OnAckSent calls
	Ranges          int    // ranges currently tracked
}

// Receiver records the packet numbers received and decides when an ACK
// frame is due (RFC 9000 §13.2): at once after an out-of-order
// ack-eliciting packet or AckEveryPackets ack-eliciting packets, otherwise
// MaxAckDelay after the first ack-eliciting packet not yet acknowledged.
// See the package documentation for the calling sequence. It is not safe
// for concurrent use.
type Receiver struct {
	cfg  ReceiverConfig
	set  rangeSet
	ackN int

	largest   uint64 // wire.NoPacketNumber until the first packet
	largestAt monotime.Time

	elicitingSinceAck int
	firstUnackedAt    monotime.Time // first ack-eliciting packet since the last ACK
	dueAt             monotime.Time // when the ACK became due at once; 0 if not
	newSinceAck       bool          // any packet recorded since the last ACK
	lastAckAt         monotime.Time // when the last ACK was sent; 0: never
	countAt           monotime.Time // when AckEveryPackets packets were waiting; 0: not yet

	stats ReceiverStats
}

// NewReceiver returns a Receiver with nothing received.
func NewReceiver(cfg ReceiverConfig) *Receiver {
	if cfg.MaxAckDelay <= 0 {
		cfg.MaxAckDelay = DefaultMaxAckDelay
	}
	if cfg.AckEveryPackets <= 0 {
		cfg.AckEveryPackets = DefaultAckEveryPackets
	}
	if cfg.MinAckInterval == 0 {
		cfg.MinAckInterval = DefaultMinAckInterval
	}
	if cfg.MinAckInterval < 0 {
		cfg.MinAckInterval = 0
	}
	if cfg.MaxAckEveryPackets <= 0 {
		cfg.MaxAckEveryPackets = DefaultMaxAckEveryPackets
	}
	cfg.MaxAckEveryPackets = max(cfg.MaxAckEveryPackets, cfg.AckEveryPackets)
	if cfg.TrackedRanges <= 0 {
		cfg.TrackedRanges = DefaultTrackedRanges
	}
	if cfg.AckRanges <= 0 || cfg.AckRanges > wire.MaxAckRanges {
		cfg.AckRanges = DefaultAckRanges
	}
	return &Receiver{
		cfg:     cfg,
		set:     newRangeSet(cfg.TrackedRanges),
		ackN:    cfg.AckEveryPackets,
		largest: wire.NoPacketNumber,
	}
}

// SetAckEveryPackets changes how many ack-eliciting packets make an ACK
// due (at least 1). A connection may raise it at high packet rates to
// save ACKs, at the cost of burstier feedback for the peer's controller.
// It raises MaxAckEveryPackets to n if lower.
func (r *Receiver) SetAckEveryPackets(n int) {
	r.ackN = max(n, 1)
	r.cfg.MaxAckEveryPackets = max(r.cfg.MaxAckEveryPackets, r.ackN)
}

// LargestReceived returns the largest packet number received, or
// wire.NoPacketNumber; it is what wire.DecodePacketNumber wants.
func (r *Receiver) LargestReceived() uint64 { return r.largest }

// OnPacketReceived records authenticated packet pn, received at now. It
// returns true for a duplicate (already received, or older than what the
// Receiver still tracks), which the connection should drop without
// processing; a duplicate changes nothing but Stats.
func (r *Receiver) OnPacketReceived(now monotime.Time, pn uint64, ackEliciting bool) (duplicate bool) {
	dup, dropped := r.set.add(pn)
	if dup {
		r.stats.Duplicates++
		return true
	}
	r.stats.PacketsReceived++
	if dropped {
		r.stats.RangesDropped++
	}
	// NoPacketNumber+1 wraps to 0: the first packet is in order if it is 0.
	inOrder := pn == r.largest+1
	if r.largest == wire.NoPacketNumber || pn > r.largest {
		r.largest, r.largestAt = pn, now
	}
	r.newSinceAck = true
	if !ackEliciting {
		return false
	}
	r.elicitingSinceAck++
	if r.firstUnackedAt == 0 {
		r.firstUnackedAt = now
	}
	if r.elicitingSinceAck == r.ackN {
		r.countAt = now
	}
	if r.dueAt == 0 && (!inOrder || r.elicitingSinceAck >= r.cfg.MaxAckEveryPackets) {
		r.dueAt = now
	}
	return false
}

// AckDue reports whether an ACK frame should be sent at now, in an
// ACK-only packet if no other packet is going out.
func (r *Receiver) AckDue(now monotime.Time) bool {
	if r.elicitingSinceAck == 0 {
		return false
	}
	return !now.Before(r.NextTimeout())
}

// countDueAt is when the packets waiting make an ACK due by their count
// (AckEveryPackets of them, no sooner than MinAckInterval after the
// last ACK), or 0 when too few wait.
func (r *Receiver) countDueAt() monotime.Time {
	if r.elicitingSinceAck < r.ackN {
		return 0
	}
	at := r.countAt
	if at == 0 { // the threshold was lowered since
		at = r.firstUnackedAt
	}
	if r.lastAckAt == 0 || r.cfg.MinAckInterval == 0 {
		return at
	}
	return max(at, r.lastAckAt.Add(r.cfg.MinAckInterval))
}

// AckPending reports whether any packet arrived since the last ACK sent,
// so that an ACK frame is worth piggybacking on an outgoing packet.
func (r *Receiver) AckPending() bool { return r.newSinceAck }

// NextTimeout returns when an ACK becomes due: a time at or before now if
// it is due already, the delayed-ACK deadline otherwise, or 0 when no
// ack-eliciting packet awaits acknowledgment.
func (r *Receiver) NextTimeout() monotime.Time {
	if r.elicitingSinceAck == 0 {
		return 0
	}
	if r.dueAt != 0 {
		return r.dueAt
	}
	timer := r.firstUnackedAt.Add(r.cfg.MaxAckDelay)
	if t := r.countDueAt(); t != 0 && t.Before(timer) {
		return t
	}
	return timer
}

// BuildAck fills f with the ACK frame to send at now: up to AckRanges
// ranges, largest first, and the delay since the largest packet arrived
// in microseconds. It reuses f.Ranges' backing array (it allocates only if
// that has less capacity than AckRanges), and returns false, leaving f
// alone, if there is nothing to acknowledge. Call OnAckSent once the
// frame is in a packet.
func (r *Receiver) BuildAck(now monotime.Time, f *wire.AckFrame) bool {
	rs := r.set.r
	if len(rs) == 0 {
		return false
	}
	f.Ranges = f.Ranges[:0]
	for i := len(rs) - 1; i >= 0 && len(f.Ranges) < r.cfg.AckRanges; i-- {
		f.Ranges = append(f.Ranges, rs[i])
	}
	f.AckDelay = 0
	if rs[len(rs)-1].Largest == r.largest && now.After(r.largestAt) {
		f.AckDelay = uint64(now.Sub(r.largestAt) / time.Microsecond)
	}
	f.ECN, f.ECT0, f.ECT1, f.CE = false, 0, 0, 0
	return true
}

// OnAckSent tells the Receiver that an ACK frame built by BuildAck was
// sent at now: the ACK is no longer due and the delayed-ACK timer stops.
func (r *Receiver) OnAckSent(now monotime.Time) {
	r.elicitingSinceAck = 0
	r.firstUnackedAt = 0
	r.dueAt = 0
	r.countAt = 0
	r.newSinceAck = false
	r.lastAckAt = now
	r.stats.AcksSent++
}

// OnAckOfAckReceived tells the Receiver that the peer acknowledged a
// packet carrying an ACK frame whose largest acknowledged packet number
// was largest: the peer knows about every packet up to it, so those
// ranges are no longer reported (RFC 9000 §13.2.4). Packets at or below
// largest that arrive later are reported as duplicates.
func (r *Receiver) OnAckOfAckReceived(largest uint64) {
	if r.largest == wire.NoPacketNumber || largest > r.largest {
		// An ACK frame cannot cover a packet never received.
		return
	}
	r.set.prune(largest)
}

// Stats returns a snapshot of the counters.
func (r *Receiver) Stats() ReceiverStats {
	st := r.stats
	st.Ranges = len(r.set.r)
	return st
}
