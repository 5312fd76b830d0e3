package wanem

import "github.com/wanopt/wanopt/internal/monotime"

// entry is a packet waiting for its release time. seq is its place in
// arrival order and breaks ties between equal release times.
type entry struct {
	release monotime.Time
	seq     uint64
	buf     []byte
}

// before orders entries by release time, then arrival.
func (e *entry) before(o *entry) bool {
	if e.release != o.release {
		return e.release < o.release
	}
	return e.seq < o.seq
}

// ring is a growable FIFO whose capacity is a power of two. It allocates
// only when it grows past its largest size so far.
type ring[T any] struct {
	buf  []T
	head int
	n    int
}

func (r *ring[T]) len() int { return r.n }

func (r *ring[T]) push(v T) {
	if r.n == len(r.buf) {
		nb := make([]T, max(2*len(r.buf), 64))
		for i := 0; i < r.n; i++ {
			nb[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = v
	r.n++
}

// front returns the oldest element; the ring must not be empty.
func (r *ring[T]) front() *T { return &r.buf[r.head] }

// pop removes and returns the oldest element; the ring must not be empty.
func (r *ring[T]) pop() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return v
}

// entryHeap is a binary min-heap of entries ordered by entry.before. It
// allocates only when it grows past its largest size so far.
type entryHeap []entry

func (h *entryHeap) push(e entry) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].before(&s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

// pop removes and returns the first entry; the heap must not be empty.
func (h *entryHeap) pop() entry {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = entry{}
	s = s[:last]
	*h = s
	i := 0
	for {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		m := l
		if r := l + 1; r < len(s) && s[r].before(&s[l]) {
			m = r
		}
		if !s[m].before(&s[i]) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	return top
}
