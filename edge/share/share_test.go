package share

import (
	"slices"
	"testing"
)

const mbit = 1_000_000

func TestAllocate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		total   uint64
		tunnels []Tunnel
		want    []uint64
	}{
		{"new tunnels take equal shares", 240 * mbit,
			[]Tunnel{{}, {}, {}}, []uint64{80 * mbit, 80 * mbit, 80 * mbit}},
		{"all saturated: equal shares, whatever they had", 240 * mbit,
			[]Tunnel{{SentBps: 150 * mbit, CapBps: 160 * mbit}, {SentBps: 38 * mbit, CapBps: 40 * mbit}, {SentBps: 40 * mbit, CapBps: 40 * mbit}},
			[]uint64{80 * mbit, 80 * mbit, 80 * mbit}},
		{"a light user gets its growth, the others split the rest", 240 * mbit,
			[]Tunnel{{SentBps: 20 * mbit, CapBps: 80 * mbit}, {SentBps: 80 * mbit, CapBps: 80 * mbit}, {SentBps: 79 * mbit, CapBps: 80 * mbit}},
			[]uint64{30 * mbit, 105 * mbit, 105 * mbit}},
		{"a user held elsewhere (its own slow line) leaves its share", 240 * mbit,
			[]Tunnel{{SentBps: 50 * mbit, CapBps: 120 * mbit}, {SentBps: 120 * mbit, CapBps: 120 * mbit}},
			[]uint64{75 * mbit, 165 * mbit}},
		{"growth beyond an equal share is cut to it", 240 * mbit,
			[]Tunnel{{SentBps: 90 * mbit, CapBps: 120 * mbit}, {SentBps: 110 * mbit, CapBps: 120 * mbit}},
			[]uint64{120 * mbit, 120 * mbit}},
		{"nobody saturated: the rest goes to all", 240 * mbit,
			[]Tunnel{{SentBps: 10 * mbit, CapBps: 120 * mbit}, {SentBps: 20 * mbit, CapBps: 120 * mbit}},
			[]uint64{15*mbit + 97500000, 30*mbit + 97500000}},
		{"idle tunnels keep a floor to start from", 240 * mbit,
			[]Tunnel{{SentBps: 0, CapBps: 20 * mbit}, {SentBps: 230 * mbit, CapBps: 230 * mbit}},
			[]uint64{30 * mbit, 240 * mbit}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caps := make([]uint64, len(tc.tunnels))
			Allocate(tc.total, tc.tunnels, caps, make([]int, 0, len(tc.tunnels)))
			if !slices.Equal(caps, tc.want) {
				t.Errorf("Allocate(%d, %+v) = %v, want %v", tc.total, tc.tunnels, caps, tc.want)
			}
		})
	}
}

// TestAllocateConverges iterates the hub's loop against tunnels that send
// what their cap allows (up to what their own path takes): from any start
// the saturated ones reach equal shares, and the caps never sum beyond the
// link except by the idle floors.
func TestAllocateConverges(t *testing.T) {
	const total = 240 * mbit
	pathLimit := []uint64{1000 * mbit, 1000 * mbit, 30 * mbit, 1000 * mbit} // tunnel 2's line is slow
	tunnels := []Tunnel{{SentBps: 200 * mbit, CapBps: 0}, {SentBps: 5 * mbit, CapBps: 6 * mbit}, {}, {SentBps: 0, CapBps: 1 * mbit}}
	caps := make([]uint64, len(tunnels))
	for range 20 {
		Allocate(total, tunnels, caps, nil)
		for i := range tunnels {
			tunnels[i] = Tunnel{SentBps: min(caps[i]*95/100, pathLimit[i]), CapBps: caps[i]}
		}
	}
	if caps[2] > 50*mbit || tunnels[2].SentBps != 30*mbit {
		t.Errorf("the slow tunnel: cap %d, sent %d; want it to send its line's 30 Mbit/s under a cap near that", caps[2], tunnels[2].SentBps)
	}
	for _, i := range []int{0, 1, 3} {
		if want := uint64(total-45*mbit) / 3; caps[i] < want*95/100 || caps[i] > want*105/100 {
			t.Errorf("tunnel %d: cap %d, want about %d (an equal share of what the slow one leaves)", i, caps[i], want)
		}
	}
	var sum uint64
	for _, c := range caps {
		sum += c
	}
	if sum > total {
		t.Errorf("caps sum to %d, beyond the link's %d", sum, total)
	}
}

func TestAllocateAllocs(t *testing.T) {
	tunnels := make([]Tunnel, 50)
	for i := range tunnels {
		tunnels[i] = Tunnel{SentBps: uint64(i) * mbit, CapBps: 5 * mbit}
	}
	caps, order := make([]uint64, len(tunnels)), make([]int, 0, len(tunnels))
	if n := testing.AllocsPerRun(100, func() { Allocate(240*mbit, tunnels, caps, order) }); n != 0 {
		t.Errorf("Allocate allocates %.0f times per call, want 0", n)
	}
}

// TestLinkScale: tunnels that send only part of their caps (late
// wake-ups) get caps raised until what they send adds up to the budget;
// tunnels that send their caps keep caps summing to the budget.
func TestLinkScale(t *testing.T) {
	const total = 250 * mbit
	budget := Budget(total)
	for _, tc := range []struct {
		name     string
		keep     float64 // fraction of its cap each tunnel sends
		wantSent float64 // what they send in the end, of the budget
	}{
		{"precise pacing", 1.0, 1.0},
		{"8 % lost", 0.92, 1.0},
		{"more lost than MaxScale makes up", 0.88, 0.88 * MaxScale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l Link
			tunnels := make([]Tunnel, 3)
			caps := make([]uint64, 3)
			for range 50 {
				l.Caps(total, tunnels, caps)
				for i := range tunnels {
					tunnels[i] = Tunnel{SentBps: uint64(float64(caps[i]) * tc.keep), CapBps: caps[i]}
				}
			}
			var sent uint64
			for _, u := range tunnels {
				sent += u.SentBps
			}
			if got := float64(sent) / float64(budget); got < tc.wantSent-0.01 || got > tc.wantSent+0.01 {
				t.Errorf("the tunnels send %.3f of the budget with caps %v (scale %.3f), want %.3f", got, caps, l.Scale(), tc.wantSent)
			}
			if caps[0] != caps[1] || caps[1] != caps[2] {
				t.Errorf("caps %v: want equal shares", caps)
			}
		})
	}
}
