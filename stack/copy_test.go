package stack

import (
	"bytes"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"
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
	src := payload(3, 1<<20)
	var dst bytes.Buffer
	var n atomic.Uint64
	rerr, werr := copyAdaptive(&dst, bytes.NewReader(src), &n)
	if rerr != io.EOF || werr != nil || !bytes.Equal(dst.Bytes(), src) || n.Load() != uint64(len(src)) {
		t.Fatalf("copy: rerr %v werr %v, %d bytes counted, equal %v", rerr, werr, n.Load(), bytes.Equal(dst.Bytes(), src))
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
		copyAdaptive(io.Discard, r, &n)
	}
}

// payload returns n deterministic pseudo-random bytes for seed.
func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}
