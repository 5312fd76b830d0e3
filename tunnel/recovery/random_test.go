package recovery

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wanopt/wanopt/tunnel/wire"
)

// TestRandomAcks feeds a Sender seeded random, often hostile ACK frames
// (any ranges, some reaching past the packets sent, absurd delays and ECN
// counts) interleaved with sends and timeouts, and checks after every call
// that it never panics, that rejected frames change nothing, that every
// token is reported at most once and that bytes in flight matches the
// packets not yet reported.
func TestRandomAcks(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	s, _, _ := newTestSender(t)
	reported := map[uint64]int{}
	size := map[uint64]int{}
	inFlight := 0
	count := func(tok uint64) {
		reported[tok]++
		if reported[tok] > 1 {
			t.Fatalf("seed %d: token %d reported %d times", seed, tok, reported[tok])
		}
		inFlight -= size[tok]
	}
	now := t0
	for step := range 20_000 {
		now = now.Add(time.Duration(rng.IntN(2000)) * time.Microsecond)
		switch rng.IntN(4) {
		case 0, 1:
			pn := s.NextPacketNumber()
			e := rng.IntN(5) != 0
			bytes := 1 + rng.IntN(1400)
			if e {
				size[pn] = bytes
				inFlight += bytes
			}
			s.OnPacketSent(now, pn, bytes, e, pn)
		case 2:
			f := randomAck(rng, s.NextPacketNumber())
			before := s.Stats()
			err := s.OnAck(now, f, count, count)
			if err != nil {
				if !errors.Is(err, ErrAckUnsent) && !errors.Is(err, ErrAckInvalid) {
					t.Fatalf("seed %d step %d: unexpected error %v", seed, step, err)
				}
				after := s.Stats()
				after.BadAcks--
				if after != before {
					t.Fatalf("seed %d step %d: rejected frame changed state", seed, step)
				}
			}
		case 3:
			if to := s.NextTimeout(); to != 0 && rng.IntN(2) == 0 {
				now = max(now, to)
			}
			s.OnTimeout(now, count)
		}
		if got := s.BytesInFlight(); got != inFlight {
			t.Fatalf("seed %d step %d: BytesInFlight %d, want %d", seed, step, got, inFlight)
		}
	}
	st := s.Stats()
	t.Logf("stats %+v", st)
	if st.PacketsAcked == 0 || st.PacketsLost == 0 || st.BadAcks == 0 || st.PTOs == 0 {
		t.Fatalf("seed %d: random run did not exercise acks, losses, rejections and PTOs: %+v", seed, st)
	}
}

// randomAck returns a frame with 1-8 ranges around packet numbers below
// next+3, descending, sometimes malformed, with random delay and ECN.
func randomAck(rng *rand.Rand, next uint64) *wire.AckFrame {
	f := &wire.AckFrame{AckDelay: rng.Uint64N(wire.MaxVarint)}
	if rng.IntN(2) == 0 {
		f.AckDelay = rng.Uint64N(50_000)
	}
	hi := rng.Uint64N(next + 3)
	for range 1 + rng.IntN(8) {
		lo := hi - min(hi, rng.Uint64N(20))
		f.Ranges = append(f.Ranges, wire.AckRange{Smallest: lo, Largest: hi})
		if lo < 2+3 || rng.IntN(20) == 0 {
			break
		}
		hi = lo - 2 - rng.Uint64N(3)
	}
	if rng.IntN(30) == 0 && len(f.Ranges) > 1 { // malformed: out of order
		f.Ranges[0], f.Ranges[1] = f.Ranges[1], f.Ranges[0]
	}
	if rng.IntN(4) == 0 {
		f.ECN, f.CE = true, rng.Uint64N(wire.MaxVarint)
	}
	return f
}
