// Package ingress is where the near edge's two halves meet: a flow.Dialer
// whose Dial opens a tunnel stream carrying the intercepted flow's original
// source and destination, waits for the far edge to connect to the server,
// and hands the stream to the stack as the flow's far end.
//
// The far edge's answer decides what the client sees, through package
// flow's errors:
//
//	far edge answer                    flow error       client sees
//	OpenRefused (server sent RST)      ErrRefused       RST
//	OpenNotAllowed (egress policy)     ErrNotAllowed    RST
//	OpenUnreachable (no route, ICMP)   ErrUnreachable   nothing
//	OpenTimedOut (server silent)       ErrTimeout       nothing
//	OpenResourceLimit, stream limit    ErrUnreachable   nothing (the SYN is
//	                                                    retried, as after loss)
//	no tunnel up, tunnel closed        ErrUnreachable   nothing
//	anything else                      ErrUnreachable   nothing
//
// Not allowed gives a RST, as a rejecting firewall does: the client learns
// at once that this destination is not served, rather than retrying SYNs
// for minutes. A policy that must stay invisible belongs on the near edge
// (route only allowed prefixes into the TUN).
//
// The near edge's rules are here too (Rules, ParseRules; the command's
// --near-rule ACTION:PROTO:CIDR[:PORTS]): from a flow's first packet they
// decide whether the stack terminates it (optimise), its packets cross
// whole as datagrams (pass) or it is dropped. The edge hands them to the
// datagram paths as a passthru.Rules, so neither package dgram nor the
// stack imports this package. The matcher reads parsed headers, never
// bytes.
package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync/atomic"

	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// ErrNoTunnel is returned (wrapped with flow.ErrUnreachable) by Dial
// while no tunnel is up: the client's SYN goes unanswered and its retry
// may find the tunnel back.
var ErrNoTunnel = errors.New("bridge: no tunnel to the far edge is up")

// Dialer implements flow.Dialer over the current tunnel. The tunnel may be
// replaced (SetTunnel) when the connection to the far edge is re-established;
// flows already open keep their stream on the old tunnel and end with it.
// Its methods are safe for concurrent use.
type Dialer struct {
	cur atomic.Pointer[driver.Tunnel]
	log *slog.Logger

	opened, refused, notAllowed, unreachable, timedOut, failed atomic.Uint64
}

var _ flow.Dialer = (*Dialer)(nil)

// New returns a Dialer over t (nil: no tunnel yet; Dial fails until
// SetTunnel). log receives per-flow debug events; nil discards them.
func New(t *driver.Tunnel, log *slog.Logger) *Dialer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Dialer{log: log}
	d.cur.Store(t)
	return d
}

// SetTunnel makes t the tunnel new flows are opened on (nil: none).
func (d *Dialer) SetTunnel(t *driver.Tunnel) { d.cur.Store(t) }

// Tunnel returns the current tunnel, or nil.
func (d *Dialer) Tunnel() *driver.Tunnel { return d.cur.Load() }

// Dial opens a stream for the flow src→dst and returns it once the far
// edge has connected to dst. It returns when ctx ends (the half-open stream
// is then reset by the driver). Errors wrap one of package flow's
// sentinels (see the package doc) and the driver's error.
func (d *Dialer) Dial(ctx context.Context, src, dst netip.AddrPort) (flow.Conn, error) {
	t := d.cur.Load()
	if t == nil {
		d.unreachable.Add(1)
		return nil, fmt.Errorf("open flow %v→%v: %w: %w", src, dst, flow.ErrUnreachable, ErrNoTunnel)
	}
	s, err := t.OpenStream(ctx, src, dst)
	if err != nil {
		serr := d.classify(err)
		d.log.Debug("far edge did not open flow", "src", src, "dst", dst, "err", err)
		return nil, fmt.Errorf("open flow %v→%v through the tunnel: %w: %w", src, dst, serr, err)
	}
	d.opened.Add(1)
	// The stream's Abort carries the client's RST end to end: the far
	// edge's read of the stream fails at once and it resets the server's
	// socket. The other way, a server's RST makes the far edge reset the
	// stream, Read here fails with a *driver.StreamError (not io.EOF), and
	// the stack resets the client.
	return egress.TunnelEnd{Stream: s}, nil
}

// A stream reports its peer's reset to the relay even while the relay waits
// on the client both ways.
var _ flow.ResetWatcher = egress.TunnelEnd{}

// classify maps a driver error to the stack error that gives the client the
// outcome it would have seen without wanopt, and counts it.
func (d *Dialer) classify(err error) error {
	switch {
	case errors.Is(err, driver.ErrOpenRefused):
		d.refused.Add(1)
		return flow.ErrRefused
	case errors.Is(err, driver.ErrOpenNotAllowed):
		d.notAllowed.Add(1)
		return flow.ErrNotAllowed
	case errors.Is(err, driver.ErrOpenTimedOut), errors.Is(err, context.DeadlineExceeded):
		d.timedOut.Add(1)
		return flow.ErrTimeout
	case errors.Is(err, driver.ErrOpenUnreachable),
		errors.Is(err, driver.ErrOpenResourceLimit),
		errors.Is(err, tunnel.ErrStreamLimit),
		errors.Is(err, driver.ErrTunnelClosed):
		d.unreachable.Add(1)
		return flow.ErrUnreachable
	default:
		d.failed.Add(1)
		return flow.ErrUnreachable
	}
}

// Stats counts Dial outcomes since New.
type Stats struct {
	Opened, Refused, NotAllowed, Unreachable, TimedOut, Failed uint64
}

// Add returns the sum of s and o (the bridges of several upstreams).
func (s Stats) Add(o Stats) Stats {
	return Stats{Opened: s.Opened + o.Opened, Refused: s.Refused + o.Refused, NotAllowed: s.NotAllowed + o.NotAllowed,
		Unreachable: s.Unreachable + o.Unreachable, TimedOut: s.TimedOut + o.TimedOut, Failed: s.Failed + o.Failed}
}

// Stats returns a snapshot of the counters.
func (d *Dialer) Stats() Stats {
	return Stats{
		Opened:      d.opened.Load(),
		Refused:     d.refused.Load(),
		NotAllowed:  d.notAllowed.Load(),
		Unreachable: d.unreachable.Load(),
		TimedOut:    d.timedOut.Load(),
		Failed:      d.failed.Load(),
	}
}
