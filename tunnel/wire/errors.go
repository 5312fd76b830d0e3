package wire

import "errors"

// Sentinel errors. Every error returned by this package wraps exactly one of
// them (test with errors.Is) and adds context: which packet or frame failed
// and at what offset. All of them describe bad input bytes; none is a
// transient condition, so a caller never retries a parse.
var (
	// ErrTruncated means the input ended inside a header, a frame or a
	// varint, or a length field points past the end of the input.
	ErrTruncated = errors.New("truncated")

	// ErrUnknownPacket means the first byte of a packet is not a packet
	// type this version knows (or has reserved bits set).
	ErrUnknownPacket = errors.New("unknown packet type")

	// ErrUnknownFrame means a frame type byte is not a frame type this
	// version knows. Frame types are single-byte varints; a multi-byte frame
	// type is unknown too. The rest of the payload cannot be parsed.
	ErrUnknownFrame = errors.New("unknown frame type")

	// ErrAckRange means an ACK frame's ranges reach below packet number 0.
	ErrAckRange = errors.New("ack range below packet number zero")

	// ErrTooManyAckRanges means an ACK frame carries more than MaxAckRanges
	// ranges.
	ErrTooManyAckRanges = errors.New("too many ack ranges")

	// ErrStreamOffset means a STREAM frame's offset plus length exceeds
	// MaxVarint (2^62-1), the largest stream offset.
	ErrStreamOffset = errors.New("stream offset plus length exceeds 2^62-1")

	// ErrReasonTooLong means a CLOSE frame's reason is longer than
	// MaxReasonLen.
	ErrReasonTooLong = errors.New("close reason too long")

	// ErrAddress means a STREAM_OPEN address has a length other than 0, 4
	// or 16 bytes.
	ErrAddress = errors.New("bad address length")
)
