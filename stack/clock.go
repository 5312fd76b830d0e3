package stack

import (
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// minTimer is the shortest delay the netstack's timers get: gVisor's TCP
// sends its tail loss probe (RFC 8985) after twice the smoothed RTT, and
// arms its RACK reordering timer for about one RTT, with no floor; Linux
// adds at least two ticks to the probe's delay. On a LAN of a millisecond
// an edge that was not scheduled for a few milliseconds (a busy or
// CPU-capped host) reads the client's ACKs after the probe fired: it
// retransmitted data the client had, entered a SACK recovery and cut its
// window. In the lab (wanbench cisco --rtt 0ms) every connection did
// so, 1,900 times in 30 s, all spurious; its window stayed at 10 to 40
// packets and it wrote 14 KB to the TUN at a time instead of 36 KB. Every
// other timer of the netstack (retransmission timeout, keepalive) is far
// longer than the floor. A timer of zero or less fires at once: TIME-WAIT,
// which the stack sets to none (see applyTCPOptions), and a probe whose
// retransmission timeout is already due.
const minTimer = 25 * time.Millisecond

// The netstack's timers also fire only on a grid of timerGrid, counted
// from the stack's start, so that the timers of its connections fire
// together: each connection's probe timer, moved later with every ACK,
// fires early once per floor and is re-armed (gVisor's timers are lazy),
// and four connections streaming to the client woke the near edge 153
// times a second for it, each wake-up with nothing else to do. On the
// grid they share at most 40 a second. A timer then waits up to one grid step
// longer; none of the netstack's is that precise (see minTimer).
const timerGrid = minTimer

// flooredClock is a tcpip.Clock whose timers wait at least floor, and fire
// on a grid of grid (0: none) from epoch, but for those asked to fire at
// once.
type flooredClock struct {
	tcpip.Clock
	floor, grid time.Duration
	epoch       tcpip.MonotonicTime
}

func newFlooredClock(c tcpip.Clock, floor, grid time.Duration) *flooredClock {
	return &flooredClock{Clock: c, floor: floor, grid: grid, epoch: c.NowMonotonic()}
}

func (c *flooredClock) AfterFunc(d time.Duration, f func()) tcpip.Timer {
	return flooredTimer{Timer: c.Clock.AfterFunc(c.delay(d), f), c: c}
}

// delay is how long a timer asked to wait d waits.
func (c *flooredClock) delay(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	d = max(d, c.floor)
	if c.grid <= 0 {
		return d
	}
	since := c.Clock.NowMonotonic().Sub(c.epoch)
	at := since + d
	if r := at % c.grid; r != 0 {
		at += c.grid - r
	}
	return at - since
}

type flooredTimer struct {
	tcpip.Timer
	c *flooredClock
}

func (t flooredTimer) Reset(d time.Duration) { t.Timer.Reset(t.c.delay(d)) }
