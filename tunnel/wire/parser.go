package wire

import "fmt"

// reader decodes fields from a byte slice. Reads past the end set short and
// return zero values, so a decoder checks once after a group of fields.
type reader struct {
	b     []byte
	off   int
	short bool
}

func (r *reader) varint() uint64 {
	v, n := parseVarint(r.b[r.off:])
	if n == 0 {
		r.short = true
		return 0
	}
	r.off += n
	return v
}

func (r *reader) byte() byte {
	if r.off >= len(r.b) {
		r.short = true
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) uint16() uint16 {
	if len(r.b)-r.off < 2 {
		r.short = true
		return 0
	}
	v := uint16(r.b[r.off])<<8 | uint16(r.b[r.off+1])
	r.off += 2
	return v
}

// bytes returns the next n bytes, aliasing r.b, with capacity cut to n so an
// append by the receiver never overwrites the following frames.
func (r *reader) bytes(n uint64) []byte {
	if uint64(len(r.b)-r.off) < n {
		r.short = true
		return nil
	}
	s := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return s
}

// rest returns all remaining bytes (see bytes).
func (r *reader) rest() []byte {
	return r.bytes(uint64(len(r.b) - r.off))
}

// frameNone is Parser.typ when there is no current frame.
const frameNone FrameType = 0xff

// Parser walks the frames of a decrypted packet payload without allocating.
//
//	var p wire.Parser // reuse one per connection
//	p.Reset(payload)
//	for p.Next() {
//		switch p.Type() {
//		case wire.FrameStream:
//			f := p.Stream()
//			...
//		}
//	}
//	if err := p.Err(); err != nil { /* close with CloseFrameEncoding */ }
//
// Decoded frames alias the payload (STREAM and DATAGRAM data, CLOSE reason)
// and the Parser (ACK ranges): the payload must stay unchanged while they are
// in use, and ACK ranges are valid until the next call to Next or Reset. The
// zero Parser is ready for Reset. A Parser is not safe for concurrent use.
//
// Parsing stops at the first malformed or unknown frame: nothing after it
// can be delimited. Frames already returned stay valid; whether to act on
// them is the caller's choice (a peer that sends a malformed frame has
// violated the protocol, so closing the connection is the usual answer).
type Parser struct {
	buf []byte
	off int
	typ FrameType
	err error

	padding           PaddingFrame
	ack               AckFrame
	resetStream       ResetStreamFrame
	stopSending       StopSendingFrame
	stream            StreamFrame
	maxData           MaxDataFrame
	maxStreamData     MaxStreamDataFrame
	dataBlocked       DataBlockedFrame
	streamDataBlocked StreamDataBlockedFrame
	close             CloseFrame
	streamOpen        StreamOpenFrame
	openResult        OpenResultFrame
	datagram          DatagramFrame
	ackRanges         [MaxAckRanges]AckRange
}

// Reset starts parsing payload, a packet's decrypted frames, from its first
// byte. The Parser keeps payload until the next Reset.
func (p *Parser) Reset(payload []byte) {
	p.buf = payload
	p.off = 0
	p.typ = frameNone
	p.err = nil
}

// Next decodes the next frame and reports whether there was one. It returns
// false at the end of the payload or on an error (see Err).
func (p *Parser) Next() bool {
	if p.err != nil || p.off >= len(p.buf) {
		p.typ = frameNone
		return false
	}
	start := p.off
	r := reader{b: p.buf, off: start + 1}
	t := p.buf[start]
	var err error
	switch {
	case t == byte(FramePadding):
		for r.off < len(r.b) && r.b[r.off] == 0 {
			r.off++
		}
		p.typ = FramePadding
		p.padding.Len = r.off - start
	case t == byte(FramePing):
		p.typ = FramePing
	case t&^ackECNBit == byte(FrameAck):
		p.typ = FrameAck
		err = parseAck(&r, t, &p.ack, &p.ackRanges)
	case t == byte(FrameResetStream):
		p.typ = FrameResetStream
		p.resetStream = ResetStreamFrame{StreamID: r.varint(), Code: ErrorCode(r.varint()), FinalSize: r.varint()}
	case t == byte(FrameStopSending):
		p.typ = FrameStopSending
		p.stopSending = StopSendingFrame{StreamID: r.varint(), Code: ErrorCode(r.varint())}
	case t&^7 == byte(FrameStream):
		p.typ = FrameStream
		err = p.parseStream(&r, t)
	case t == byte(FrameMaxData):
		p.typ = FrameMaxData
		p.maxData = MaxDataFrame{Max: r.varint()}
	case t == byte(FrameMaxStreamData):
		p.typ = FrameMaxStreamData
		p.maxStreamData = MaxStreamDataFrame{StreamID: r.varint(), Max: r.varint()}
	case t == byte(FrameDataBlocked):
		p.typ = FrameDataBlocked
		p.dataBlocked = DataBlockedFrame{Limit: r.varint()}
	case t == byte(FrameStreamDataBlocked):
		p.typ = FrameStreamDataBlocked
		p.streamDataBlocked = StreamDataBlockedFrame{StreamID: r.varint(), Limit: r.varint()}
	case t == byte(FrameClose):
		p.typ = FrameClose
		err = p.parseClose(&r)
	case t == byte(FrameStreamOpen):
		p.typ = FrameStreamOpen
		err = p.parseStreamOpen(&r)
	case t == byte(FrameOpenResult):
		p.typ = FrameOpenResult
		p.openResult = OpenResultFrame{StreamID: r.varint(), Code: OpenCode(r.varint())}
	case t&^datagramLenBit == byte(FrameDatagram):
		p.typ = FrameDatagram
		p.datagram.OmitLength = t&datagramLenBit == 0
		if p.datagram.OmitLength {
			p.datagram.Data = r.rest()
		} else {
			p.datagram.Data = r.bytes(r.varint())
		}
	default:
		p.err = fmt.Errorf("wire: frame at payload offset %d: type byte %#02x: %w", start, t, ErrUnknownFrame)
		p.typ = frameNone
		return false
	}
	if err == nil && r.short {
		err = ErrTruncated
	}
	if err != nil {
		p.err = fmt.Errorf("wire: %v frame at payload offset %d: %w", p.typ, start, err)
		p.typ = frameNone
		return false
	}
	p.off = r.off
	return true
}

// parseStream decodes a STREAM frame body.
func (p *Parser) parseStream(r *reader, t byte) error {
	f := &p.stream
	f.StreamID = r.varint()
	f.Offset = 0
	if t&streamOffBit != 0 {
		f.Offset = r.varint()
	}
	f.Fin = t&streamFinBit != 0
	f.OmitLength = t&streamLenBit == 0
	if f.OmitLength {
		f.Data = r.rest()
	} else {
		f.Data = r.bytes(r.varint())
	}
	if r.short {
		return ErrTruncated
	}
	if uint64(len(f.Data)) > MaxVarint-f.Offset {
		return fmt.Errorf("offset %d, length %d: %w", f.Offset, len(f.Data), ErrStreamOffset)
	}
	return nil
}

// parseClose decodes a CLOSE frame body.
func (p *Parser) parseClose(r *reader) error {
	p.close.Code = CloseCode(r.varint())
	n := r.varint()
	if r.short {
		return ErrTruncated
	}
	if n > MaxReasonLen {
		return fmt.Errorf("%d-byte reason, at most %d: %w", n, MaxReasonLen, ErrReasonTooLong)
	}
	p.close.Reason = r.bytes(n)
	return nil
}

// parseStreamOpen decodes a STREAM_OPEN frame body.
func (p *Parser) parseStreamOpen(r *reader) error {
	f := &p.streamOpen
	f.StreamID = r.varint()
	f.Proto = Proto(r.byte())
	if r.short {
		return ErrTruncated
	}
	var err error
	if f.Src, err = parseAddrPort(r); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if f.Dst, err = parseAddrPort(r); err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	return nil
}

// Err returns the error that stopped Next, or nil if the payload was parsed
// to its end. Errors wrap one of the package's sentinel errors.
func (p *Parser) Err() error { return p.err }

// Type returns the type of the frame Next decoded. It is meaningful only
// after Next returned true; accessors for other types return zero values,
// and so do all accessors after Next returned false.
func (p *Parser) Type() FrameType { return p.typ }

// Offset returns the offset in the payload at which parsing continues: after
// Next returned true, the end of the current frame; after an error, the start
// of the frame that failed.
func (p *Parser) Offset() int { return p.off }

// Padding returns the current frame if it is PADDING, else the zero value.
func (p *Parser) Padding() PaddingFrame {
	if p.typ != FramePadding {
		return PaddingFrame{}
	}
	return p.padding
}

// Ack returns the current frame if it is an ACK, else the zero value. Its
// Ranges alias the Parser and are valid until the next Next or Reset.
func (p *Parser) Ack() AckFrame {
	if p.typ != FrameAck {
		return AckFrame{}
	}
	return p.ack
}

// ResetStream returns the current frame if it is RESET_STREAM, else the zero
// value.
func (p *Parser) ResetStream() ResetStreamFrame {
	if p.typ != FrameResetStream {
		return ResetStreamFrame{}
	}
	return p.resetStream
}

// StopSending returns the current frame if it is STOP_SENDING, else the zero
// value.
func (p *Parser) StopSending() StopSendingFrame {
	if p.typ != FrameStopSending {
		return StopSendingFrame{}
	}
	return p.stopSending
}

// Stream returns the current frame if it is STREAM, else the zero value. Its
// Data aliases the payload.
func (p *Parser) Stream() StreamFrame {
	if p.typ != FrameStream {
		return StreamFrame{}
	}
	return p.stream
}

// MaxData returns the current frame if it is MAX_DATA, else the zero value.
func (p *Parser) MaxData() MaxDataFrame {
	if p.typ != FrameMaxData {
		return MaxDataFrame{}
	}
	return p.maxData
}

// MaxStreamData returns the current frame if it is MAX_STREAM_DATA, else the
// zero value.
func (p *Parser) MaxStreamData() MaxStreamDataFrame {
	if p.typ != FrameMaxStreamData {
		return MaxStreamDataFrame{}
	}
	return p.maxStreamData
}

// DataBlocked returns the current frame if it is DATA_BLOCKED, else the zero
// value.
func (p *Parser) DataBlocked() DataBlockedFrame {
	if p.typ != FrameDataBlocked {
		return DataBlockedFrame{}
	}
	return p.dataBlocked
}

// StreamDataBlocked returns the current frame if it is STREAM_DATA_BLOCKED,
// else the zero value.
func (p *Parser) StreamDataBlocked() StreamDataBlockedFrame {
	if p.typ != FrameStreamDataBlocked {
		return StreamDataBlockedFrame{}
	}
	return p.streamDataBlocked
}

// Close returns the current frame if it is CLOSE, else the zero value. Its
// Reason aliases the payload.
func (p *Parser) Close() CloseFrame {
	if p.typ != FrameClose {
		return CloseFrame{}
	}
	return p.close
}

// StreamOpen returns the current frame if it is STREAM_OPEN, else the zero
// value.
func (p *Parser) StreamOpen() StreamOpenFrame {
	if p.typ != FrameStreamOpen {
		return StreamOpenFrame{}
	}
	return p.streamOpen
}

// OpenResult returns the current frame if it is OPEN_RESULT, else the zero
// value.
func (p *Parser) OpenResult() OpenResultFrame {
	if p.typ != FrameOpenResult {
		return OpenResultFrame{}
	}
	return p.openResult
}

// Datagram returns the current frame if it is DATAGRAM, else the zero value.
// Its Data aliases the payload.
func (p *Parser) Datagram() DatagramFrame {
	if p.typ != FrameDatagram {
		return DatagramFrame{}
	}
	return p.datagram
}
