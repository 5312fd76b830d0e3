package wire

import "fmt"

// FrameType identifies a frame. Its value is the first type byte of the
// frame's encoding; frames whose type byte carries flags (ACK, STREAM,
// DATAGRAM) are named by the lowest value of their range. All frame types are
// below 0x40, so a type is always one byte (a one-byte varint).
type FrameType uint8

// Frame types. Numbers follow QUIC (RFC 9000 §19, RFC 9221) where QUIC has
// an equivalent frame; STREAM_OPEN and OPEN_RESULT are wanopt's own.
const (
	FramePadding           FrameType = 0x00 // PADDING: a run of zero bytes
	FramePing              FrameType = 0x01 // PING: elicits an ACK
	FrameAck               FrameType = 0x02 // ACK: 0x02, or 0x03 with ECN counts
	FrameResetStream       FrameType = 0x04 // RESET_STREAM: abort sending
	FrameStopSending       FrameType = 0x05 // STOP_SENDING: ask the peer to abort
	FrameStream            FrameType = 0x08 // STREAM: 0x08-0x0f, bits OFF 0x04, LEN 0x02, FIN 0x01
	FrameMaxData           FrameType = 0x10 // MAX_DATA: connection credit
	FrameMaxStreamData     FrameType = 0x11 // MAX_STREAM_DATA: stream credit
	FrameDataBlocked       FrameType = 0x14 // DATA_BLOCKED: sender blocked by connection credit
	FrameStreamDataBlocked FrameType = 0x15 // STREAM_DATA_BLOCKED: sender blocked by stream credit
	FrameClose             FrameType = 0x1c // CLOSE: close the connection
	FrameStreamOpen        FrameType = 0x20 // STREAM_OPEN: open a stream to a destination
	FrameOpenResult        FrameType = 0x21 // OPEN_RESULT: outcome of a STREAM_OPEN
	FrameDatagram          FrameType = 0x30 // DATAGRAM: 0x30 to the end of the packet, 0x31 with length
)

// Type-byte flag bits.
const (
	ackECNBit      = 0x01
	streamOffBit   = 0x04
	streamLenBit   = 0x02
	streamFinBit   = 0x01
	datagramLenBit = 0x01
)

// String returns the frame type's name as in the protocol description.
func (t FrameType) String() string {
	switch t {
	case FramePadding:
		return "PADDING"
	case FramePing:
		return "PING"
	case FrameAck:
		return "ACK"
	case FrameResetStream:
		return "RESET_STREAM"
	case FrameStopSending:
		return "STOP_SENDING"
	case FrameStream:
		return "STREAM"
	case FrameMaxData:
		return "MAX_DATA"
	case FrameMaxStreamData:
		return "MAX_STREAM_DATA"
	case FrameDataBlocked:
		return "DATA_BLOCKED"
	case FrameStreamDataBlocked:
		return "STREAM_DATA_BLOCKED"
	case FrameClose:
		return "CLOSE"
	case FrameStreamOpen:
		return "STREAM_OPEN"
	case FrameOpenResult:
		return "OPEN_RESULT"
	case FrameDatagram:
		return "DATAGRAM"
	}
	return fmt.Sprintf("FrameType(%#02x)", uint8(t))
}

// AckEliciting reports whether a packet holding a frame of this type must be
// acknowledged. PADDING, ACK and CLOSE are not ack-eliciting; every other
// frame is.
func (t FrameType) AckEliciting() bool {
	return t != FramePadding && t != FrameAck && t != FrameClose
}

// ErrorCode is the application error code of RESET_STREAM and STOP_SENDING.
// Its meaning belongs to the stream layer; the codec carries any value up to
// MaxVarint.
type ErrorCode uint64

// CloseCode says why a connection was closed (CLOSE frame). Unknown values
// are carried as they are.
type CloseCode uint64

// Close codes.
const (
	CloseNoError           CloseCode = 0 // orderly shutdown
	CloseInternalError     CloseCode = 1 // the sender hit a bug or resource failure
	CloseProtocolViolation CloseCode = 2 // the peer broke a protocol rule not covered below
	CloseFrameEncoding     CloseCode = 3 // a frame failed to parse (any error of this package)
	CloseFlowControl       CloseCode = 4 // the peer sent beyond the credit it was given
	CloseStreamLimit       CloseCode = 5 // the peer opened more streams than allowed
	CloseStreamState       CloseCode = 6 // a frame for a stream in a state that forbids it
	CloseFinalSize         CloseCode = 7 // a stream's final size changed or was exceeded
	CloseShutdown          CloseCode = 8 // the edge is shutting down or was reconfigured
)

// String returns the close code's name.
func (c CloseCode) String() string {
	switch c {
	case CloseNoError:
		return "no error"
	case CloseInternalError:
		return "internal error"
	case CloseProtocolViolation:
		return "protocol violation"
	case CloseFrameEncoding:
		return "frame encoding error"
	case CloseFlowControl:
		return "flow control error"
	case CloseStreamLimit:
		return "stream limit error"
	case CloseStreamState:
		return "stream state error"
	case CloseFinalSize:
		return "final size error"
	case CloseShutdown:
		return "shutdown"
	}
	return fmt.Sprintf("CloseCode(%d)", uint64(c))
}

// MaxReasonLen is the longest reason a CLOSE frame carries, in bytes.
const MaxReasonLen = 256

// PaddingFrame is a run of Len PADDING bytes (zeros). The parser folds
// consecutive PADDING bytes into one PaddingFrame.
type PaddingFrame struct {
	Len int // number of zero bytes, at least 1 when parsed
}

// EncodedLen returns the encoded length, Len (0 if Len is negative).
func (f *PaddingFrame) EncodedLen() int { return max(f.Len, 0) }

// Append appends Len zero bytes to b (none if Len is not positive).
func (f *PaddingFrame) Append(b []byte) []byte {
	return append(b, make([]byte, f.EncodedLen())...)
}

// PingFrame is a PING frame. It has no body; its only effect is to make the
// packet ack-eliciting.
type PingFrame struct{}

// EncodedLen returns 1.
func (f *PingFrame) EncodedLen() int { return 1 }

// Append appends a PING frame to b.
func (f *PingFrame) Append(b []byte) []byte { return append(b, byte(FramePing)) }

// ResetStreamFrame (RESET_STREAM) tells the peer that the sender abandons
// sending on a stream; FinalSize is the number of bytes it had sent.
type ResetStreamFrame struct {
	StreamID  uint64
	Code      ErrorCode
	FinalSize uint64
}

// EncodedLen returns the encoded length of f.
func (f *ResetStreamFrame) EncodedLen() int {
	return 1 + VarintLen(f.StreamID) + VarintLen(uint64(f.Code)) + VarintLen(f.FinalSize)
}

// Append appends f to b. It panics if a field exceeds MaxVarint.
func (f *ResetStreamFrame) Append(b []byte) []byte {
	b = append(b, byte(FrameResetStream))
	b = AppendVarint(b, f.StreamID)
	b = AppendVarint(b, uint64(f.Code))
	return AppendVarint(b, f.FinalSize)
}

// StopSendingFrame (STOP_SENDING) asks the peer to stop sending on a stream.
type StopSendingFrame struct {
	StreamID uint64
	Code     ErrorCode
}

// EncodedLen returns the encoded length of f.
func (f *StopSendingFrame) EncodedLen() int {
	return 1 + VarintLen(f.StreamID) + VarintLen(uint64(f.Code))
}

// Append appends f to b. It panics if a field exceeds MaxVarint.
func (f *StopSendingFrame) Append(b []byte) []byte {
	b = append(b, byte(FrameStopSending))
	b = AppendVarint(b, f.StreamID)
	return AppendVarint(b, uint64(f.Code))
}

// MaxDataFrame (MAX_DATA) raises the connection-level credit: the peer may
// send stream data up to Max bytes in total over all streams.
type MaxDataFrame struct {
	Max uint64
}

// EncodedLen returns the encoded length of f.
func (f *MaxDataFrame) EncodedLen() int { return 1 + VarintLen(f.Max) }

// Append appends f to b. It panics if Max exceeds MaxVarint.
func (f *MaxDataFrame) Append(b []byte) []byte {
	return AppendVarint(append(b, byte(FrameMaxData)), f.Max)
}

// MaxStreamDataFrame (MAX_STREAM_DATA) raises a stream's credit: the peer may
// send up to offset Max on the stream.
type MaxStreamDataFrame struct {
	StreamID uint64
	Max      uint64
}

// EncodedLen returns the encoded length of f.
func (f *MaxStreamDataFrame) EncodedLen() int { return 1 + VarintLen(f.StreamID) + VarintLen(f.Max) }

// Append appends f to b. It panics if a field exceeds MaxVarint.
func (f *MaxStreamDataFrame) Append(b []byte) []byte {
	b = AppendVarint(append(b, byte(FrameMaxStreamData)), f.StreamID)
	return AppendVarint(b, f.Max)
}

// DataBlockedFrame (DATA_BLOCKED) says the sender had data to send but was
// blocked by the connection credit Limit.
type DataBlockedFrame struct {
	Limit uint64
}

// EncodedLen returns the encoded length of f.
func (f *DataBlockedFrame) EncodedLen() int { return 1 + VarintLen(f.Limit) }

// Append appends f to b. It panics if Limit exceeds MaxVarint.
func (f *DataBlockedFrame) Append(b []byte) []byte {
	return AppendVarint(append(b, byte(FrameDataBlocked)), f.Limit)
}

// StreamDataBlockedFrame (STREAM_DATA_BLOCKED) says the sender had data to
// send on a stream but was blocked by the stream credit Limit.
type StreamDataBlockedFrame struct {
	StreamID uint64
	Limit    uint64
}

// EncodedLen returns the encoded length of f.
func (f *StreamDataBlockedFrame) EncodedLen() int {
	return 1 + VarintLen(f.StreamID) + VarintLen(f.Limit)
}

// Append appends f to b. It panics if a field exceeds MaxVarint.
func (f *StreamDataBlockedFrame) Append(b []byte) []byte {
	b = AppendVarint(append(b, byte(FrameStreamDataBlocked)), f.StreamID)
	return AppendVarint(b, f.Limit)
}

// CloseFrame (CLOSE) closes the connection. Reason is a human-readable
// explanation for logs, not necessarily UTF-8. A parsed CloseFrame's Reason
// aliases the parsed payload.
type CloseFrame struct {
	Code   CloseCode
	Reason []byte
}

// reason returns Reason cut to MaxReasonLen.
func (f *CloseFrame) reason() []byte {
	if len(f.Reason) > MaxReasonLen {
		return f.Reason[:MaxReasonLen]
	}
	return f.Reason
}

// EncodedLen returns the encoded length of f.
func (f *CloseFrame) EncodedLen() int {
	r := f.reason()
	return 1 + VarintLen(uint64(f.Code)) + VarintLen(uint64(len(r))) + len(r)
}

// Append appends f to b. A Reason longer than MaxReasonLen is cut to its
// first MaxReasonLen bytes. It panics if Code exceeds MaxVarint.
func (f *CloseFrame) Append(b []byte) []byte {
	r := f.reason()
	b = AppendVarint(append(b, byte(FrameClose)), uint64(f.Code))
	b = AppendVarint(b, uint64(len(r)))
	return append(b, r...)
}
