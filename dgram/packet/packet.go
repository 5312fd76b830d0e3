// Package packet reads and writes the IP packets that cross the tunnel
// as datagrams (package dgram): the datagram's kind byte, IPv4 and IPv6
// headers, UDP and ICMP echo, and the "packet too big" answers a router
// sends. It holds no state; every parser of bytes from the network
// returns an error, never panics (FuzzParse).
package packet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// Datagram kinds: the first byte of every datagram (package dgram).
const (
	KindUp   byte = 1 // a client's packet, for the far edge to send on
	KindDown byte = 2 // a packet for the near edge's client
)

// IP protocol numbers and ICMP types this package handles.
const (
	ProtoICMP   = 1
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58

	ICMPEchoReply     = 0
	ICMPEchoRequest   = 8
	ICMPv6EchoRequest = 128
	ICMPv6EchoReply   = 129
)

// Header lengths without options.
const (
	IPv4HeaderLen = 20
	IPv6HeaderLen = 40
	L4HeaderLen   = 8 // UDP, ICMP echo, and an ICMP error's own header
	// defaultHopLimit is the TTL of the packets this package builds: they
	// come from the far edge's socket, whose own hops are the kernel's.
	defaultHopLimit = 64
)

var (
	// ErrMalformed: the bytes are not a well-formed IP packet (lengths,
	// IPv4 header checksum, version).
	ErrMalformed = errors.New("dgram: malformed IP packet")
	// ErrUnsupported: a well-formed packet this package does not carry: a
	// fragment, an IPv6 extension header, a protocol other than UDP and
	// ICMP, an ICMP message other than echo.
	ErrUnsupported = errors.New("dgram: IP packet of a kind not carried")
)

// Packet is a parsed IPv4 or IPv6 packet carrying UDP or an ICMP echo.
// Its slices point into the parsed bytes.
type Packet struct {
	Src, Dst netip.Addr
	// Proto is ProtoUDP, ProtoICMP or ProtoICMPv6.
	Proto    uint8
	HopLimit uint8
	// SrcPort and DstPort are UDP's.
	SrcPort, DstPort uint16
	// Type (ICMP echo request or reply), ID and Seq are an echo's.
	Type    uint8
	ID, Seq uint16
	// L4 is the UDP datagram or ICMP message, header included; Payload
	// the UDP payload or the echo's data.
	L4, Payload []byte
	// Len is the IP packet's length (bytes after it were ignored).
	Len int
}

// IsUDP reports whether p carries UDP.
func (p *Packet) IsUDP() bool { return p.Proto == ProtoUDP }

// IsEchoRequest reports whether p is an ICMP or ICMPv6 echo request.
func (p *Packet) IsEchoRequest() bool {
	return (p.Proto == ProtoICMP && p.Type == ICMPEchoRequest) || (p.Proto == ProtoICMPv6 && p.Type == ICMPv6EchoRequest)
}

// IsEchoReply reports whether p is an ICMP or ICMPv6 echo reply.
func (p *Packet) IsEchoReply() bool {
	return (p.Proto == ProtoICMP && p.Type == ICMPEchoReply) || (p.Proto == ProtoICMPv6 && p.Type == ICMPv6EchoReply)
}

// SrcAddrPort and DstAddrPort are the UDP endpoints (port 0 for ICMP).
func (p *Packet) SrcAddrPort() netip.AddrPort { return netip.AddrPortFrom(p.Src, p.SrcPort) }
func (p *Packet) DstAddrPort() netip.AddrPort { return netip.AddrPortFrom(p.Dst, p.DstPort) }

// Protocol returns the transport protocol number of an IPv4 or IPv6
// packet (the IPv6 next header, which may be an extension header), or
// false if b is too short or not IP. It reads one byte of the header:
// cheap enough for every packet.
func Protocol(b []byte) (uint8, bool) {
	if len(b) == 0 {
		return 0, false
	}
	switch b[0] >> 4 {
	case 4:
		if len(b) < IPv4HeaderLen {
			return 0, false
		}
		return b[9], true
	case 6:
		if len(b) < IPv6HeaderLen {
			return 0, false
		}
		return b[6], true
	}
	return 0, false
}

// Header is what ParseHeader read of an IP header.
type Header struct {
	V6       bool
	Proto    uint8 // the IPv4 protocol or IPv6 next header
	HopLimit uint8
	Src, Dst netip.Addr
	HdrLen   int // the IP header's length
	Len      int // the IP packet's length (bytes after it are ignored)
}

// ParseHeader checks the IPv4 or IPv6 header of b: lengths within b, IPv4's
// header checksum, no IPv4 fragment. Errors wrap ErrMalformed or
// ErrUnsupported. It never panics, whatever b holds.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	if len(b) == 0 {
		return h, fmt.Errorf("%w: empty", ErrMalformed)
	}
	switch b[0] >> 4 {
	case 4:
		if len(b) < IPv4HeaderLen {
			return h, fmt.Errorf("%w: %d bytes, shorter than an IPv4 header", ErrMalformed, len(b))
		}
		ihl := int(b[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(b[2:]))
		if ihl < IPv4HeaderLen || total < ihl || total > len(b) {
			return h, fmt.Errorf("%w: IPv4 header length %d, total length %d, %d bytes", ErrMalformed, ihl, total, len(b))
		}
		if checksum.Checksum(b[:ihl], 0) != 0xffff {
			return h, fmt.Errorf("%w: IPv4 header checksum", ErrMalformed)
		}
		if binary.BigEndian.Uint16(b[6:])&0x3fff != 0 {
			return h, fmt.Errorf("%w: IPv4 fragment", ErrUnsupported)
		}
		h.Proto, h.HopLimit = b[9], b[8]
		h.Src = netip.AddrFrom4([4]byte(b[12:16]))
		h.Dst = netip.AddrFrom4([4]byte(b[16:20]))
		h.HdrLen, h.Len = ihl, total
	case 6:
		if len(b) < IPv6HeaderLen {
			return h, fmt.Errorf("%w: %d bytes, shorter than an IPv6 header", ErrMalformed, len(b))
		}
		pl := int(binary.BigEndian.Uint16(b[4:]))
		if IPv6HeaderLen+pl > len(b) {
			return h, fmt.Errorf("%w: IPv6 payload length %d, %d bytes", ErrMalformed, pl, len(b))
		}
		h.V6 = true
		h.Proto, h.HopLimit = b[6], b[7]
		h.Src = netip.AddrFrom16([16]byte(b[8:24]))
		h.Dst = netip.AddrFrom16([16]byte(b[24:40]))
		h.HdrLen, h.Len = IPv6HeaderLen, IPv6HeaderLen+pl
	default:
		return h, fmt.Errorf("%w: IP version %d", ErrMalformed, b[0]>>4)
	}
	return h, nil
}

// UnsupportedProto is the error for an IP packet of a protocol the caller
// does not carry.
func (h *Header) UnsupportedProto() error {
	if h.V6 {
		return fmt.Errorf("%w: IPv6 next header %d", ErrUnsupported, h.Proto)
	}
	return fmt.Errorf("%w: IPv4 protocol %d", ErrUnsupported, h.Proto)
}

// Parse reads an IPv4 or IPv6 packet carrying UDP or an ICMP (ICMPv6)
// echo request or reply. Errors wrap ErrMalformed or ErrUnsupported. It
// never panics, whatever b holds. The transport checksum is not verified:
// the far edge's kernel computes a new one, and the near edge's client
// verifies the replies'.
func Parse(b []byte) (Packet, error) {
	var p Packet
	h, err := ParseHeader(b)
	if err != nil {
		return p, err
	}
	p.Proto, p.HopLimit, p.Src, p.Dst, p.Len = h.Proto, h.HopLimit, h.Src, h.Dst, h.Len
	icmp := uint8(ProtoICMP)
	if h.V6 {
		icmp = ProtoICMPv6
	}
	if p.Proto != ProtoUDP && p.Proto != icmp {
		return p, h.UnsupportedProto()
	}
	l4 := b[h.HdrLen:h.Len]
	if len(l4) < L4HeaderLen {
		return p, fmt.Errorf("%w: %d bytes of transport header", ErrMalformed, len(l4))
	}
	p.L4 = l4
	if p.Proto == ProtoUDP {
		ul := int(binary.BigEndian.Uint16(l4[4:]))
		if ul < L4HeaderLen || ul > len(l4) {
			return p, fmt.Errorf("%w: UDP length %d in %d bytes", ErrMalformed, ul, len(l4))
		}
		p.SrcPort = binary.BigEndian.Uint16(l4[0:])
		p.DstPort = binary.BigEndian.Uint16(l4[2:])
		p.L4, p.Payload = l4[:ul], l4[L4HeaderLen:ul]
		return p, nil
	}
	p.Type = l4[0]
	if !p.IsEchoRequest() && !p.IsEchoReply() {
		return p, fmt.Errorf("%w: ICMP type %d", ErrUnsupported, p.Type)
	}
	if l4[1] != 0 {
		return p, fmt.Errorf("%w: ICMP echo with code %d", ErrMalformed, l4[1])
	}
	p.ID = binary.BigEndian.Uint16(l4[4:])
	p.Seq = binary.BigEndian.Uint16(l4[6:])
	p.Payload = l4[L4HeaderLen:]
	return p, nil
}

// HeaderLen is the length of the IP and UDP (or ICMP echo) headers of a
// packet between addresses of a's family: 28 for IPv4, 48 for IPv6.
func HeaderLen(a netip.Addr) int {
	if a.Is4() {
		return IPv4HeaderLen + L4HeaderLen
	}
	return IPv6HeaderLen + L4HeaderLen
}

// PutUDP makes pkt a UDP packet from src to dst whose payload is
// pkt[HeaderLen(src.Addr()):]: it writes the IP and UDP headers in front,
// checksums included. src and dst must be of one family (IPv4-mapped
// addresses count as IPv4).
func PutUDP(pkt []byte, src, dst netip.AddrPort) error {
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	l4, err := PutIP(pkt, s, d, ProtoUDP)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint16(l4[0:], src.Port())
	binary.BigEndian.PutUint16(l4[2:], dst.Port())
	binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	binary.BigEndian.PutUint16(l4[6:], 0)
	sum := ^checksum.Checksum(l4, PseudoHeaderSum(s, d, ProtoUDP, len(l4)))
	if sum == 0 {
		sum = 0xffff // UDP: 0 means "no checksum"
	}
	binary.BigEndian.PutUint16(l4[6:], sum)
	return nil
}

// PutEcho makes pkt an ICMP (IPv4) or ICMPv6 (IPv6) echo message of type
// typ from src to dst whose data is pkt[HeaderLen(src):]: it writes the IP
// and ICMP headers in front, checksums included.
func PutEcho(pkt []byte, src, dst netip.Addr, typ uint8, id, seq uint16) error {
	s, d := src.Unmap(), dst.Unmap()
	proto := uint8(ProtoICMP)
	if s.Is6() {
		proto = ProtoICMPv6
	}
	l4, err := PutIP(pkt, s, d, proto)
	if err != nil {
		return err
	}
	l4[0], l4[1] = typ, 0
	binary.BigEndian.PutUint16(l4[2:], 0)
	binary.BigEndian.PutUint16(l4[4:], id)
	binary.BigEndian.PutUint16(l4[6:], seq)
	var initial uint16
	if proto == ProtoICMPv6 {
		initial = PseudoHeaderSum(s, d, proto, len(l4))
	}
	binary.BigEndian.PutUint16(l4[2:], ^checksum.Checksum(l4, initial))
	return nil
}

// PutIP writes the IP header of a packet of len(pkt) bytes and returns
// the transport part.
func PutIP(pkt []byte, src, dst netip.Addr, proto uint8) ([]byte, error) {
	switch {
	case !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4():
		return nil, fmt.Errorf("dgram: addresses %v and %v: want two of one family", src, dst)
	case len(pkt) < HeaderLen(src):
		return nil, fmt.Errorf("dgram: %d bytes cannot hold the %d bytes of headers", len(pkt), HeaderLen(src))
	}
	if src.Is4() {
		if len(pkt) > 0xffff {
			return nil, fmt.Errorf("dgram: an IPv4 packet of %d bytes is too long", len(pkt))
		}
		h := pkt[:IPv4HeaderLen]
		h[0], h[1] = 0x45, 0
		binary.BigEndian.PutUint16(h[2:], uint16(len(pkt)))
		binary.BigEndian.PutUint16(h[4:], 0)      // identification: unused with DF
		binary.BigEndian.PutUint16(h[6:], 0x4000) // don't fragment
		h[8], h[9] = defaultHopLimit, proto
		binary.BigEndian.PutUint16(h[10:], 0)
		s4, d4 := src.As4(), dst.As4()
		copy(h[12:], s4[:])
		copy(h[16:], d4[:])
		binary.BigEndian.PutUint16(h[10:], ^checksum.Checksum(h, 0))
		return pkt[IPv4HeaderLen:], nil
	}
	if len(pkt)-IPv6HeaderLen > 0xffff {
		return nil, fmt.Errorf("dgram: an IPv6 payload of %d bytes is too long", len(pkt)-IPv6HeaderLen)
	}
	h := pkt[:IPv6HeaderLen]
	binary.BigEndian.PutUint32(h[0:], 6<<28)
	binary.BigEndian.PutUint16(h[4:], uint16(len(pkt)-IPv6HeaderLen))
	h[6], h[7] = proto, defaultHopLimit
	s16, d16 := src.As16(), dst.As16()
	copy(h[8:], s16[:])
	copy(h[24:], d16[:])
	return pkt[IPv6HeaderLen:], nil
}

// PseudoHeaderSum is the checksum of the transport pseudo-header.
func PseudoHeaderSum(src, dst netip.Addr, proto uint8, length int) uint16 {
	var b [40]byte
	if src.Is4() {
		s, d := src.As4(), dst.As4()
		copy(b[0:], s[:])
		copy(b[4:], d[:])
		b[9] = proto
		binary.BigEndian.PutUint16(b[10:], uint16(length))
		return checksum.Checksum(b[:12], 0)
	}
	s, d := src.As16(), dst.As16()
	copy(b[0:], s[:])
	copy(b[16:], d[:])
	binary.BigEndian.PutUint32(b[32:], uint32(length))
	b[39] = proto
	return checksum.Checksum(b[:40], 0)
}

// The "packet too big" answers (RFC 792 and 1191; RFC 4443).
const (
	ICMPDestUnreachable = 3 // ICMPv4 destination unreachable,
	ICMPFragNeeded      = 4 // ... code: fragmentation needed and DF set
	ICMPv6PacketTooBig  = 2

	// MaxErrorV4 bounds an ICMPv4 error: it quotes as much of the packet
	// as fits in 576 bytes (RFC 1812 4.3.2.3); MaxErrorV6 an ICMPv6 error,
	// in the minimum IPv6 MTU (RFC 4443 2.4 (c)).
	MaxErrorV4 = 576
	MaxErrorV6 = 1280
	// minMTUv4 is the smallest MTU an IPv4 link may have (RFC 791).
	minMTUv4 = 68
)

// AppendTooBig appends to b the ICMP error a router sends back for orig,
// the IP packet Parse read as p, when orig is longer than the next link's
// mtu: for IPv4, fragmentation needed (type 3 code 4, RFC 1191), which is
// only right when orig has DF set; for IPv6, packet too big (type 2). The
// error goes from p.Dst to p.Src (the edge has no address of its own on
// the client's path), quotes as much of orig as the ICMP rules allow, and
// has its checksums. It allocates only when b lacks the room (at most
// 1,280 bytes).
func AppendTooBig(b, orig []byte, p *Packet, mtu int) ([]byte, error) {
	src, dst := p.Dst, p.Src
	proto, hl, limit := uint8(ProtoICMP), IPv4HeaderLen, MaxErrorV4
	if src.Is6() {
		proto, hl, limit = ProtoICMPv6, IPv6HeaderLen, MaxErrorV6
	}
	switch {
	case p.Len <= 0 || p.Len > len(orig):
		return b, fmt.Errorf("dgram: a packet of %d bytes to quote from %d", p.Len, len(orig))
	case proto == ProtoICMP && (mtu < minMTUv4 || mtu > 0xffff):
		return b, fmt.Errorf("dgram: next-hop MTU %d is not an IPv4 link's", mtu)
	case mtu <= 0:
		return b, fmt.Errorf("dgram: MTU %d", mtu)
	}
	quote := orig[:min(p.Len, limit-hl-L4HeaderLen)]
	n := hl + L4HeaderLen + len(quote)
	start := len(b)
	b = slices.Grow(b, n)[:start+n]
	pkt := b[start:]
	copy(pkt[hl+L4HeaderLen:], quote)
	l4, err := PutIP(pkt, src, dst, proto)
	if err != nil {
		return b[:start], err
	}
	clear(l4[:L4HeaderLen])
	var initial uint16
	if proto == ProtoICMP {
		l4[0], l4[1] = ICMPDestUnreachable, ICMPFragNeeded
		binary.BigEndian.PutUint16(l4[6:], uint16(mtu))
	} else {
		l4[0] = ICMPv6PacketTooBig
		binary.BigEndian.PutUint32(l4[4:], uint32(mtu))
		initial = PseudoHeaderSum(src, dst, proto, len(l4))
	}
	binary.BigEndian.PutUint16(l4[2:], ^checksum.Checksum(l4, initial))
	return b, nil
}
