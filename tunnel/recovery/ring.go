package recovery

import (
	"github.com/wanopt/wanopt/cc"
	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/ring"
)

// pktStatus is the life cycle of a sent packet record.
type pktStatus uint8

const (
	statusOutstanding pktStatus = iota // sent, neither acked nor declared lost
	statusAcked                        // acknowledged; token reported
	statusLost                         // declared lost; token reported
)

// sentPacket is the Sender's record of one packet.
type sentPacket struct {
	cc       cc.PacketState // valid only when ackEliciting
	sentTime monotime.Time
	token    uint64
	bytes    int
	status   pktStatus
	// ackEliciting packets count in bytes in flight and were reported to
	// the controller.
	ackEliciting bool
}

// sentRing holds the records of packet numbers [base, next) in sending
// order. The record of base is always outstanding (resolved records at the
// head are popped), so the ring spans from the oldest unresolved packet to
// the newest sent one. It grows by doubling when full and never shrinks,
// so a connection in steady state does not allocate.
type sentRing struct {
	q    ring.Ring[sentPacket] // the records of [base, next)
	base uint64                // lowest packet number held
	next uint64                // next packet number to be sent
}

func newSentRing(capacity int) sentRing {
	return sentRing{q: ring.New[sentPacket](max(16, capacity))}
}

// len returns the number of records held.
func (r *sentRing) len() int { return r.q.Len() }

// at returns the record of pn, which must be in [base, next).
func (r *sentRing) at(pn uint64) *sentPacket { return r.q.At(int(pn - r.base)) }

// push appends the record of packet number r.next and returns it, zeroed.
func (r *sentRing) push() *sentPacket {
	r.q.PushBack(sentPacket{})
	r.next++
	return r.q.Back()
}

// popResolved advances base past acked and lost records.
func (r *sentRing) popResolved() {
	for r.q.Len() > 0 && r.q.Front().status != statusOutstanding {
		r.q.PopFront()
		r.base++
	}
}

// lostRecord remembers a packet declared lost, to notice a later ACK of it.
type lostRecord struct {
	pn     uint64
	lostAt monotime.Time
	// largestAcked is the largest acknowledged packet when pn was
	// declared lost: largestAcked-pn is how far the packets after it
	// overtook it, if it was only reordered.
	largestAcked uint64
	acked        bool // a spurious loss already counted
}

// lostRing is a fixed-size FIFO of recently lost packets in ascending
// packet-number order (losses are always declared in ascending order). When
// full, the oldest record is overwritten.
type lostRing struct {
	buf   []lostRecord
	head  int // index of the oldest record
	count int
}

func newLostRing(capacity int) lostRing {
	return lostRing{buf: make([]lostRecord, max(capacity, 1))}
}

func (l *lostRing) get(i int) *lostRecord { return &l.buf[(l.head+i)%len(l.buf)] }

func (l *lostRing) push(pn uint64, now monotime.Time, largestAcked uint64) {
	if l.count == len(l.buf) {
		l.head = (l.head + 1) % len(l.buf)
		l.count--
	}
	*l.get(l.count) = lostRecord{pn: pn, lostAt: now, largestAcked: largestAcked}
	l.count++
}

// expire drops records lost before cutoff.
func (l *lostRing) expire(cutoff monotime.Time) {
	for l.count > 0 && l.buf[l.head].lostAt.Before(cutoff) {
		l.head = (l.head + 1) % len(l.buf)
		l.count--
	}
}

// markAcked marks the records with packet numbers in [lo, hi] as acked and
// returns how many were not marked before, and the largest reordering
// distance (largestAcked - pn) among them.
func (l *lostRing) markAcked(lo, hi uint64) (n int, reorder uint64) {
	// Binary search for the first record with pn >= lo.
	i, j := 0, l.count
	for i < j {
		m := int(uint(i+j) >> 1)
		if l.get(m).pn < lo {
			i = m + 1
		} else {
			j = m
		}
	}
	for ; i < l.count; i++ {
		rec := l.get(i)
		if rec.pn > hi {
			break
		}
		if !rec.acked {
			rec.acked = true
			n++
			if rec.largestAcked > rec.pn {
				reorder = max(reorder, rec.largestAcked-rec.pn)
			}
		}
	}
	return n, reorder
}
