package flow

import (
	"bytes"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/tcptest"
)

// chunkReader returns the same chunk n times, then io.EOF.
type chunkReader struct {
	chunk []byte
	n     int
}

func (r *chunkReader) Read(b []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	r.n--
	return copy(b, r.chunk), nil
}

func TestCopyAdaptive(t *testing.T) {
	src := tcptest.Payload(3, 1<<20)
	var dst bytes.Buffer
	var n atomic.Uint64
	rerr, werr := copyAdaptive(&dst, nil, bytes.NewReader(src), &n, nil, nil)
	if rerr != io.EOF || werr != nil || !bytes.Equal(dst.Bytes(), src) || n.Load() != uint64(len(src)) {
		t.Fatalf("copy: rerr %v werr %v, %d bytes counted, equal %v", rerr, werr, n.Load(), bytes.Equal(dst.Bytes(), src))
	}
}

// trickle is a gatherer handing out one chunk per Read; ReadGather takes
// chunks until it holds atLeast bytes or nothing is left (as the driver's
// gathering read does when its wait passes).
type trickle struct {
	data  []byte
	chunk int
}

func (r *trickle) Read(b []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	k := copy(b[:min(len(b), r.chunk)], r.data)
	r.data = r.data[k:]
	return k, nil
}

func (r *trickle) ReadGather(b []byte, atLeast int, _ time.Duration) (int, error) {
	n := 0
	for n < atLeast && n < len(b) {
		k, err := r.Read(b[n:])
		n += k
		if err != nil {
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
	}
	return n, nil
}

// writeSizes records the size of each Write.
type writeSizes struct {
	bytes.Buffer
	sizes []int
}

func (w *writeSizes) Write(b []byte) (int, error) {
	w.sizes = append(w.sizes, len(b))
	return w.Buffer.Write(b)
}

// TestCopyCoalesces: a source delivering 1000 bytes at a time (the tunnel
// at full rate) reaches the client in 63 KiB writes, none larger (one TSO
// segment each), except the first read, which is not held back.
func TestCopyCoalesces(t *testing.T) {
	src := tcptest.Payload(4, 99000)
	var dst writeSizes
	rerr, werr := copyAdaptive(&dst, nil, &trickle{data: src, chunk: 1000}, nil, nil, nil)
	if rerr != io.EOF || werr != nil || !bytes.Equal(dst.Bytes(), src) {
		t.Fatalf("copy: rerr %v werr %v, equal %v", rerr, werr, bytes.Equal(dst.Bytes(), src))
	}
	// Unloaded: 1000, 64512, 33488. A scheduling pause of more than
	// streamingGap between two reads ends one gathering early.
	if len(dst.sizes) > 5 || dst.sizes[0] != 1000 || slices.Max(dst.sizes) != coalesceBytes {
		t.Errorf("writes of %v bytes, want the first of 1000 and then one of 63 KiB and the rest", dst.sizes)
	}
}

// BenchmarkCopyAdaptive shows the steady state allocates nothing: buffers
// come from the pools.
func BenchmarkCopyAdaptive(b *testing.B) {
	chunk := make([]byte, 64<<10)
	var n atomic.Uint64
	b.SetBytes(int64(len(chunk)) * 16)
	b.ReportAllocs()
	r := &chunkReader{chunk: chunk}
	for b.Loop() {
		r.n = 16
		copyAdaptive(io.Discard, nil, r, &n, nil, nil)
	}
}

// lender is a Lender over a bytes.Buffer that lends room in blocks of
// block bytes, the way a tunnel stream lends the rest of its current
// buffer chunk and the next ones, and counts its calls; it refuses a copy
// that writes while room is lent or commits more than it lent.
type lender struct {
	bytes.Buffer
	block   int
	room    []byte
	lent    [][]byte
	offset  int // bytes committed: where the next room starts in a block
	lends   int
	commits []int
	err     error
}

func (l *lender) Write(p []byte) (int, error) {
	if l.lent != nil {
		l.err = io.ErrShortWrite
	}
	return l.Buffer.Write(p)
}

func (l *lender) Lend(filled, want int) ([][]byte, error) {
	if l.lent != nil {
		if filled > roomBytes(l.lent) {
			l.err = io.ErrShortBuffer
		}
		l.Buffer.Write(l.room[:filled])
		l.offset += filled
		l.commits = append(l.commits, filled)
		l.lent = nil
	}
	if want == 0 {
		return nil, nil
	}
	l.lends++
	l.room = make([]byte, want)
	first := l.block - l.offset%l.block
	for b := l.room; len(b) > 0; {
		m := min(first, len(b))
		l.lent = append(l.lent, b[:m:m])
		b, first = b[m:], l.block
	}
	return l.lent, nil
}

// vecReader is a bytes.Reader that also reads into several buffers at once.
type vecReader struct {
	*bytes.Reader
	vecReads int
}

func (r *vecReader) ReadBuffers(bufs [][]byte) (int, error) {
	r.vecReads++
	n := 0
	for _, b := range bufs {
		m, err := r.Read(b)
		n += m
		if err != nil || m < len(b) {
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
	}
	return n, nil
}

// TestCopyLends: once reads fill the small buffer, the copy reads straight
// into the destination's lent room, all bytes arrive in order and are
// counted, and a source that reads into several buffers at once fills
// room spanning blocks in one read.
func TestCopyLends(t *testing.T) {
	src := tcptest.Payload(5, 1<<20+12345)
	for _, vec := range []bool{false, true} {
		dst := &lender{block: 32 << 10}
		var r io.Reader = bytes.NewReader(src)
		vr := &vecReader{Reader: bytes.NewReader(src)}
		if vec {
			r = vr
		}
		var n atomic.Uint64
		rerr, werr := copyAdaptive(dst, dst, r, &n, nil, nil)
		if rerr != io.EOF || werr != nil || dst.err != nil || !bytes.Equal(dst.Bytes(), src) || n.Load() != uint64(len(src)) {
			t.Fatalf("vec %v: rerr %v werr %v lender %v, %d bytes counted, equal %v",
				vec, rerr, werr, dst.err, n.Load(), bytes.Equal(dst.Bytes(), src))
		}
		// One 4 KiB write, then 64 KiB lends; without readv a lend that
		// starts inside a block is filled only up to the block's end.
		if dst.lends < 16 || dst.lends > 40 {
			t.Errorf("vec %v: %d lends for 1 MiB", vec, dst.lends)
		}
		if vec && vr.vecReads == 0 {
			t.Errorf("lent room spanning blocks was never read with ReadBuffers")
		}
		t.Logf("vec %v: %d lends, commits %v", vec, dst.lends, dst.commits[:min(6, len(dst.commits))])
	}
}

// TestCopyLendsUntilTrickle: a source whose reads no longer fill the small
// buffer is copied through the small buffer again.
func TestCopyLendsUntilTrickle(t *testing.T) {
	src := tcptest.Payload(6, 300<<10)
	dst := &lender{block: 32 << 10}
	r := &sizedReader{data: src, sizes: []int{4 << 10, 64 << 10, 64 << 10, 1000}}
	rerr, werr := copyAdaptive(dst, dst, r, nil, nil, nil)
	if rerr != io.EOF || werr != nil || dst.err != nil || !bytes.Equal(dst.Bytes(), src) {
		t.Fatalf("rerr %v werr %v lender %v, equal %v", rerr, werr, dst.err, bytes.Equal(dst.Bytes(), src))
	}
	// 4 KiB written; three lends (64, 64 and a 1000-byte read, committed
	// as the copy falls back), then 1000-byte reads through Write.
	if dst.lends != 3 || len(dst.commits) != 3 || dst.commits[2] != 1000 {
		t.Fatalf("%d lends, commits %v; want 3 ending with 1000", dst.lends, dst.commits)
	}
}

// sizedReader returns reads of the given sizes in turn, repeating the
// last, then io.EOF.
type sizedReader struct {
	data  []byte
	sizes []int
}

func (r *sizedReader) Read(b []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	size := r.sizes[0]
	if len(r.sizes) > 1 {
		r.sizes = r.sizes[1:]
	}
	k := copy(b[:min(len(b), size)], r.data)
	r.data = r.data[k:]
	return k, nil
}

// discardLender lends the same room every time and discards what was
// filled into it.
type discardLender struct {
	room [][]byte
}

func (l *discardLender) Write(p []byte) (int, error) { return len(p), nil }

func (l *discardLender) Lend(_, want int) ([][]byte, error) {
	if want == 0 {
		return nil, nil
	}
	return l.room, nil
}

// BenchmarkCopyLent shows that copying into lent room allocates nothing
// in the steady state either.
func BenchmarkCopyLent(b *testing.B) {
	chunk := make([]byte, 64<<10)
	var n atomic.Uint64
	b.SetBytes(int64(len(chunk)) * 16)
	b.ReportAllocs()
	r := &chunkReader{chunk: chunk}
	dst := &discardLender{room: [][]byte{make([]byte, 32<<10), make([]byte, 32<<10)}}
	for b.Loop() {
		r.n = 16
		copyAdaptive(dst, dst, r, &n, nil, nil)
	}
}
