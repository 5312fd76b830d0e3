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
	fkProbe                          // a path MTU probe: id = probe ID, off = its size
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
// recovery.Sender) packs its first record's sequence number, their count
// and tokenBigBit (see token). Packets resolve out of order, so a record
// leaves the ring only when every older record is resolved. The ring
// doubles when full, so in steady state it does not allocate.
type recordRing struct {
	q    ring.Ring[sentFrame] // records [base, base+q.Len())
	base uint64               // sequence number of q's front
}

// tokenCountBits is the width of the record count in a token.
const tokenCountBits = 16

// tokenBigBit marks the token of a packet larger than the base size: the
// path MTU search's black-hole detection watches their fate.
const tokenBigBit = 1 << tokenCountBits

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

// token packs a packet's first record, record count and size class.
func token(first uint64, n int, big bool) uint64 {
	t := first<<(tokenCountBits+1) | uint64(n)
	if big {
		t |= tokenBigBit
	}
	return t
}

// untoken unpacks a token.
func untoken(t uint64) (first uint64, n int, big bool) {
	return t >> (tokenCountBits + 1), int(t & (1<<tokenCountBits - 1)), t&tokenBigBit != 0
}

// idWindow is the set of stream indexes (stream ID >> 1) the peer has
// opened: every index below base, and those marked in a window of bits
// above it. A peer opens its streams in order, so the window only holds
// the opens that overtook a lost or late one; an open beyond the window
// is refused (the peer is closed for breaking the stream limit), so
// gapped or descending IDs cost a fixed few kilobytes and constant time.
type idWindow struct {
	base uint64   // a multiple of 64: every index below it is in the set
	bits []uint64 // a ring of words; bits[head] covers [base, base+64)
	head int
}

func newIDWindow(words int) idWindow { return idWindow{bits: make([]uint64, words)} }

// span is how far above base the window reaches.
func (w *idWindow) span() uint64 { return uint64(len(w.bits)) * 64 }

// word returns the ring index of the word holding k (base <= k < base+span).
func (w *idWindow) word(k uint64) int { return (w.head + int((k-w.base)/64)) % len(w.bits) }

// contains reports whether k is in the set.
func (w *idWindow) contains(k uint64) bool {
	switch {
	case k < w.base:
		return true
	case k-w.base >= w.span():
		return false
	}
	return w.bits[w.word(k)]&(1<<((k-w.base)%64)) != 0
}

// add inserts k; it reports false, changing nothing, when k lies beyond
// the window.
func (w *idWindow) add(k uint64) bool {
	if k < w.base {
		return true
	}
	if k-w.base >= w.span() {
		return false
	}
	w.bits[w.word(k)] |= 1 << ((k - w.base) % 64)
	for w.bits[w.head] == ^uint64(0) {
		w.bits[w.head] = 0
		w.head = (w.head + 1) % len(w.bits)
		w.base += 64
	}
	return true
}
