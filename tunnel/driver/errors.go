package driver

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/wanopt/wanopt/tunnel/wire"
)

// Sentinel errors. Errors returned by this package wrap one of them, or
// one of package tunnel's, and add context (test with errors.Is). None of
// them ever carries key material.
var (
	// ErrTunnelClosed: the tunnel is closed (Close was called, the peer
	// closed it, or it timed out). The error also wraps the reason from
	// package tunnel (tunnel.ErrLocalClose, tunnel.ErrPeerClosed,
	// tunnel.ErrIdleTimeout, ...). Dial or Listen again for a new one.
	ErrTunnelClosed = errors.New("driver: tunnel closed")

	// ErrStreamClosed: Close was called on this stream (also wraps
	// net.ErrClosed, as net.Conn methods do after Close).
	ErrStreamClosed = fmt.Errorf("driver: stream closed locally: %w", net.ErrClosed)

	// ErrWriteClosed: Write after CloseWrite (the FIN is already queued).
	ErrWriteClosed = errors.New("driver: write after CloseWrite")

	// ErrStreamReset: the peer reset the stream (its sending half: Read
	// fails), or asked us to stop sending (STOP_SENDING: Write fails). The
	// error is a *StreamError holding the peer's code.
	ErrStreamReset = errors.New("driver: stream reset by the peer")

	// ErrAlreadyAnswered: Accept or Reject was called twice on one
	// IncomingStream.
	ErrAlreadyAnswered = errors.New("driver: incoming stream already answered")

	// ErrConfig: the Config is unusable; the message says which field.
	ErrConfig = errors.New("driver: invalid config")

	// Open failures: the peer answered our OpenStream with a code other
	// than wire.OpenOK. The error is an *OpenError wrapping one of these.
	ErrOpenRefused       = errors.New("driver: destination refused the connection")
	ErrOpenUnreachable   = errors.New("driver: destination unreachable from the far edge")
	ErrOpenTimedOut      = errors.New("driver: destination did not answer the far edge in time")
	ErrOpenNotAllowed    = errors.New("driver: the far edge's policy does not allow this destination")
	ErrOpenResourceLimit = errors.New("driver: the far edge has too many flows or too little memory")
	ErrOpenFailed        = errors.New("driver: the far edge could not open the stream")
)

// Stream error codes (RESET_STREAM and STOP_SENDING) used by wanopt's
// edges. The tunnel carries any code; these are the ones given meaning.
const (
	// CodeNoError: the stream was closed or abandoned with nothing to
	// report (Close with unread data, an OpenStream given up).
	CodeNoError wire.ErrorCode = 0
	// CodeTCPReset: a TCP endpoint of the flow (the client at the near
	// edge, the server at the far edge) reset the connection or failed;
	// the other edge resets its side in turn.
	CodeTCPReset wire.ErrorCode = 1
	// CodePeerRestarted: the far edge lost the tunnel session (it
	// restarted); the driver moved to a new session and the stream's
	// state died with the old one (set locally, never sent).
	CodePeerRestarted wire.ErrorCode = 2
)

// OpenError reports the peer's refusal of OpenStream. It wraps the
// sentinel matching Code (ErrOpenRefused, ErrOpenUnreachable,
// ErrOpenTimedOut, ErrOpenNotAllowed, ErrOpenResourceLimit or, for any
// other code, ErrOpenFailed).
type OpenError struct {
	Code     wire.OpenCode
	Src, Dst netip.AddrPort
}

// Error implements error.
func (e *OpenError) Error() string {
	return fmt.Sprintf("driver: open stream %v -> %v: the far edge answered %v: %v",
		e.Src, e.Dst, e.Code, e.Unwrap())
}

// Unwrap returns the sentinel matching Code.
func (e *OpenError) Unwrap() error { return openCodeErr(e.Code) }

// openCodeErr maps an OPEN_RESULT code to its sentinel.
func openCodeErr(c wire.OpenCode) error {
	switch c {
	case wire.OpenRefused:
		return ErrOpenRefused
	case wire.OpenUnreachable:
		return ErrOpenUnreachable
	case wire.OpenTimedOut:
		return ErrOpenTimedOut
	case wire.OpenNotAllowed:
		return ErrOpenNotAllowed
	case wire.OpenResourceLimit:
		return ErrOpenResourceLimit
	}
	return ErrOpenFailed
}

// StreamError reports that the peer reset a stream (Read) or asked us to
// stop sending (Write), with the peer's application error code. It wraps
// ErrStreamReset.
type StreamError struct {
	StreamID uint64
	Code     wire.ErrorCode
	// StopSending is true when the peer stopped reading (Write failed);
	// false when it reset its sending half (Read failed).
	StopSending bool
}

// Error implements error.
func (e *StreamError) Error() string {
	if e.StopSending {
		return fmt.Sprintf("driver: stream %d: the peer stopped reading (code %d); the write was abandoned", e.StreamID, e.Code)
	}
	return fmt.Sprintf("driver: stream %d: reset by the peer (code %d); unread data was discarded", e.StreamID, e.Code)
}

// Unwrap returns ErrStreamReset.
func (e *StreamError) Unwrap() error { return ErrStreamReset }
