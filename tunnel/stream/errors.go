package stream

import (
	"errors"

	"github.com/wanopt/wanopt/tunnel/wire"
)

// Sentinel errors. Every error this package returns for peer misbehaviour
// wraps exactly one of them, adding the stream ID and offsets. All are fatal
// to the connection: the connection closes it with CloseCode(err).
var (
	// ErrFlowControl means the peer sent data beyond the credit we gave
	// it, on the stream (MAX_STREAM_DATA) or on the connection (MAX_DATA).
	ErrFlowControl = errors.New("flow control limit exceeded")

	// ErrFinalSize means the peer changed a stream's final size, sent data
	// beyond it, or announced a final size below data it had already sent.
	ErrFinalSize = errors.New("final size violated")
)

// CloseCode returns the CLOSE code for an error returned by this package:
// wire.CloseFlowControl, wire.CloseFinalSize, or wire.CloseInternalError for
// any other error.
func CloseCode(err error) wire.CloseCode {
	switch {
	case errors.Is(err, ErrFlowControl):
		return wire.CloseFlowControl
	case errors.Is(err, ErrFinalSize):
		return wire.CloseFinalSize
	}
	return wire.CloseInternalError
}
