package tunnel

import "github.com/wanopt/wanopt/internal/ring"

// frameKind says what a sent frame was, for its acknowledgment or loss.
type frameKind uint8

const (
	fkDone          frameKind = iota // resolved: the slot may be reused
	fkStream                         // STREAM: id, off, n, fin
	fkMaxData                        // MAX_DATA: off = value
	fkMaxStreamData                  // MAX_STREAM_DATA: id, off = value
	fkOpen                           // STREAM_OPEN: id
	fkOpenResult                     // OPEN_RESULT: id, code
	fkReset                          // RESET_STREAM: id
	fkStopSending                    // STOP_SENDING: id
	fkAck                            // ACK: off = largest acknowledged
)

// sentFrame records one frame of a sent packet: what must be done when the
// packet is acknowledged or declared lost.
type sentFrame struct {
	kind frameKind
	fin  bool
	n    uint32 // STREAM data length
	id   uint64
	off  uint64
	code uint64
}

// recordRing holds the frame records of packets in flight, in sending
// order. A packet's records are consecutive; its token (see
// recovery.Sender) is the sequence number of its first record shifted left
// by tokenCountBits, ORed with their count. Packets resolve out of order,
// so a record leaves the ring only when every older record is resolved.
// The ring doubles when full, so in steady state it does not allocate.
type recordRing struct {
	q    ring.Ring[sentFrame] // records [base, base+q.Len())
	base uint64               // sequence number of q's front
}

// tokenCountBits is the width of the record count in a token.
const tokenCountBits = 16

// maxRecordsPerPacket bounds the frames recorded per packet.
const maxRecordsPerPacket = 1<<tokenCountBits - 1

func newRecordRing(capacity int) recordRing {
	return recordRing{q: ring.New[sentFrame](max(64, capacity))}
}

// push appends a record and returns its sequence number.
func (r *recordRing) push(f sentFrame) uint64 {
	seq := r.base + uint64(r.q.Len())
	r.q.PushBack(f)
	return seq
}

// at returns the record with sequence number seq, which must be held.
func (r *recordRing) at(seq uint64) *sentFrame { return r.q.At(int(seq - r.base)) }

// release marks the records [seq, seq+n) resolved and drops the resolved
// prefix.
func (r *recordRing) release(seq uint64, n int) {
	for i := range uint64(n) {
		r.at(seq + i).kind = fkDone
	}
	for r.q.Len() > 0 && r.q.Front().kind == fkDone {
		r.q.PopFront()
		r.base++
	}
}

// token packs a packet's first record and record count.
func token(first uint64, n int) uint64 { return first<<tokenCountBits | uint64(n) }

// untoken unpacks a token.
func untoken(t uint64) (first uint64, n int) {
	return t >> tokenCountBits, int(t & (1<<tokenCountBits - 1))
}

// idSet is a set of stream indexes (stream ID >> 1) kept as sorted
// disjoint closed intervals: the peer's stream IDs seen so far. IDs are
// allocated in order, so it stays a handful of intervals.
type idSet struct {
	r [][2]uint64
}

// contains reports whether k is in the set.
func (s *idSet) contains(k uint64) bool {
	for i := len(s.r) - 1; i >= 0; i-- {
		if k > s.r[i][1] {
			return false
		}
		if k >= s.r[i][0] {
			return true
		}
	}
	return false
}

// add inserts k.
func (s *idSet) add(k uint64) {
	i := len(s.r)
	for i > 0 && s.r[i-1][0] > k {
		i--
	}
	// s.r[i-1] starts at or below k (if i > 0); s.r[i] starts above k.
	if i > 0 && k <= s.r[i-1][1] {
		return
	}
	joinLeft := i > 0 && s.r[i-1][1]+1 == k
	joinRight := i < len(s.r) && s.r[i][0] == k+1
	switch {
	case joinLeft && joinRight:
		s.r[i-1][1] = s.r[i][1]
		s.r = append(s.r[:i], s.r[i+1:]...)
	case joinLeft:
		s.r[i-1][1] = k
	case joinRight:
		s.r[i][0] = k
	default:
		s.r = append(s.r, [2]uint64{})
		copy(s.r[i+1:], s.r[i:])
		s.r[i] = [2]uint64{k, k}
	}
}
