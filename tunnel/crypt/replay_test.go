package crypt

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestReplayWindow(t *testing.T) {
	const W = ReplayWindowSize
	type step struct {
		pn   uint64
		want bool // Check result; Accept follows when true
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"in order from zero", []step{{0, true}, {1, true}, {2, true}, {3, true}}},
		{"duplicates", []step{{0, true}, {0, false}, {5, true}, {5, false}, {0, false}, {4, true}, {4, false}}},
		{"reordered within window", []step{{10, true}, {3, true}, {9, true}, {4, true}, {11, true}, {3, false}, {0, true}}},
		{"oldest still in window", []step{{W + 99, true}, {100, true}, {100, false}, {99, false}}},
		{"too old", []step{{W, true}, {0, false}, {1, true}, {1, false}}},
		{"huge jump clears everything", []step{{5, true}, {6, true}, {1 << 40, true}, {1<<40 - 1, true}, {1<<40 - W + 1, true}, {1<<40 - W, false}, {6, false}, {1 << 40, false}}},
		{"jump by exactly the ring", []step{{64, true}, {64 + 128*64, true}, {64, false}, {64 + 127*64, true}, {65 + 128*64, true}}},
		{"largest numbers", []step{{math.MaxUint64 - 1, true}, {math.MaxUint64, true}, {math.MaxUint64, false}, {math.MaxUint64 - 1, false}, {math.MaxUint64 - 2, true}, {0, false}}},
		{"block boundary", []step{{63, true}, {64, true}, {127, true}, {128, true}, {63, false}, {65, true}, {64, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w ReplayWindow
			for i, st := range tt.steps {
				if got := w.Check(st.pn); got != st.want {
					t.Fatalf("step %d: Check(%d) = %v, want %v", i, st.pn, got, st.want)
				}
				if got := w.Check(st.pn); got != st.want {
					t.Fatalf("step %d: Check(%d) changed its answer on a second call", i, st.pn)
				}
				if st.want {
					w.Accept(st.pn)
				}
			}
		})
	}
}

func TestReplayWindowWrapsRing(t *testing.T) {
	// Walk far past the ring several times, in order and with a trailing
	// reordered packet, and check that old bits never leak into new laps.
	var w ReplayWindow
	for pn := uint64(0); pn < 20*replayRingBlocks*replayBlockBits; pn += 3 {
		if !w.Check(pn) {
			t.Fatalf("Check(%d) = false on first sight", pn)
		}
		w.Accept(pn)
		if pn >= 300 {
			late := pn - 299 // not a multiple of 3: never accepted
			if !w.Check(late) {
				t.Fatalf("Check(%d) after %d = false, never seen and in window", late, pn)
			}
		}
		if w.Check(pn) {
			t.Fatalf("Check(%d) = true right after Accept", pn)
		}
	}
}

// TestReplayWindowModel compares the window to a map-based reference on
// seeded random traffic: reordering, duplicates, stale packets, jumps.
func TestReplayWindowModel(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		var w ReplayWindow
		seen := make(map[uint64]bool)
		var largest uint64
		next := uint64(0)
		for i := range 20000 {
			var pn uint64
			switch r := rng.IntN(100); {
			case r < 60:
				pn = next
				next++
			case r < 85: // reordered or duplicate, maybe beyond the window
				back := uint64(rng.IntN(ReplayWindowSize + 500))
				if back > next {
					back = next
				}
				pn = next - back
			case r < 98:
				pn = next + uint64(rng.IntN(100))
				next = pn + 1
			default: // jump
				pn = next + uint64(rng.IntN(1<<20))
				next = pn + 1
			}
			want := !seen[pn] && (pn > largest || largest-pn < ReplayWindowSize)
			if len(seen) == 0 {
				want = true
			}
			if got := w.Check(pn); got != want {
				t.Fatalf("seed %d step %d: Check(%d) = %v, want %v (largest %d)", seed, i, pn, got, want, largest)
			}
			if want {
				w.Accept(pn)
				seen[pn] = true
				largest = max(largest, pn)
			}
		}
	}
}

func TestReplayWindowAcceptTooOldIsIgnored(t *testing.T) {
	var w ReplayWindow
	w.Accept(10_000)
	before := w
	w.Accept(10) // outside the window: must not set a bit that aliases a live one
	if w != before {
		t.Fatal("Accept of a number older than the window changed the window")
	}
	w.Reset()
	if !w.Check(10_000) || !w.Check(0) {
		t.Fatal("Reset did not empty the window")
	}
}

func BenchmarkReplayCheckAccept(b *testing.B) {
	var w ReplayWindow
	b.ReportAllocs()
	pn := uint64(0)
	for b.Loop() {
		// In order with every 8th packet arriving 3 late.
		p := pn
		if pn%8 == 0 && pn >= 3 {
			p = pn - 3
		}
		if w.Check(p) {
			w.Accept(p)
		}
		pn++
	}
}
