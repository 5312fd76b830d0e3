package stack

import (
	"context"
	"errors"
	"io"
	"net/netip"
)

// Dialer opens the far side of an intercepted flow. The stack calls DialFlow
// for each intercepted SYN, before completing the client's handshake, from
// its own goroutine (many calls run concurrently). src is the client's
// address and dst the address the client connected to.
//
// DialFlow must return when ctx is done. Its error decides what the client
// sees:
//   - ErrRefused or ErrNotAllowed: a RST (connection refused);
//   - ErrUnreachable, ErrTimeout, a done ctx or any other error: no answer,
//     the SYN is dropped silently (the client retries and times out as it
//     would on a black-holed path; each retry is a new DialFlow call).
type Dialer interface {
	DialFlow(ctx context.Context, src, dst netip.AddrPort) (FlowConn, error)
}

// FlowConn is the far side of a flow.
//
// Read returns io.EOF once the far side has sent all its data (its FIN) and
// any other error when the far side failed or was reset; the stack then
// resets the client. CloseWrite passes the client's FIN on: the far side sees
// EOF and may keep sending. Close releases the flow and must unblock pending
// Read and Write calls. The stack calls Read from one goroutine and Write and
// CloseWrite from another, and Close exactly once when the flow ends.
type FlowConn interface {
	io.ReadWriteCloser
	CloseWrite() error
}

// Aborter is implemented by a FlowConn that can reset its far side (send a
// RST rather than a FIN). When the client resets the connection the stack
// calls Abort instead of Close, if available.
type Aborter interface {
	Abort() error
}

// Errors a Dialer returns (wrapped or not) to choose the client's outcome.
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
