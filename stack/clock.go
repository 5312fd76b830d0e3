package stack

import (
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// minTimer is the shortest delay the netstack's timers get: gVisor's TCP
// sends its tail loss probe (RFC 8985) after twice the smoothed RTT, and
// arms its RACK reordering timer for about one RTT, with no floor; Linux
// adds at least two ticks to the probe's delay. On a LAN of a millisecond
// an edge not scheduled for a few milliseconds reads the client's ACKs
// after the probe fired, retransmits spuriously and cuts its window
// (TestLateACKsNoSpuriousRetransmit). Every other timer of the netstack is
// far longer than the floor. A timer of zero or less fires at once:
// TIME-WAIT, which the stack sets to none (see applyTCPOptions), and a
// probe whose retransmission timeout is already due.
const minTimer = 25 * time.Millisecond

// flooredClock is a tcpip.Clock whose timers wait at least floor, but for
// those asked to fire at once.
type flooredClock struct {
	tcpip.Clock
	floor time.Duration
}

func (c flooredClock) AfterFunc(d time.Duration, f func()) tcpip.Timer {
	return flooredTimer{Timer: c.Clock.AfterFunc(floored(d, c.floor), f), floor: c.floor}
}

func floored(d, floor time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return max(d, floor)
}

type flooredTimer struct {
	tcpip.Timer
	floor time.Duration
}

func (t flooredTimer) Reset(d time.Duration) { t.Timer.Reset(floored(d, t.floor)) }
