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
	rerr, werr := copyAdaptive(&dst, bytes.NewReader(src), &n, nil, nil)
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
	rerr, werr := copyAdaptive(&dst, &trickle{data: src, chunk: 1000}, nil, nil, nil)
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
		copyAdaptive(io.Discard, r, &n, nil, nil)
	}
}
