package cc

import (
	"math/rand/v2"
	"testing"
)

func TestWindowedFilterBasics(t *testing.T) {
	mx := NewMaxFilter[int](10)
	mn := NewMinFilter[int](10)
	steps := []struct {
		t, v             int64
		wantMax, wantMin int
	}{
		{0, 5, 5, 5},
		{1, 3, 5, 3},
		{2, 8, 8, 3},
		{5, 4, 8, 3},
		{12, 4, 8, 4}, // min 3 (t=1) expired; max 8 (t=2) still inside
		{13, 6, 6, 4}, // max 8 expired: the later best is 6
		{30, 1, 1, 1}, // everything expired
	}
	for _, s := range steps {
		gotMax := mx.Update(int(s.v), s.t)
		gotMin := mn.Update(int(s.v), s.t)
		if gotMax != s.wantMax || gotMin != s.wantMin || mx.Get() != gotMax || mn.Get() != gotMin {
			t.Fatalf("t=%d v=%d: max %d min %d, want %d %d", s.t, s.v, gotMax, gotMin, s.wantMax, s.wantMin)
		}
	}
	mx.Reset(2, 40)
	if mx.Get() != 2 {
		t.Fatalf("Reset: %d", mx.Get())
	}
}

// TestWindowedFilterRandom checks the filter's guarantee against a brute
// force window: the answer is a value seen inside the window, and it is
// at least the best value seen in the window's last quarter.
func TestWindowedFilterRandom(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		rng := rand.New(rand.NewPCG(seed, 1))
		const window = 40
		f := NewMaxFilter[uint64](window)
		type obs struct {
			t int64
			v uint64
		}
		var hist []obs
		now := int64(0)
		for range 5000 {
			now += int64(rng.IntN(4))
			v := rng.Uint64N(1000)
			got := f.Update(v, now)
			hist = append(hist, obs{now, v})
			found := false
			var recentBest uint64
			for _, h := range hist {
				if now-h.t <= window && h.v == got {
					found = true
				}
				if now-h.t <= window/4 {
					recentBest = max(recentBest, h.v)
				}
			}
			if !found {
				t.Fatalf("seed %d t=%d: %d is not a sample from the window", seed, now, got)
			}
			if got < recentBest {
				t.Fatalf("seed %d t=%d: %d below the last quarter's best %d", seed, now, got, recentBest)
			}
			if len(hist) > 400 {
				hist = hist[200:]
			}
		}
	}
}
