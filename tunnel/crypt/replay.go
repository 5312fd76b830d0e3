package crypt

// Replay window geometry. The bitmap is a ring of 64-bit blocks (the
// technique of RFC 6479): advancing clears whole blocks, so one block is
// kept spare and the guaranteed window is one block short of the ring.
//
// Why about 8000 packets: at 1 Gbit/s with 1350-byte packets, 8128
// packets cover 88 ms of reordering, far beyond a WAN's few ms. A packet
// later than that has long been declared lost by the loss detector and
// its frames resent, so dropping it costs nothing. The ring is 1 KiB per
// session.
const (
	replayBlockBits  = 64
	replayRingBlocks = 128 // a power of two
	replayBlockMask  = replayRingBlocks - 1

	// ReplayWindowSize is how far below the largest accepted packet
	// number a packet may be and still be accepted: numbers in
	// (largest-ReplayWindowSize, largest] are tracked individually.
	ReplayWindowSize = (replayRingBlocks - 1) * replayBlockBits // 8128
)

// ReplayWindow rejects duplicate packet numbers and numbers too far below the
// largest accepted one. Use Check before authenticating a packet and Accept
// only after it authenticated, so forged packets cannot move the window.
//
// The zero value is an empty window, ready to use. It is not safe for
// concurrent use. Neither method allocates.
type ReplayWindow struct {
	largest uint64 // largest accepted packet number (0 when none yet)
	ring    [replayRingBlocks]uint64
}

// Check reports whether pn would be accepted: it is above the largest
// accepted number, or within ReplayWindowSize below it and not yet seen.
func (w *ReplayWindow) Check(pn uint64) bool {
	if pn > w.largest {
		return true
	}
	if w.largest-pn >= ReplayWindowSize {
		return false
	}
	return w.ring[(pn/replayBlockBits)&replayBlockMask]&(1<<(pn%replayBlockBits)) == 0
}

// Accept marks pn as seen, sliding the window forward if pn is the new
// largest. A pn older than the window is ignored. Call it only for a packet
// that passed Check and authenticated.
func (w *ReplayWindow) Accept(pn uint64) {
	if pn > w.largest {
		cur, next := w.largest/replayBlockBits, pn/replayBlockBits
		n := next - cur
		if n > replayRingBlocks {
			n = replayRingBlocks
		}
		for i := uint64(1); i <= n; i++ {
			w.ring[(cur+i)&replayBlockMask] = 0
		}
		w.largest = pn
	} else if w.largest-pn >= ReplayWindowSize {
		return
	}
	w.ring[(pn/replayBlockBits)&replayBlockMask] |= 1 << (pn % replayBlockBits)
}

// Reset empties the window.
func (w *ReplayWindow) Reset() { *w = ReplayWindow{} }
