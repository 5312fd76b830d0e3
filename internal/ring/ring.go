// Package ring is a growable FIFO ring buffer, for queues that grow to a
// working size once and then stop allocating: the tunnel's records of
// packets in flight, for one.
package ring

// Ring is a FIFO queue of T held in a ring buffer whose capacity is a
// power of two. PushBack doubles the capacity when the ring is full; it
// never shrinks, so a queue whose length stays bounded stops allocating.
// Elements are addressed from the front: At(0) is the oldest.
//
// The zero value is an empty ring ready to use. A Ring is not safe for
// concurrent use.
type Ring[T any] struct {
	buf  []T
	head int // index in buf of the front element
	n    int // number of elements
}

// minGrow is the capacity a zero Ring takes on its first PushBack.
const minGrow = 8

// New returns an empty ring with room for capacity elements (rounded up to
// a power of two) before it grows.
func New[T any](capacity int) Ring[T] {
	n := 1
	for n < capacity {
		n <<= 1
	}
	return Ring[T]{buf: make([]T, n)}
}

// Len returns the number of elements held.
func (r *Ring[T]) Len() int { return r.n }

// Cap returns how many elements the ring holds before it grows.
func (r *Ring[T]) Cap() int { return len(r.buf) }

// PushBack appends v at the back, doubling the capacity if the ring is
// full. Growing moves the elements, so pointers from At, Front and Back
// are valid only until the next PushBack.
func (r *Ring[T]) PushBack(v T) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = v
	r.n++
}

// PopFront removes and returns the front element. Its slot is zeroed, so
// the ring keeps no reference to what it held. It panics if the ring is
// empty.
func (r *Ring[T]) PopFront() T {
	if r.n == 0 {
		panic("ring: PopFront of an empty ring")
	}
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return v
}

// At returns a pointer to element i, counted from the front (0 <= i <
// Len()). It panics if i is out of range.
func (r *Ring[T]) At(i int) *T {
	if uint(i) >= uint(r.n) {
		panic("ring: index out of range")
	}
	return &r.buf[(r.head+i)&(len(r.buf)-1)]
}

// Front returns a pointer to the front (oldest) element. It panics if the
// ring is empty.
func (r *Ring[T]) Front() *T { return r.At(0) }

// Back returns a pointer to the back (newest) element. It panics if the
// ring is empty.
func (r *Ring[T]) Back() *T { return r.At(r.n - 1) }

// grow doubles the capacity (to minGrow from zero), moving the elements
// to the start of the new buffer in order.
func (r *Ring[T]) grow() {
	n := 2 * len(r.buf)
	if n == 0 {
		n = minGrow
	}
	nb := make([]T, n)
	k := copy(nb, r.buf[r.head:])
	copy(nb[k:], r.buf[:r.head])
	r.buf, r.head = nb, 0
}
