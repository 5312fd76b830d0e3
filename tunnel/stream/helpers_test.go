package stream

import (
	"math/rand/v2"
	"testing"

	"github.com/wanopt/wanopt/internal/seed"
)

// newConn returns a ConnFlow for cfg with unlimited peer connection credit
// unless peerMaxData is nonzero.
func newConn(t testing.TB, cfg Config, peerMaxData uint64) *ConnFlow {
	t.Helper()
	if peerMaxData == 0 {
		peerMaxData = 1 << 60
	}
	cf, err := NewConnFlow(cfg, peerMaxData)
	if err != nil {
		t.Fatal(err)
	}
	return cf
}

// pattern returns n deterministic bytes for offset-checking: byte i is a
// function of i.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// randBytes returns n bytes from rng.
func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// newRand returns a seeded generator and logs the seed, so a failure can be
// replayed from it.
func newRand(t testing.TB, sd uint64) *rand.Rand {
	t.Helper()
	t.Logf("seed %d", sd)
	return seed.Rand(sd)
}

// frame is a popped STREAM frame, copied out of the stream's buffer.
type frame struct {
	offset uint64
	data   []byte
	fin    bool
}

// pop pops one frame and copies its data.
func pop(s *SendStream, maxPayload int) (frame, bool) {
	off, data, fin, ok := s.PopFrame(maxPayload)
	return frame{off, append([]byte(nil), data...), fin}, ok
}

// popAll pops frames until PopFrame says nothing is left.
func popAll(s *SendStream, maxPayload int) []frame {
	var fs []frame
	for {
		f, ok := pop(s, maxPayload)
		if !ok {
			return fs
		}
		fs = append(fs, f)
	}
}
