package edge

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/tunnel"
)

// The near edge's warnings while its tunnel is down: the first after
// firstDownWarning (a handshake answered at all is answered within a
// second or two), then at intervals doubling up to maxDownWarning.
const (
	firstDownWarning = 5 * time.Second
	maxDownWarning   = time.Minute
)

// link is what the edge knows of one tunnel's life (the one peer's, an
// upstream's or a hub's branch's), also while no tunnel is up: the loop
// that keeps the tunnel up writes it, Status and Ready read it. Times
// are the wall clock's, read by that loop (the edge is a driver).
type link struct {
	mu sync.Mutex
	// initiator: this edge dials the tunnel (it counts its handshakes).
	initiator bool
	// addr is the peer's address: the one dialled, or the one the
	// peer's handshake came from.
	addr string
	up   bool
	// since is when the tunnel last came up or went down; before either,
	// when the loop started.
	since time.Time
	// lastHandshake is when the last handshake completed (zero: none).
	lastHandshake time.Time
	// attempts counts the initiations sent since the tunnel was last up:
	// those of dials that ended, plus dialSent of the dial in progress.
	attempts, dialSent uint64
	lastErr            string
	// The down warnings' schedule (initiator): when the next is due, and
	// the interval after it.
	nextWarn  time.Time
	warnAfter time.Duration
}

// newLink returns the state of a tunnel not yet up, at now.
func newLink(initiator bool, addr string, now time.Time) *link {
	l := &link{initiator: initiator, addr: addr}
	l.wentDown(now)
	return l
}

// wentDown records (at now) that the tunnel is down, and restarts the
// warnings' schedule.
func (l *link) wentDownAt(now time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wentDown(now)
	if err != nil {
		l.lastErr = downError(err)
	}
}

func (l *link) wentDown(now time.Time) {
	l.up, l.since = false, now
	l.nextWarn, l.warnAfter = now.Add(firstDownWarning), 2*firstDownWarning
}

// cameUp records (at now) that the tunnel to addr is up, its handshake
// completed keysAge ago.
func (l *link) cameUp(now time.Time, addr string, keysAge time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.up, l.since, l.addr = true, now, addr
	l.lastHandshake = now.Add(-keysAge)
	l.attempts, l.dialSent = 0, 0
}

// handshakesSent records that the dial in progress has sent n initiations
// (the driver's Config.OnHandshakeSent).
func (l *link) handshakesSent(n uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dialSent = n
}

// dialFailed records that a dial (or a wait for the peer) ended without a
// tunnel, with err.
func (l *link) dialFailed(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attempts += l.dialSent
	l.dialSent = 0
	if err != nil {
		l.lastErr = downError(err)
	}
}

// snapshot is the link's state for the status, at now; keysAge is the up
// tunnel's (the time since its last handshake or rekey).
func (l *link) snapshot(now time.Time, keysAge time.Duration) control.TunnelState {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := control.TunnelState{State: "down", Peer: l.addr, Since: l.since, LastHandshake: l.lastHandshake,
		HandshakeAttempts: l.attempts + l.dialSent, LastError: l.lastErr}
	if l.up {
		s.State = "up"
		if keysAge > 0 {
			s.LastHandshake = now.Add(-keysAge)
		}
	}
	return s
}

// downSince is when the tunnel last went down (or the loop started).
func (l *link) downSince() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.since
}

// setAddr records that the peer is dialled at addr from now on (its host
// name moved).
func (l *link) setAddr(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addr = addr
}

// isUp reports whether the tunnel is up.
func (l *link) isUp() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up
}

// downReason says, in one line, why the tunnel is down at now: for how
// long, and what the handshakes met.
func (l *link) downReason(now time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	what := "tunnel"
	if l.addr != "" {
		what = "tunnel to " + l.addr
	}
	s := fmt.Sprintf("%s down since %v", what, now.Sub(l.since).Round(time.Second))
	switch n := l.attempts + l.dialSent; {
	case l.initiator && n > 0:
		s += fmt.Sprintf(": no answer to %d handshake%s", n, plural(n))
	case !l.initiator:
		s += ": waiting for the peer's handshake"
	}
	if l.lastErr != "" {
		s += " (last error: " + l.lastErr + ")"
	}
	return s
}

// warnDue reports whether a down warning is due at now (and schedules the
// next), with the attempts so far and how long the tunnel has been down.
func (l *link) warnDue(now time.Time) (due bool, attempts uint64, down time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.up || now.Before(l.nextWarn) {
		return false, 0, 0
	}
	l.nextWarn = now.Add(l.warnAfter)
	l.warnAfter = min(2*l.warnAfter, maxDownWarning)
	return true, l.attempts + l.dialSent, now.Sub(l.since)
}

// downError says in one line why a tunnel closed or a dial failed, in the
// operator's words where the reason is a usual one.
func downError(err error) string {
	switch {
	case errors.Is(err, tunnel.ErrPeerClosed):
		return "closed by the peer (it stopped or restarted)"
	case errors.Is(err, tunnel.ErrPeerLostSession):
		return "the peer restarted and lost the session"
	case errors.Is(err, tunnel.ErrIdleTimeout):
		return "nothing heard from the peer for its timeout (PeerTimeout)"
	case errors.Is(err, tunnel.ErrHandshakeTimeout):
		return "no answer to the handshakes within the peer timeout (PeerTimeout)"
	}
	s := oneLine(err.Error())
	for _, p := range []string{"driver: tunnel closed: ", "driver: dial: ", "driver: "} {
		s = strings.TrimPrefix(s, p)
	}
	return s
}

// oneLine keeps the first line of s: status and readiness answers are one
// line per fact.
func oneLine(s string) string {
	for i, r := range s {
		if r == '\n' || r == '\r' {
			return s[:i]
		}
	}
	return s
}

func plural(n uint64) string {
	if n == 1 {
		return ""
	}
	return "s"
}
