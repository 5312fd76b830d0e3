// Package flow is the vocabulary every part of an edge uses for one TCP
// flow: a Conn is one end of it, a Dialer opens the far end, Abort resets an
// end, and Relay copies between two ends and passes each end's FIN or RST on
// to the other.
//
// The near edge's stack dials the tunnel (a Dialer whose Conn is a tunnel
// stream) for each intercepted connection and relays the client's end to
// it; the far edge's egress dials the server (a kernel socket, or a
// connection from the client's own address through its netstack) for each
// stream and relays the two. Both use Relay, so a FIN, a RST and a failure
// mean the same thing on every hop.
package flow

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
)

// Conn is one end of a flow. Read returns io.EOF once the other side has
// sent all its data (its FIN) and another error when it failed or reset
// the flow. CloseWrite sends a FIN: the other side sees EOF and may go on
// sending. Close releases the end (gracefully: a FIN if not yet sent) and
// unblocks pending Read and Write calls; calling it again, or after Abort,
// does nothing. One goroutine may Read while another Writes.
type Conn interface {
	io.ReadWriteCloser
	CloseWrite() error
}

// Aborter is a Conn that can reset its other side (a RST, or a tunnel
// stream's reset) instead of closing gracefully. Abort releases the end
// as Close does.
type Aborter interface {
	Abort() error
}

// A ResetWatcher is a Conn that can report that its connection failed (the
// other side reset it, or it timed out) while no Read or Write waits on
// it. Relay watches each end that is one: when both directions wait on the
// other end, this end's RST would otherwise go unseen until the other end
// moves again, which may be never.
type ResetWatcher interface {
	// WatchReset calls f once, on a goroutine of its own, when the
	// connection fails, unless stop was called first. f may still run
	// shortly after stop returns.
	WatchReset(f func()) (stop func())
}

// Abort resets c: with its Abort method if it has one, as a RST for a
// kernel TCP socket (SO_LINGER 0), else by closing it.
func Abort(c Conn) error {
	switch c := c.(type) {
	case Aborter:
		return c.Abort()
	case *net.TCPConn:
		_ = c.SetLinger(0)
	}
	return c.Close()
}

// Dialer opens the far end of a flow from src (the client's address) to dst
// (the address the client connected to). Dial must return when ctx is
// done. A dialer that connects from its own address ignores src.
//
// The error decides what the client sees. Errors wrapping ErrRefused or
// ErrNotAllowed give it a RST (connection refused); ErrUnreachable,
// ErrTimeout, a done ctx or any other error give it no answer: its SYN is
// dropped, and it retries and times out as on a black-holed path. A
// kernel dialer's errno (ECONNREFUSED, EHOSTUNREACH, ETIMEDOUT…) is mapped
// the same way by the egress.
type Dialer interface {
	Dial(ctx context.Context, src, dst netip.AddrPort) (Conn, error)
}

// Outcomes of a Dial, as errors a Dialer returns (wrapped or not).
var (
	// ErrRefused: the server refused the connection; the client gets a RST.
	ErrRefused = errors.New("far side refused the connection")
	// ErrUnreachable: the server cannot be reached; the client gets no answer.
	ErrUnreachable = errors.New("far side unreachable")
	// ErrTimeout: connecting timed out; the client gets no answer.
	ErrTimeout = errors.New("connecting the far side timed out")
	// ErrNotAllowed: policy does not allow the destination; the client gets a
	// RST, as from a rejecting firewall.
	ErrNotAllowed = errors.New("destination not allowed by policy")
)
