package wire

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// StreamFrame is a STREAM frame: Data at Offset of stream StreamID, and
// whether the stream ends after it (Fin).
//
// On the wire: type 0x08 | OFF (0x04, set when Offset != 0) | LEN (0x02,
// set unless OmitLength) | FIN (0x01); StreamID; Offset if OFF; length if
// LEN; then the data. Without LEN the data runs to the end of the packet, so
// such a frame must be the last one in its packet.
type StreamFrame struct {
	StreamID uint64
	Offset   uint64
	// Data is the stream data. A parsed frame's Data aliases the parsed
	// payload: it is valid only as long as that buffer is, and the receiver
	// must copy it out before reusing the buffer.
	Data []byte
	Fin  bool
	// OmitLength leaves the length field out: the frame fills the rest of
	// the packet. Use MaxStreamDataLen to size Data so that it does exactly.
	OmitLength bool
}

// streamHeaderLen is the length of a STREAM frame's type, stream ID and
// offset fields.
func streamHeaderLen(id, offset uint64) int {
	n := 1 + VarintLen(id)
	if offset != 0 {
		n += VarintLen(offset)
	}
	return n
}

// EncodedLen returns the encoded length of f.
func (f *StreamFrame) EncodedLen() int {
	n := streamHeaderLen(f.StreamID, f.Offset) + len(f.Data)
	if !f.OmitLength {
		n += VarintLen(uint64(len(f.Data)))
	}
	return n
}

// Append appends f to b. It panics if StreamID or Offset exceeds MaxVarint or
// Offset+len(Data) exceeds MaxVarint.
func (f *StreamFrame) Append(b []byte) []byte {
	if f.Offset > MaxVarint || uint64(len(f.Data)) > MaxVarint-f.Offset {
		panic(fmt.Sprintf("wire: STREAM frame offset %d + length %d exceeds 2^62-1", f.Offset, len(f.Data)))
	}
	t := byte(FrameStream)
	if f.Offset != 0 {
		t |= streamOffBit
	}
	if !f.OmitLength {
		t |= streamLenBit
	}
	if f.Fin {
		t |= streamFinBit
	}
	b = AppendVarint(append(b, t), f.StreamID)
	if f.Offset != 0 {
		b = AppendVarint(b, f.Offset)
	}
	if !f.OmitLength {
		b = AppendVarint(b, uint64(len(f.Data)))
	}
	return append(b, f.Data...)
}

// MaxStreamDataLen returns how many data bytes a STREAM frame for stream id
// at offset carries when it fills exactly space bytes with its length field
// omitted (OmitLength): space minus the frame's header, bounded so that
// offset plus the result stays within MaxVarint. It returns 0 when not even
// one data byte fits; whether a data-less FIN frame fits is told by
// EncodedLen.
func MaxStreamDataLen(space int, id, offset uint64) int {
	n := space - streamHeaderLen(id, offset)
	return clampStreamLen(n, offset)
}

// MaxStreamDataLenWithLength is MaxStreamDataLen for a frame that carries its
// length field, so that more frames may follow it: the largest n such that the
// frame with n data bytes takes at most space bytes.
func MaxStreamDataLenWithLength(space int, id, offset uint64) int {
	return clampStreamLen(maxWithLength(space-streamHeaderLen(id, offset)), offset)
}

// maxWithLength returns the largest n with VarintLen(n)+n <= avail, or 0.
func maxWithLength(avail int) int {
	n := avail - 1
	for n > 0 && n+VarintLen(uint64(n)) > avail {
		n--
	}
	return max(n, 0)
}

// clampStreamLen bounds n to [0, MaxVarint-offset].
func clampStreamLen(n int, offset uint64) int {
	if n <= 0 || offset > MaxVarint {
		return 0
	}
	if uint64(n) > MaxVarint-offset {
		return int(MaxVarint - offset)
	}
	return n
}

// DatagramFrame is a DATAGRAM frame: an unreliable payload, delivered at
// most once and never retransmitted.
//
// On the wire: type 0x30 (no length: the data runs to the end of the packet)
// or 0x31 followed by a varint length; then the data.
type DatagramFrame struct {
	// Data is the payload. A parsed frame's Data aliases the parsed payload.
	Data []byte
	// OmitLength leaves the length field out; the frame must then be the
	// last in its packet.
	OmitLength bool
}

// EncodedLen returns the encoded length of f.
func (f *DatagramFrame) EncodedLen() int {
	if f.OmitLength {
		return 1 + len(f.Data)
	}
	return 1 + VarintLen(uint64(len(f.Data))) + len(f.Data)
}

// Append appends f to b.
func (f *DatagramFrame) Append(b []byte) []byte {
	if f.OmitLength {
		b = append(b, byte(FrameDatagram))
	} else {
		b = AppendVarint(append(b, byte(FrameDatagram)|datagramLenBit), uint64(len(f.Data)))
	}
	return append(b, f.Data...)
}

// MaxDatagramDataLen returns how many payload bytes a DATAGRAM frame can
// carry in space bytes, with its length field (withLength) or without it
// (filling space exactly). It returns 0 when none fit.
func MaxDatagramDataLen(space int, withLength bool) int {
	if withLength {
		return maxWithLength(space - 1)
	}
	return max(space-1, 0)
}

// Proto is the transport protocol of a stream's original flow, as an IP
// protocol number.
type Proto uint8

// Transport protocols.
const (
	ProtoTCP Proto = 6
	ProtoUDP Proto = 17
)

// String returns the protocol's name.
func (p Proto) String() string {
	switch p {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	}
	return fmt.Sprintf("Proto(%d)", uint8(p))
}

// StreamOpenFrame (STREAM_OPEN) asks the peer to connect a new stream to the
// original destination of an intercepted flow.
//
// On the wire: type 0x20; StreamID (varint); Proto (1 byte); Src; Dst. Each
// address is a length byte (4 for IPv4, 16 for IPv6, 0 for no address), the
// address bytes, and the port (2 bytes, big endian).
type StreamOpenFrame struct {
	StreamID uint64
	Proto    Proto
	// Src and Dst are the original source and destination of the flow. An
	// IPv4-mapped IPv6 address is sent as 16 bytes and parses back as such.
	// An IPv6 zone is not sent. An invalid (zero) address is sent as "no
	// address" and parses back as netip.AddrPortFrom(netip.Addr{}, port).
	Src, Dst netip.AddrPort
}

// addrPortLen returns the encoded length of a.
func addrPortLen(a netip.AddrPort) int {
	return 1 + a.Addr().BitLen()/8 + 2
}

// appendAddrPort appends the encoding of a to b.
func appendAddrPort(b []byte, a netip.AddrPort) []byte {
	ip := a.Addr()
	switch {
	case ip.Is4():
		v := ip.As4()
		b = append(append(b, 4), v[:]...)
	case ip.Is6():
		v := ip.As16()
		b = append(append(b, 16), v[:]...)
	default:
		b = append(b, 0)
	}
	return binary.BigEndian.AppendUint16(b, a.Port())
}

// parseAddrPort decodes an address encoded by appendAddrPort.
func parseAddrPort(r *reader) (netip.AddrPort, error) {
	var ip netip.Addr
	switch n := r.byte(); n {
	case 0:
	case 4:
		if s := r.bytes(4); !r.short {
			ip = netip.AddrFrom4([4]byte(s))
		}
	case 16:
		if s := r.bytes(16); !r.short {
			ip = netip.AddrFrom16([16]byte(s))
		}
	default:
		if r.short {
			return netip.AddrPort{}, ErrTruncated
		}
		return netip.AddrPort{}, fmt.Errorf("%d-byte address: %w", n, ErrAddress)
	}
	port := r.uint16()
	if r.short {
		return netip.AddrPort{}, ErrTruncated
	}
	return netip.AddrPortFrom(ip, port), nil
}

// EncodedLen returns the encoded length of f.
func (f *StreamOpenFrame) EncodedLen() int {
	return 1 + VarintLen(f.StreamID) + 1 + addrPortLen(f.Src) + addrPortLen(f.Dst)
}

// Append appends f to b. It panics if StreamID exceeds MaxVarint.
func (f *StreamOpenFrame) Append(b []byte) []byte {
	b = AppendVarint(append(b, byte(FrameStreamOpen)), f.StreamID)
	b = append(b, byte(f.Proto))
	b = appendAddrPort(b, f.Src)
	return appendAddrPort(b, f.Dst)
}

// OpenCode is the outcome of a STREAM_OPEN, reported by OPEN_RESULT. Unknown
// values are carried as they are.
type OpenCode uint64

// Open outcomes.
const (
	OpenOK            OpenCode = 0 // connected; stream data may flow
	OpenRefused       OpenCode = 1 // the destination refused (TCP RST)
	OpenUnreachable   OpenCode = 2 // no route, or ICMP unreachable
	OpenTimedOut      OpenCode = 3 // the destination did not answer in time
	OpenNotAllowed    OpenCode = 4 // the egress policy forbids the destination
	OpenResourceLimit OpenCode = 5 // too many flows or not enough memory at the egress
	OpenUnsupported   OpenCode = 6 // the transport protocol is not supported
	OpenError         OpenCode = 7 // any other failure
)

// String returns the outcome's name.
func (c OpenCode) String() string {
	switch c {
	case OpenOK:
		return "ok"
	case OpenRefused:
		return "refused"
	case OpenUnreachable:
		return "unreachable"
	case OpenTimedOut:
		return "timed out"
	case OpenNotAllowed:
		return "not allowed"
	case OpenResourceLimit:
		return "resource limit"
	case OpenUnsupported:
		return "unsupported protocol"
	case OpenError:
		return "error"
	}
	return fmt.Sprintf("OpenCode(%d)", uint64(c))
}

// OpenResultFrame (OPEN_RESULT) answers a STREAM_OPEN.
//
// On the wire: type 0x21; StreamID; Code (both varints).
type OpenResultFrame struct {
	StreamID uint64
	Code     OpenCode
}

// EncodedLen returns the encoded length of f.
func (f *OpenResultFrame) EncodedLen() int {
	return 1 + VarintLen(f.StreamID) + VarintLen(uint64(f.Code))
}

// Append appends f to b. It panics if a field exceeds MaxVarint.
func (f *OpenResultFrame) Append(b []byte) []byte {
	b = AppendVarint(append(b, byte(FrameOpenResult)), f.StreamID)
	return AppendVarint(b, uint64(f.Code))
}
