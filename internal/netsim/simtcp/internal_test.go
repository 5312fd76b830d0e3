package simtcp

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

func TestIntervalSet(t *testing.T) {
	tests := []struct {
		name      string
		adds      []span
		wantFresh []span // of the last add
		want      []span
	}{
		{"into empty", []span{{5, 10}}, []span{{5, 10}}, []span{{5, 10}}},
		{"disjoint below", []span{{5, 10}, {1, 3}}, []span{{1, 3}}, []span{{1, 3}, {5, 10}}},
		{"adjacent merges", []span{{5, 10}, {10, 12}}, []span{{10, 12}}, []span{{5, 12}}},
		{"covered adds nothing", []span{{5, 10}, {6, 9}}, nil, []span{{5, 10}}},
		{"bridges two", []span{{1, 3}, {5, 7}, {9, 11}, {2, 10}}, []span{{3, 5}, {7, 9}}, []span{{1, 11}}},
		{"empty span", []span{{1, 3}, {4, 4}}, nil, []span{{1, 3}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var x intervalSet
			var fresh []span
			for _, a := range tc.adds {
				fresh = x.add(a.lo, a.hi, nil)
			}
			if !slices.Equal(fresh, tc.wantFresh) || !slices.Equal(x.s, tc.want) {
				t.Errorf("fresh %v set %v, want %v and %v", fresh, x.s, tc.wantFresh, tc.want)
			}
		})
	}
}

// TestIntervalSetAgainstBitmap adds random spans and trims, checking the set
// and the fresh spans against a bitmap.
func TestIntervalSetAgainstBitmap(t *testing.T) {
	const seed = 1
	r := rand.New(rand.NewPCG(seed, 0))
	var x intervalSet
	var bits [200]bool
	floor := int64(0)
	for range 3000 {
		if r.IntN(10) == 0 {
			floor = min(floor+int64(r.IntN(5)), 150)
			x.trimBelow(floor)
			for i := range floor {
				bits[i] = false
			}
		} else {
			lo := floor + int64(r.IntN(40))
			hi := lo + int64(r.IntN(8))
			var want []span
			for i := lo; i < hi; i++ {
				if !bits[i] {
					if n := len(want); n > 0 && want[n-1].hi == i {
						want[n-1].hi++
					} else {
						want = append(want, span{i, i + 1})
					}
					bits[i] = true
				}
			}
			if got := x.add(lo, hi, nil); !slices.Equal(got, want) {
				t.Fatalf("seed %d: add(%d, %d) fresh %v, want %v", seed, lo, hi, got, want)
			}
		}
		var want []span
		for i, b := range bits {
			if b {
				if n := len(want); n > 0 && want[n-1].hi == int64(i) {
					want[n-1].hi++
				} else {
					want = append(want, span{int64(i), int64(i) + 1})
				}
			}
		}
		if !slices.Equal(x.s, want) {
			t.Fatalf("seed %d: set %v, want %v", seed, x.s, want)
		}
	}
}

func TestCubicWindowCurve(t *testing.T) {
	const mss = 1000
	c := NewCubic(mss)
	t0 := monotime.Time(time.Second)
	c.ssthresh = 0 // skip slow start
	c.cwnd = 1000 * mss
	c.OnLoss(t0)
	if c.Cwnd() != 700*mss || c.wMax != 1000*mss {
		t.Fatalf("after loss cwnd %d wMax %.0f, want 700 and 1000 segments", c.Cwnd()/mss, c.wMax/mss)
	}
	// K = cbrt(W_max·(1-β)/C) = cbrt(1000·0.3/0.4) seconds.
	wantK := math.Cbrt(1000 * 0.3 / 0.4)
	c.OnAck(t0, Ack{})
	if math.Abs(c.k-wantK) > 1e-9 {
		t.Errorf("K = %.4f s, want %.4f", c.k, wantK)
	}
	// Feed ACKs for a whole window every RTT of 100 ms (long enough to stay
	// out of the Reno-friendly region); the window
	// follows W_cubic: below W_max before K, at W_max around K, above after.
	rtt := 100 * time.Millisecond
	now := t0
	for now.Sub(t0).Seconds() < wantK {
		now = now.Add(rtt)
		c.OnAck(now, Ack{Bytes: c.Cwnd(), SRTT: rtt})
	}
	if w := float64(c.Cwnd()) / mss; w < 990 || w > 1010 {
		t.Errorf("at K the window is %.0f segments, want about W_max = 1000", w)
	}
	for now.Sub(t0).Seconds() < wantK+5 {
		now = now.Add(rtt)
		c.OnAck(now, Ack{Bytes: c.Cwnd(), SRTT: rtt})
	}
	want := 1000 + 0.4*5*5*5 // W_cubic(K+5)
	if w := float64(c.Cwnd()) / mss; math.Abs(w-want) > 0.02*want {
		t.Errorf("5 s after K the window is %.0f segments, want about %.0f", w, want)
	}
}

func TestRenoAIMD(t *testing.T) {
	const mss = 1000
	r := NewReno(mss)
	now := monotime.Time(time.Second)
	r.OnAck(now, Ack{Bytes: 10 * mss}) // slow start doubles per window
	if r.Cwnd() != 20*mss {
		t.Fatalf("slow start: cwnd %d, want 20 segments", r.Cwnd()/mss)
	}
	r.OnLoss(now)
	if r.Cwnd() != 10*mss {
		t.Fatalf("after loss cwnd %d, want 10 segments", r.Cwnd()/mss)
	}
	for range 3 { // three windows acknowledged: +1 segment each
		r.OnAck(now, Ack{Bytes: r.Cwnd()})
	}
	if r.Cwnd() != 13*mss {
		t.Errorf("congestion avoidance: cwnd %d, want 13 segments", r.Cwnd()/mss)
	}
	r.OnRTO(now)
	if r.Cwnd() != mss || r.ssthresh != 6*mss+mss/2 {
		t.Errorf("after RTO cwnd %d ssthresh %d, want 1 and 6.5 segments", r.Cwnd(), r.ssthresh)
	}
}
