package wire

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// PacketType is the kind of a tunnel packet. Its value is the packet's first
// byte, except that a data packet's first byte also carries the packet number
// length in its two low bits.
type PacketType uint8

// Packet types.
const (
	// PacketHandshakeInit carries the initiator's Noise handshake message and
	// the index the initiator chose for the session (SenderIndex).
	PacketHandshakeInit PacketType = 0x01
	// PacketHandshakeResp carries the responder's Noise handshake message,
	// the responder's own index (SenderIndex) and the initiator's index
	// (ReceiverIndex).
	PacketHandshakeResp PacketType = 0x02
	// PacketReject is a stateless, unauthenticated hint, "I hold no session
	// for index SenderIndex", sent in answer to a data packet whose receiver
	// index is unknown. Anyone on the path can forge it: a receiver may
	// start a new handshake on it but must never tear a session down
	// because of it. Bytes after its header are reserved and ignored.
	PacketReject PacketType = 0x03
	// PacketCookie answers a handshake initiation that a responder under
	// load will not process yet: it carries, for the initiation's sender
	// (ReceiverIndex), a cookie to prove its address with (package crypt:
	// CookieGenerator). It is never longer than the initiation.
	PacketCookie PacketType = 0x04
	// PacketData carries AEAD-sealed frames for the session ReceiverIndex.
	// On the wire its first byte is 0x10 | (PNLen-1).
	PacketData PacketType = 0x10
)

// String returns the packet type's name.
func (t PacketType) String() string {
	switch t {
	case PacketHandshakeInit:
		return "HANDSHAKE_INIT"
	case PacketHandshakeResp:
		return "HANDSHAKE_RESP"
	case PacketReject:
		return "REJECT"
	case PacketCookie:
		return "COOKIE"
	case PacketData:
		return "DATA"
	}
	return fmt.Sprintf("PacketType(%#02x)", uint8(t))
}

// Header lengths in bytes.
const (
	// HandshakeInitHeaderLen is the header length of PacketHandshakeInit.
	HandshakeInitHeaderLen = 1 + 4
	// HandshakeRespHeaderLen is the header length of PacketHandshakeResp.
	HandshakeRespHeaderLen = 1 + 4 + 4
	// RejectHeaderLen is the length of a PacketReject header.
	RejectHeaderLen = 1 + 4
	// CookieHeaderLen is the length of a PacketCookie header.
	CookieHeaderLen = 1 + 4
	// MinDataHeaderLen is the length of a data header with a 1-byte packet
	// number.
	MinDataHeaderLen = 1 + 4 + 1
	// MaxHeaderLen is the longest header of any packet type: a data header
	// with a 4-byte packet number.
	MaxHeaderLen = 1 + 4 + 4
)

// NoPacketNumber stands for "no packet yet" in DecodePacketNumber (nothing
// received) and PacketNumberLen (nothing acknowledged). It is ^uint64(0), so
// "largest + 1" wraps to packet number 0, the first one a sender uses.
const NoPacketNumber = ^uint64(0)

// Header is the cleartext header of a tunnel packet. For a data packet the
// header bytes are the AEAD's additional data and the sealed payload starts
// right after them.
type Header struct {
	// Type is the packet type.
	Type PacketType
	// SenderIndex is the sender's session index (handshake packets), or the
	// index a rejected packet was addressed to (PacketReject). Unused for
	// data packets.
	SenderIndex uint32
	// ReceiverIndex is the receiving peer's session index (data packets and
	// PacketHandshakeResp). Unused otherwise.
	ReceiverIndex uint32
	// PacketNumber, for data packets only. When encoding it is the full
	// packet number and its PNLen low bytes are written. When parsed it holds
	// only those low bytes as read; recover the full number, which is the
	// AEAD nonce, with DecodePacketNumber(largest, h.PacketNumber, 8*h.PNLen).
	PacketNumber uint64
	// PNLen is the length of the truncated packet number on the wire, 1 to
	// 4 bytes (data packets only); choose it with PacketNumberLen.
	PNLen int
}

// Len returns the encoded length of h in bytes. It returns 0 for an unknown
// type or a data header whose PNLen is not 1 to 4.
func (h *Header) Len() int {
	switch h.Type {
	case PacketHandshakeInit:
		return HandshakeInitHeaderLen
	case PacketHandshakeResp:
		return HandshakeRespHeaderLen
	case PacketReject:
		return RejectHeaderLen
	case PacketCookie:
		return CookieHeaderLen
	case PacketData:
		if h.PNLen >= 1 && h.PNLen <= 4 {
			return 1 + 4 + h.PNLen
		}
	}
	return 0
}

// AppendHeader appends the encoding of h to b and returns the extended
// slice. The payload (Noise message or sealed frames) goes right after it.
// It panics if h.Type is unknown or a data header's PNLen is not 1 to 4: that
// is a bug in the caller.
func AppendHeader(b []byte, h *Header) []byte {
	switch h.Type {
	case PacketHandshakeInit, PacketReject:
		b = append(b, byte(h.Type))
		return binary.BigEndian.AppendUint32(b, h.SenderIndex)
	case PacketHandshakeResp:
		b = append(b, byte(h.Type))
		b = binary.BigEndian.AppendUint32(b, h.SenderIndex)
		return binary.BigEndian.AppendUint32(b, h.ReceiverIndex)
	case PacketCookie:
		b = append(b, byte(h.Type))
		return binary.BigEndian.AppendUint32(b, h.ReceiverIndex)
	case PacketData:
		if h.PNLen < 1 || h.PNLen > 4 {
			panic(fmt.Sprintf("wire: data header with packet number length %d", h.PNLen))
		}
		b = append(b, byte(PacketData)|byte(h.PNLen-1))
		b = binary.BigEndian.AppendUint32(b, h.ReceiverIndex)
		for i := h.PNLen - 1; i >= 0; i-- {
			b = append(b, byte(h.PacketNumber>>(8*i)))
		}
		return b
	}
	panic(fmt.Sprintf("wire: AppendHeader of unknown %v", h.Type))
}

// ParseHeader parses the header at the start of packet b. It returns the
// header and the offset at which the payload starts: b[:payloadOffset] is the
// header (the AEAD additional data of a data packet), b[payloadOffset:] the
// payload, possibly empty. The Header holds no reference to b. Errors wrap
// ErrTruncated or ErrUnknownPacket.
func ParseHeader(b []byte) (h Header, payloadOffset int, err error) {
	if len(b) == 0 {
		return Header{}, 0, fmt.Errorf("wire: packet header: empty packet: %w", ErrTruncated)
	}
	t := b[0]
	switch {
	case t == byte(PacketHandshakeInit) || t == byte(PacketReject):
		h.Type = PacketType(t)
		payloadOffset = HandshakeInitHeaderLen
	case t == byte(PacketHandshakeResp):
		h.Type = PacketHandshakeResp
		payloadOffset = HandshakeRespHeaderLen
	case t == byte(PacketCookie):
		h.Type = PacketCookie
		payloadOffset = CookieHeaderLen
	case t&^3 == byte(PacketData):
		h.Type = PacketData
		h.PNLen = int(t&3) + 1
		payloadOffset = 1 + 4 + h.PNLen
	default:
		return Header{}, 0, fmt.Errorf("wire: packet header: first byte %#02x: %w", t, ErrUnknownPacket)
	}
	if len(b) < payloadOffset {
		return Header{}, 0, fmt.Errorf("wire: %v header: %d bytes, need %d: %w",
			h.Type, len(b), payloadOffset, ErrTruncated)
	}
	switch h.Type {
	case PacketHandshakeInit, PacketReject:
		h.SenderIndex = binary.BigEndian.Uint32(b[1:])
	case PacketHandshakeResp:
		h.SenderIndex = binary.BigEndian.Uint32(b[1:])
		h.ReceiverIndex = binary.BigEndian.Uint32(b[5:])
	case PacketCookie:
		h.ReceiverIndex = binary.BigEndian.Uint32(b[1:])
	case PacketData:
		h.ReceiverIndex = binary.BigEndian.Uint32(b[1:])
		for _, c := range b[5:payloadOffset] {
			h.PacketNumber = h.PacketNumber<<8 | uint64(c)
		}
	}
	return h, payloadOffset, nil
}

// PacketNumberLen returns how many bytes (1 to 4) a sender should use to
// encode packet number pn when largestAcked is the largest packet number
// the peer has acknowledged (NoPacketNumber if none): enough to represent
// more than twice the unacknowledged packets (RFC 9000 §17.1, appendix
// A.2). Beyond 2^31 unacknowledged it still returns 4; a wrongly decoded
// number fails authentication.
func PacketNumberLen(pn, largestAcked uint64) int {
	unacked := pn - largestAcked // wraps to pn+1 when largestAcked is NoPacketNumber
	n := (bits.Len64(unacked) + 1 + 7) / 8
	return min(max(n, 1), 4)
}

// DecodePacketNumber recovers a full packet number from the nbits low bits
// that were on the wire (truncated), choosing the candidate closest to the
// next expected number, largest+1, where largest is the largest packet
// number received in an authenticated packet so far (NoPacketNumber if
// none). This is the algorithm of RFC 9000 appendix A.3. nbits is
// 8*Header.PNLen; for nbits outside 1 to 61 truncated is returned as is.
// When largest is at most MaxVarint (or NoPacketNumber) and truncated fits
// in nbits, the result never exceeds MaxVarint.
func DecodePacketNumber(largest, truncated uint64, nbits int) uint64 {
	if nbits < 1 || nbits > 61 {
		return truncated
	}
	expected := largest + 1
	win := uint64(1) << nbits
	hwin := win / 2
	mask := win - 1
	candidate := expected&^mask | truncated&mask
	if expected >= hwin && candidate <= expected-hwin && candidate < 1<<62-win {
		return candidate + win
	}
	if candidate > expected+hwin && candidate >= win || candidate > MaxVarint {
		// The second case only arises next to the end of the number space:
		// no packet number exceeds MaxVarint.
		return candidate - win
	}
	return candidate
}
