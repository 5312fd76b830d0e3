// Package share divides a link of known rate among the tunnels that cross
// it, max-min fairly, as a hub does with its data centre's link among its
// branches.
//
// Why the hub divides the link itself: BBR tunnels that start a few
// round trips apart behind one drop-tail queue keep the shares they
// started with. Each one's loss bound (inflight_hi) is frozen at what it
// held when Startup overflowed the queue, and together they keep the
// queue full, so every later bandwidth probe meets loss
// (`wanbench sim --share-tunnels 3 --stagger 300ms`, and with
// --hub-share). A hub told its link's rate caps each tunnel's pace at its
// max-min fair share, recomputed every interval from what each sent. The
// caps sum to a little under the link, so no queue stands, and each
// tunnel's controller still finds what the rest of its path allows below
// its cap.
//
// Allocate is sans-IO; the hub's driver calls it on a timer.
package share

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Tunnel is one tunnel's use of the link over the last interval.
type Tunnel struct {
	// SentBps is the rate it sent at (datagram payload, bits per second).
	SentBps uint64
	// CapBps is the cap it had over the interval; 0 for a tunnel that
	// had none yet (it is given a full share).
	CapBps uint64
}

// Saturated reports whether t used its cap (SaturatedFraction of it or
// more): it would have sent more, so it asks for as much as it can get.
func (t Tunnel) Saturated() bool {
	return t.CapBps == 0 || float64(t.SentBps) >= SaturatedFraction*float64(t.CapBps)
}

const (
	// SaturatedFraction of its cap is what a tunnel must send to count as
	// held back by it. BBR paces 10 % below its estimate in ProbeBW's
	// DOWN phase, so a tunnel at its cap sends at least 0.9 of it.
	SaturatedFraction = 0.85
	// Growth is how much more than it sent a tunnel below its cap may
	// send next interval: room to grow without waiting to saturate.
	Growth = 1.5
)

// LinkFraction of the link's rate is what Budget gives the tunnels' caps:
// the IP and UDP headers take 1.9 % beyond the datagram payload the caps
// count (28 bytes of 1500), and 2 % more keeps a queue from standing at
// the link.
const LinkFraction = 0.96

// Budget is the total of the caps for a link of linkBps (its rate on the
// wire, bits per second).
func Budget(linkBps uint64) uint64 { return uint64(float64(linkBps) * LinkFraction) }

// Interval is how often a hub recomputes the caps: a few round trips of
// a short WAN path, so that a branch that starts sending gets its share
// within about two intervals.
const Interval = 100 * time.Millisecond

// Allocate sets caps[i], the cap of tunnels[i] for the next interval.
// A tunnel that did not use its cap asks for what it sent times Growth; it
// gets that, or an equal share of what the others leave if that is less.
// The rest of totalBps is divided equally among the others (max-min
// fairness: no tunnel can get more without taking from one that has
// less). If every tunnel got what it asked for, what is left is divided
// among them all, so that light use is never held back. Every cap is at
// least totalBps/(4 × len(tunnels)), so that an idle tunnel that starts
// sending saturates its cap, and so takes its share, one interval later.
// order is scratch space (it saves an allocation per call); caps must have
// len(tunnels).
func Allocate(totalBps uint64, tunnels []Tunnel, caps []uint64, order []int) {
	n := uint64(len(tunnels))
	if n == 0 {
		return
	}
	const unset = ^uint64(0)
	order = order[:0]
	for i, t := range tunnels {
		caps[i] = unset
		if !t.Saturated() {
			order = append(order, i)
		}
	}
	demand := func(i int) uint64 { return uint64(float64(tunnels[i].SentBps) * Growth) }
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(demand(a), demand(b)); c != 0 {
			return c
		}
		return a - b
	})
	left, open := totalBps, n
	for _, i := range order {
		d := demand(i)
		if d >= left/open {
			break // this one and the rest take an equal share
		}
		caps[i] = d
		left -= d
		open--
	}
	// With open == 0 every tunnel got what it asked for, and what is left
	// goes to them all.
	equal, extra := uint64(0), left/n
	if open > 0 {
		equal, extra = left/open, 0
	}
	floor := totalBps / (4 * n)
	for i := range caps {
		if caps[i] == unset {
			caps[i] = equal
		}
		caps[i] = max(caps[i]+extra, floor)
	}
}

// MaxScale bounds how far above the budget Link raises the caps to make
// up for pacing the senders could not keep.
const MaxScale = 1.1

// Link divides one link among tunnels interval after interval. Beside
// Allocate, it learns how much of their caps the tunnels manage to send
// when every one is held by its cap: a sender that wakes late loses the
// pacing credit it could not spend, so on a loaded host caps summing to
// the budget move less than the budget. Link then raises the caps, up to
// MaxScale times the budget, until what the tunnels send adds up to the
// budget. The zero Link is ready to use.
type Link struct {
	scale   float64 // 0 until the first interval: 1
	linkBps uint64
	order   []int
}

// Caps sets caps[i], the cap of tunnels[i] for the next interval of a
// link of linkBps (see Allocate).
func (l *Link) Caps(linkBps uint64, tunnels []Tunnel, caps []uint64) {
	if l.scale == 0 || linkBps != l.linkBps {
		l.scale, l.linkBps = 1, linkBps
	}
	budget := float64(Budget(linkBps))
	var sent float64
	held := len(tunnels) > 0
	for _, t := range tunnels {
		sent += float64(t.SentBps)
		held = held && t.CapBps != 0 && t.Saturated()
	}
	if held && sent > 0 {
		// Half the step each interval: the rates measured over 100 ms
		// are noisy.
		r := min(max(budget/sent, 0.9), 1.1)
		l.scale = min(max(l.scale*math.Sqrt(r), 1), MaxScale)
	}
	l.order = slices.Grow(l.order[:0], len(tunnels))
	Allocate(uint64(budget*l.scale), tunnels, caps, l.order)
}

// Scale is the factor by which the caps now exceed the budget (1 to
// MaxScale).
func (l *Link) Scale() float64 { return max(l.scale, 1) }
