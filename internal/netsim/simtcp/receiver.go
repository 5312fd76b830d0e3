package simtcp

import (
	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/netsim"
)

// ReceiverStats are a Receiver's counters.
type ReceiverStats struct {
	DeliveredBytes     int64         // in-order bytes handed to the (instant) application
	Segments           uint64        // data segments received
	DuplicateSegments  uint64        // segments wholly below what was already delivered
	OutOfOrderSegments uint64        // segments that arrived above a hole
	Acks               uint64        // ACKs sent
	Done               monotime.Time // when the last byte (FIN) was delivered; 0 until then
}

// Receiver is the receiving end of a bulk transfer. It implements
// netsim.Endpoint; it is not safe for concurrent use.
type Receiver struct {
	cfg      Config
	rcvNxt   int64
	ooo      intervalSet // out-of-order bytes above rcvNxt
	latest   int64       // start of the latest out-of-order segment, -1 if none
	total    int64       // end of the FIN segment, -1 until seen
	tsRecent monotime.Time
	needAck  bool
	unacked  int           // in-order segments not yet acknowledged
	ackAt    monotime.Time // delayed-ACK deadline, 0 if none
	stats    ReceiverStats
	fresh    []span
}

var _ netsim.Endpoint = (*Receiver)(nil)

func newReceiver(cfg Config) *Receiver {
	return &Receiver{cfg: cfg, latest: -1, total: -1}
}

// Stats returns the receiver's counters.
func (r *Receiver) Stats() ReceiverStats {
	s := r.stats
	s.DeliveredBytes = r.rcvNxt
	return s
}

// Done reports whether every byte up to FIN has been delivered.
func (r *Receiver) Done() bool { return !r.stats.Done.IsZero() }

// HandleDatagram implements netsim.Endpoint.
func (r *Receiver) HandleDatagram(now monotime.Time, b []byte) {
	d, ok := parseData(b)
	if !ok || len(b) != r.cfg.HeaderBytes+d.n {
		return
	}
	r.stats.Segments++
	end := d.seq + int64(d.n)
	if d.fin {
		r.total = end
	}
	switch {
	case end <= r.rcvNxt:
		r.stats.DuplicateSegments++
		r.needAck = true
	case end > r.rcvNxt+int64(r.cfg.ReceiveBufferBytes):
		r.needAck = true // beyond the window: drop
	case d.seq <= r.rcvNxt:
		if r.unacked == 0 {
			r.tsRecent = d.tsval // echo the earliest unacknowledged segment
		}
		r.rcvNxt = end
		for len(r.ooo.s) > 0 && r.ooo.s[0].lo <= r.rcvNxt {
			r.rcvNxt = max(r.rcvNxt, r.ooo.s[0].hi)
			r.ooo.trimBelow(r.rcvNxt)
			r.needAck = true // a hole was filled
		}
		r.ooo.trimBelow(r.rcvNxt)
		r.unacked++
		switch {
		case !r.cfg.DelayedAck || r.unacked >= 2:
			r.needAck = true
		case r.ackAt.IsZero():
			r.ackAt = now.Add(r.cfg.DelayedAckTimeout)
		}
	default:
		r.stats.OutOfOrderSegments++
		r.fresh = r.ooo.add(d.seq, end, r.fresh[:0])
		r.latest = d.seq
		r.needAck = true
	}
	if r.total >= 0 && r.rcvNxt >= r.total && r.stats.Done.IsZero() {
		r.stats.Done = now
		r.needAck = true
	}
}

// PollTransmit implements netsim.Endpoint: it sends at most one ACK.
func (r *Receiver) PollTransmit(now monotime.Time, buf []byte) int {
	if !r.needAck {
		return 0
	}
	r.needAck, r.unacked, r.ackAt = false, 0, 0
	a := ackSeg{ack: r.rcvNxt, wnd: int64(r.cfg.ReceiveBufferBytes), tsecr: r.tsRecent}
	// The block holding the latest segment first, then the highest others.
	first := -1
	if r.latest >= 0 {
		first = r.ooo.find(r.latest)
	}
	if first >= 0 {
		a.blocks[0] = r.ooo.s[first]
		a.nblk = 1
	}
	for i := len(r.ooo.s) - 1; i >= 0 && a.nblk < maxSACKBlocks; i-- {
		if i != first {
			a.blocks[a.nblk] = r.ooo.s[i]
			a.nblk++
		}
	}
	r.stats.Acks++
	return putAck(buf, &a, r.cfg.HeaderBytes)
}

// NextTimeout implements netsim.Endpoint: the delayed-ACK deadline.
func (r *Receiver) NextTimeout() monotime.Time { return r.ackAt }

// HandleTimeout implements netsim.Endpoint.
func (r *Receiver) HandleTimeout(now monotime.Time) {
	if !r.ackAt.IsZero() && !now.Before(r.ackAt) {
		r.needAck = true
		r.ackAt = 0
	}
}
