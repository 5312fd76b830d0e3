package wanem

import "math/bits"

// Buffer size classes of the pool: powers of two from 2^minClassShift to
// 2^maxClassShift bytes, the largest holding MaxPacketBytes.
const (
	minClassShift = 8
	maxClassShift = 16
	numClasses    = maxClassShift - minClassShift + 1
)

// bufPool is a free list of packet buffers per power-of-two size class, kept
// at its largest, so a steady pipe allocates nothing. Not for concurrent use.
type bufPool struct {
	free [numClasses][][]byte
}

// classOf returns the size class that holds n bytes (1 ≤ n ≤ 2^maxClassShift).
func classOf(n int) int {
	c := bits.Len(uint(n-1)) - minClassShift
	return max(c, 0)
}

// get returns a buffer of length n (1 ≤ n ≤ MaxPacketBytes) whose capacity
// is its class size. Its contents are undefined.
func (p *bufPool) get(n int) []byte {
	c := classOf(n)
	fl := p.free[c]
	if k := len(fl); k > 0 {
		b := fl[k-1]
		fl[k-1] = nil
		p.free[c] = fl[:k-1]
		return b[:n]
	}
	return make([]byte, n, 1<<(c+minClassShift))
}

// put returns b to the pool. A buffer whose capacity is not a class size
// is left to the garbage collector.
func (p *bufPool) put(b []byte) {
	c := cap(b)
	if c < 1<<minClassShift || c > 1<<maxClassShift || c&(c-1) != 0 {
		return
	}
	k := classOf(c)
	p.free[k] = append(p.free[k], b[:0])
}
