package stream

import (
	"errors"
	"testing"
)

// TestRangeSetModel checks rangeSet against a bitmap under random adds,
// removes and removeBelow calls.
func TestRangeSetModel(t *testing.T) {
	const size = 200
	for seed := uint64(1); seed <= 50; seed++ {
		rng := newRand(t, seed)
		var s rangeSet
		var model [size]bool
		for op := range 300 {
			a := uint64(rng.IntN(size))
			b := min(a+uint64(rng.IntN(40)), size)
			switch rng.IntN(5) {
			case 0, 1:
				s.add(a, b)
				for i := a; i < b; i++ {
					model[i] = true
				}
			case 2, 3:
				s.remove(a, b)
				for i := a; i < b; i++ {
					model[i] = false
				}
			case 4:
				if rng.IntN(4) == 0 {
					s.removeBelow(a)
					for i := range a {
						model[i] = false
					}
				}
			}
			// Compare: sorted, disjoint, non-adjacent, same members.
			var got [size]bool
			for i, r := range s.r {
				if r.start >= r.end || (i > 0 && s.r[i-1].end >= r.start) {
					t.Fatalf("seed %d op %d: malformed %v", seed, op, s.r)
				}
				for j := r.start; j < r.end; j++ {
					got[j] = true
				}
			}
			if got != model {
				t.Fatalf("seed %d op %d: set %v differs from the model", seed, op, s.r)
			}
		}
	}
}

// TestRecvHostilePeer feeds a RecvStream random frames, resets and reads: it
// must never panic, and every error must be a flow-control or final-size
// error that leaves the stream usable.
func TestRecvHostilePeer(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := newRand(t, seed)
		cf := newConn(t, Config{ChunkBytes: 1024, InitialStreamWindow: 8 << 10, InitialConnWindow: 12 << 10}, 0)
		rs := []*RecvStream{NewRecvStream(0, cf), NewRecvStream(4, cf)}
		data := make([]byte, 4096)
		buf := make([]byte, 3000)
		for op := range 2000 {
			r := rs[rng.IntN(len(rs))]
			var err error
			switch p := rng.IntN(100); {
			case p < 70:
				off := uint64(rng.IntN(12 << 10))
				if rng.IntN(50) == 0 {
					off = 1<<62 - uint64(rng.IntN(100))
				}
				err = r.HandleFrame(off, data[:rng.IntN(len(data))], rng.IntN(20) == 0)
			case p < 73:
				err = r.OnResetStream(1, uint64(rng.IntN(12<<10)))
			case p < 75:
				r.StopSending(2)
			default:
				r.Read(buf[:rng.IntN(len(buf))])
				r.ShouldSendMaxStreamData(1, 0)
				cf.ShouldSendMaxData(1, 0)
			}
			if err != nil && !errors.Is(err, ErrFlowControl) && !errors.Is(err, ErrFinalSize) {
				t.Fatalf("seed %d op %d: unexpected error %v", seed, op, err)
			}
			var sum uint64
			for _, r := range rs {
				want := uint64(0)
				if !r.discarding {
					end := r.win.limit
					if r.finalKnown {
						end = r.finalSize
					}
					want = end - r.win.consumed
				}
				if r.reserved != want {
					t.Fatalf("seed %d op %d: stream %d reserves %d, want %d", seed, op, r.id, r.reserved, want)
				}
				sum += r.reserved
			}
			if sum != cf.Budget().Used() {
				t.Fatalf("seed %d op %d: streams reserve %d, budget says %d", seed, op, sum, cf.Budget().Used())
			}
		}
	}
}
