package recovery

import "errors"

// Sentinel errors returned by Sender.OnAck. Both mean the peer sent an
// impossible ACK frame; the connection should close with a protocol
// violation. When OnAck returns an error it has changed no state except the
// Stats.BadAcks counter.
var (
	// ErrAckUnsent means an ACK frame acknowledges a packet number that was
	// never sent.
	ErrAckUnsent = errors.New("ack of a packet number never sent")

	// ErrAckInvalid means an ACK frame's ranges are malformed (empty, not
	// descending, overlapping or too many). Frames decoded by a wire.Parser
	// never fail this check.
	ErrAckInvalid = errors.New("malformed ack frame")
)
