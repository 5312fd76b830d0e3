package stream

// Pool hands out fixed-size buffer blocks (chunks) to the streams of one
// connection and takes them back when their bytes are acknowledged or read.
// It is not safe for concurrent use: it belongs to one ConnFlow.
//
// Chunks are not cleared on Put: a stream only ever reads bytes it wrote
// into a chunk (send side) or received into it (receive side), so stale
// bytes of another stream are never exposed.
type Pool struct {
	chunkBytes int
	free       [][]byte
	maxFree    int
	inUse      int
}

// newPool returns a pool of chunkBytes-sized chunks that keeps at most
// maxFree idle chunks (more are left to the garbage collector).
func newPool(chunkBytes, maxFree int) *Pool {
	return &Pool{chunkBytes: chunkBytes, maxFree: max(maxFree, 1)}
}

// ChunkBytes returns the size of every chunk.
func (p *Pool) ChunkBytes() int { return p.chunkBytes }

// InUse returns the number of chunks handed out and not returned.
func (p *Pool) InUse() int { return p.inUse }

// get returns a chunk of ChunkBytes bytes with unspecified contents. The
// caller owns it until put.
func (p *Pool) get() []byte {
	p.inUse++
	if n := len(p.free); n > 0 {
		c := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		return c
	}
	return make([]byte, p.chunkBytes)
}

// put returns a chunk obtained from get; the caller must not use it again.
func (p *Pool) put(c []byte) {
	p.inUse--
	if len(p.free) < p.maxFree {
		p.free = append(p.free, c[:p.chunkBytes])
	}
}

// drop forgets a chunk obtained from get that must not be reused (its
// borrower may still write into it); the garbage collector takes it.
func (p *Pool) drop() { p.inUse-- }

// chunkRing is a deque of chunks holding the bytes of one stream at absolute
// stream offsets: chunk number k holds offsets [k*size, (k+1)*size). The
// ring covers chunk numbers [first, first+n); a slot is nil until a byte
// lands in it (the receive side fills gaps lazily).
type chunkRing struct {
	slots [][]byte
	head  int    // index in slots of chunk number first
	n     int    // chunk numbers covered
	first uint64 // chunk number at head
}

// slot returns the slot of chunk number k, which must be covered.
func (r *chunkRing) slot(k uint64) *[]byte {
	return &r.slots[(r.head+int(k-r.first))%len(r.slots)]
}

// chunkFor returns chunk number k, taking it from p if its slot is empty.
// An empty ring starts at chunk number low; k must be >= first.
func (r *chunkRing) chunkFor(p *Pool, low, k uint64) []byte {
	if r.n == 0 {
		r.first = low
	}
	for r.first+uint64(r.n) <= k {
		if r.n == len(r.slots) {
			r.grow()
		}
		r.slots[(r.head+r.n)%len(r.slots)] = nil
		r.n++
	}
	s := r.slot(k)
	if *s == nil {
		*s = p.get()
	}
	return *s
}

// grow doubles the slot array, keeping the order of the chunks.
func (r *chunkRing) grow() {
	ns := make([][]byte, max(2*len(r.slots), 4))
	for i := range r.n {
		ns[i] = r.slots[(r.head+i)%len(r.slots)]
	}
	r.slots, r.head = ns, 0
}

// forget empties the slot of chunk number k, if covered and filled, without
// returning its chunk to the pool, and reports whether it held one.
func (r *chunkRing) forget(k uint64) bool {
	if k < r.first || k >= r.first+uint64(r.n) {
		return false
	}
	s := r.slot(k)
	had := *s != nil
	*s = nil
	return had
}

// releaseBelow returns to p every chunk whose bytes all lie below offset.
func (r *chunkRing) releaseBelow(p *Pool, offset uint64, chunkBytes int) {
	for r.n > 0 && (r.first+1)*uint64(chunkBytes) <= offset {
		s := &r.slots[r.head]
		if *s != nil {
			p.put(*s)
			*s = nil
		}
		r.head = (r.head + 1) % len(r.slots)
		r.first++
		r.n--
	}
}

// releaseAll returns every chunk to p and empties the ring.
func (r *chunkRing) releaseAll(p *Pool) {
	for i := range r.n {
		s := &r.slots[(r.head+i)%len(r.slots)]
		if *s != nil {
			p.put(*s)
			*s = nil
		}
	}
	r.head, r.n = 0, 0
}
