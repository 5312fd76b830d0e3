package recovery

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// bruteRanges returns the ranges of set, ascending.
func bruteRanges(set map[uint64]bool, largest uint64) []wire.AckRange {
	var out []wire.AckRange
	for pn := uint64(0); pn <= largest; pn++ {
		if !set[pn] {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Largest+1 == pn {
			out[n-1].Largest = pn
		} else {
			out = append(out, wire.AckRange{Smallest: pn, Largest: pn})
		}
	}
	return out
}

// arrivalOrder returns packet numbers 0..n-1 in a seeded, locally shuffled
// order (each delayed by up to reorder positions), with some lost and some
// duplicated.
func arrivalOrder(rng *rand.Rand, n, reorder int, lossP, dupP float64) []uint64 {
	type arr struct {
		at float64
		pn uint64
	}
	var a []arr
	for pn := range n {
		if rng.Float64() < lossP {
			continue
		}
		a = append(a, arr{float64(pn) + rng.Float64()*float64(reorder), uint64(pn)})
		if rng.Float64() < dupP {
			a = append(a, arr{float64(pn) + rng.Float64()*float64(3*reorder), uint64(pn)})
		}
	}
	slices.SortStableFunc(a, func(x, y arr) int {
		switch {
		case x.at < y.at:
			return -1
		case x.at > y.at:
			return 1
		}
		return 0
	})
	out := make([]uint64, len(a))
	for i := range a {
		out[i] = a[i].pn
	}
	return out
}

func TestReceiverRangesMatchBruteForce(t *testing.T) {
	tests := []struct {
		name    string
		tracked int
		reorder int
		lossP   float64
	}{
		{"in order, lossless", 64, 0, 0},
		{"reordered", 4096, 8, 0},
		{"reordered and lossy", 4096, 20, 0.05},
		{"few ranges kept", 6, 20, 0.05},
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			r := NewReceiver(ReceiverConfig{TrackedRanges: tc.tracked, AckRanges: wire.MaxAckRanges})
			seen := map[uint64]bool{}
			var largest uint64
			var f wire.AckFrame
			for i, pn := range arrivalOrder(rng, 3000, tc.reorder, tc.lossP, 0.05) {
				floor := r.set.floor
				dup := r.OnPacketReceived(t0, pn, true)
				if want := seen[pn] || pn < floor; dup != want {
					t.Fatalf("seed %d: packet %d (arrival %d): duplicate = %v, want %v", seed, pn, i, dup, want)
				}
				seen[pn] = true
				largest = max(largest, pn)
				got := r.set.r
				if tc.tracked >= 4096 {
					if want := bruteRanges(seen, largest); !slices.Equal(got, want) {
						t.Fatalf("seed %d: after packet %d ranges %v, want %v", seed, pn, got, want)
					}
				} else {
					checkRangeInvariants(t, seed, got, seen, largest, tc.tracked)
				}
				if !r.BuildAck(t0, &f) {
					t.Fatal("BuildAck found nothing")
				}
				if err := f.Validate(); err != nil {
					t.Fatalf("seed %d: invalid frame: %v", seed, err)
				}
				for j, rg := range f.Ranges {
					if rg != got[len(got)-1-j] {
						t.Fatalf("seed %d: frame range %d = %v, want %v", seed, j, rg, got[len(got)-1-j])
					}
				}
			}
		})
	}
}

// checkRangeInvariants checks a bounded range set: ascending, disjoint,
// non-adjacent, at most capacity ranges, only received packets, and the
// newest range ending at the largest received packet.
func checkRangeInvariants(t *testing.T, seed uint64, rs []wire.AckRange, seen map[uint64]bool, largest uint64, capacity int) {
	t.Helper()
	if len(rs) == 0 || len(rs) > capacity {
		t.Fatalf("seed %d: %d ranges, capacity %d", seed, len(rs), capacity)
	}
	for i, rg := range rs {
		if rg.Smallest > rg.Largest || i > 0 && rs[i-1].Largest+1 >= rg.Smallest {
			t.Fatalf("seed %d: bad ranges %v", seed, rs)
		}
		for pn := rg.Smallest; pn <= rg.Largest; pn++ {
			if !seen[pn] {
				t.Fatalf("seed %d: range %v holds unreceived %d", seed, rg, pn)
			}
		}
	}
	if rs[len(rs)-1].Largest != largest {
		t.Fatalf("seed %d: newest range %v, largest received %d", seed, rs[len(rs)-1], largest)
	}
}

func TestAckPolicy(t *testing.T) {
	type step struct {
		atMs      float64
		pn        uint64
		eliciting bool
		ackSent   bool // call OnAckSent after this arrival
	}
	tests := []struct {
		name      string
		ackEvery  int
		steps     []step
		checkAtMs float64
		wantDue   bool
		wantTimer float64 // ms; -1 for none
	}{
		{"one packet waits", 0, []step{{0, 0, true, false}}, 4.9, false, 5},
		{"delayed ack timer fires", 0, []step{{0, 0, true, false}}, 5, true, 5},
		{"ack every 2", 0, []step{{0, 0, true, false}, {1, 1, true, false}}, 1, true, 1},
		{"gap acks at once", 0, []step{{0, 0, true, true}, {1, 2, true, false}}, 1, true, 1},
		{"reordered fill acks at once", 0, []step{{0, 0, true, true}, {1, 2, true, true}, {2, 1, true, false}}, 2, true, 2},
		{"first packet not 0", 0, []step{{0, 3, true, false}}, 0, true, 0},
		{"ack-only packets do not elicit", 0, []step{{0, 0, false, false}, {1, 1, false, false}, {2, 5, false, false}}, 10, false, -1},
		{"ack sent stops the timer", 0, []step{{0, 0, true, true}}, 10, false, -1},
		{"ack every 10: nine wait", 10, []step{{0, 0, true, false}, {0, 1, true, false}, {0, 2, true, false},
			{0, 3, true, false}, {0, 4, true, false}, {0, 5, true, false}, {0, 6, true, false},
			{0, 7, true, false}, {0, 8, true, false}}, 1, false, 5},
		{"ack every 10: tenth", 10, []step{{0, 0, true, false}, {0, 1, true, false}, {0, 2, true, false},
			{0, 3, true, false}, {0, 4, true, false}, {0, 5, true, false}, {0, 6, true, false},
			{0, 7, true, false}, {0, 8, true, false}, {1, 9, true, false}}, 1, true, 1},
		// ACK thinning: two packets soon after an ACK wait for the
		// interval; ten do not.
		{"two packets within the interval wait", 0, []step{{0, 0, true, true}, {0.1, 1, true, false}, {0.2, 2, true, false}}, 0.9, false, 1},
		{"two packets: due at the interval", 0, []step{{0, 0, true, true}, {0.1, 1, true, false}, {0.2, 2, true, false}}, 1, true, 1},
		{"two packets after the interval", 0, []step{{0, 0, true, true}, {1.5, 1, true, false}, {1.6, 2, true, false}}, 1.6, true, 1.6},
		{"ten packets within the interval", 0, []step{{0, 0, true, true}, {0.1, 1, true, false}, {0.1, 2, true, false},
			{0.1, 3, true, false}, {0.1, 4, true, false}, {0.1, 5, true, false}, {0.1, 6, true, false},
			{0.1, 7, true, false}, {0.1, 8, true, false}, {0.1, 9, true, false}, {0.2, 10, true, false}}, 0.2, true, 0.2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReceiver(ReceiverConfig{})
			if tc.ackEvery > 0 {
				r.SetAckEveryPackets(tc.ackEvery)
			}
			for _, s := range tc.steps {
				r.OnPacketReceived(ms(s.atMs), s.pn, s.eliciting)
				if s.ackSent {
					var f wire.AckFrame
					r.BuildAck(ms(s.atMs), &f)
					r.OnAckSent(ms(s.atMs))
				}
			}
			if got := r.AckDue(ms(tc.checkAtMs)); got != tc.wantDue {
				t.Errorf("AckDue = %v, want %v", got, tc.wantDue)
			}
			want := monotime.Time(0)
			if tc.wantTimer >= 0 {
				want = ms(tc.wantTimer)
			}
			if got := r.NextTimeout(); got != want {
				t.Errorf("NextTimeout = %v, want %v", got, want)
			}
		})
	}
}

func TestBuildAck(t *testing.T) {
	r := NewReceiver(ReceiverConfig{AckRanges: 2})
	var f wire.AckFrame
	if r.BuildAck(t0, &f) {
		t.Fatal("BuildAck with nothing received")
	}
	for _, pn := range []uint64{0, 1, 3, 5, 6} {
		r.OnPacketReceived(ms(float64(pn)), pn, true)
	}
	if !r.AckPending() || !r.BuildAck(ms(9.5), &f) {
		t.Fatal("no ACK to build")
	}
	want := []wire.AckRange{{Smallest: 5, Largest: 6}, {Smallest: 3, Largest: 3}}
	if !slices.Equal(f.Ranges, want) || f.AckDelay != 3500 {
		t.Fatalf("frame ranges %v delay %d, want %v 3500", f.Ranges, f.AckDelay, want)
	}
	r.OnAckSent(ms(9.5))
	if r.AckPending() || r.AckDue(ms(100)) {
		t.Fatal("ACK still pending after OnAckSent")
	}
	if st := r.Stats(); st.AcksSent != 1 || st.PacketsReceived != 5 || st.Ranges != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPruneOnAckOfAck(t *testing.T) {
	r := NewReceiver(ReceiverConfig{})
	for _, pn := range []uint64{0, 1, 2, 4, 5, 7, 8, 9} {
		r.OnPacketReceived(t0, pn, true)
	}
	r.OnAckOfAckReceived(100) // never received: ignored
	if len(r.set.r) != 3 {
		t.Fatalf("ack of an impossible ACK pruned: %v", r.set.r)
	}
	r.OnAckOfAckReceived(5)
	if want := []wire.AckRange{{Smallest: 7, Largest: 9}}; !slices.Equal(r.set.r, want) {
		t.Fatalf("after prune ranges %v, want %v", r.set.r, want)
	}
	if !r.OnPacketReceived(t0, 3, true) {
		t.Fatal("late packet below the pruned floor not reported as duplicate")
	}
	if r.OnPacketReceived(t0, 6, true) {
		t.Fatal("packet 6 above the floor reported as duplicate")
	}
	if want := []wire.AckRange{{Smallest: 6, Largest: 9}}; !slices.Equal(r.set.r, want) {
		t.Fatalf("ranges %v, want %v", r.set.r, want)
	}
	r.OnAckOfAckReceived(8)
	if want := []wire.AckRange{{Smallest: 9, Largest: 9}}; !slices.Equal(r.set.r, want) {
		t.Fatalf("ranges %v, want %v", r.set.r, want)
	}
	r.OnAckOfAckReceived(9)
	var f wire.AckFrame
	if r.BuildAck(t0, &f) {
		t.Fatalf("ACK built after everything was pruned: %v", f.Ranges)
	}
}

func TestRangeDropOldest(t *testing.T) {
	r := NewReceiver(ReceiverConfig{TrackedRanges: 3})
	for _, pn := range []uint64{0, 2, 4, 6} {
		r.OnPacketReceived(t0, pn, true)
	}
	want := []wire.AckRange{{Smallest: 2, Largest: 2}, {Smallest: 4, Largest: 4}, {Smallest: 6, Largest: 6}}
	if !slices.Equal(r.set.r, want) || r.Stats().RangesDropped != 1 {
		t.Fatalf("ranges %v dropped %d, want %v 1", r.set.r, r.Stats().RangesDropped, want)
	}
	if !r.OnPacketReceived(t0, 0, true) {
		t.Fatal("packet of a dropped range not a duplicate")
	}
	if r.OnPacketReceived(t0, 1, true) {
		t.Fatal("packet 1 (never received, above floor) reported duplicate")
	}
	want[0].Smallest = 1
	if !slices.Equal(r.set.r, want) {
		t.Fatalf("ranges %v, want %v", r.set.r, want)
	}
}
