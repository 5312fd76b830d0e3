package passthru

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/wanopt/wanopt/dgram/packet"
)

// ICMP errors about a flow (transparent egress): a host or router in the
// far LAN answers a client's packet with an ICMP error to the client's
// address, which the far kernel routes back into the TUN. The far edge
// sends the errors about flows it saw to the near edge, which writes them
// to its TUN, so the client learns (ECONNREFUSED, path MTU, traceroute).

// ICMP and ICMPv6 error types carried back (RFC 792, RFC 4443).
const (
	icmpTimeExceeded   = 11
	icmpParamProblem   = 12
	icmpv6DestUnreach  = 1
	icmpv6TimeExceeded = 3
	icmpv6ParamProblem = 4
)

// isICMPErrorType reports whether typ is an ICMP (v6: ICMPv6) error this
// package carries.
func isICMPErrorType(v6 bool, typ uint8) bool {
	if v6 {
		return typ == icmpv6DestUnreach || typ == packet.ICMPv6PacketTooBig || typ == icmpv6TimeExceeded || typ == icmpv6ParamProblem
	}
	return typ == packet.ICMPDestUnreachable || typ == icmpTimeExceeded || typ == icmpParamProblem
}

// icmpError is an ICMP or ICMPv6 error message and what it says of the
// packet it quotes.
type icmpError struct {
	src, dst  netip.Addr // the error's own
	typ, code uint8
	len       int // the IP packet's length
	// proto is the quoted packet's protocol: packet.ProtoUDP, packet.ProtoTCP, or the
	// ICMP of the family for an echo request. from and to are its source
	// and destination: with the ports for UDP and TCP, for an echo the
	// identifier as from's port and 0 as to's (a flow's key).
	proto    uint8
	from, to netip.AddrPort
}

// parseICMPError reads an IPv4 packet carrying an ICMP destination
// unreachable, time exceeded or parameter problem, or an IPv6 packet
// carrying an ICMPv6 destination unreachable, packet too big, time
// exceeded or parameter problem, whose quote holds the IP header and the
// first 8 bytes of a UDP datagram, a TCP segment or an echo request sent
// by the error's destination (errors go to the sender of the packet they
// quote). The quote may be cut short after those bytes, as ICMP allows.
// Errors wrap packet.ErrMalformed or packet.ErrUnsupported; it never panics, whatever b
// holds. Checksums are not verified (the client's kernel does).
func parseICMPError(b []byte) (icmpError, error) {
	var e icmpError
	h, err := packet.ParseHeader(b)
	if err != nil {
		return e, err
	}
	icmpProto := uint8(packet.ProtoICMP)
	if h.V6 {
		icmpProto = packet.ProtoICMPv6
	}
	if h.Proto != icmpProto {
		return e, h.UnsupportedProto()
	}
	e.src, e.dst, e.len = h.Src, h.Dst, h.Len
	l4 := b[h.HdrLen:h.Len]
	if len(l4) < packet.L4HeaderLen {
		return e, fmt.Errorf("%w: %d bytes of ICMP header", packet.ErrMalformed, len(l4))
	}
	e.typ, e.code = l4[0], l4[1]
	if !isICMPErrorType(h.V6, e.typ) {
		return e, fmt.Errorf("%w: ICMP type %d is not an error carried", packet.ErrUnsupported, e.typ)
	}
	q := l4[packet.L4HeaderLen:]
	var (
		qhl        int
		qproto     uint8
		qsrc, qdst netip.Addr
	)
	if !h.V6 {
		if len(q) < packet.IPv4HeaderLen || q[0]>>4 != 4 {
			return e, fmt.Errorf("%w: ICMP error quoting %d bytes, not an IPv4 header", packet.ErrMalformed, len(q))
		}
		qhl = int(q[0]&0x0f) * 4
		if qhl < packet.IPv4HeaderLen {
			return e, fmt.Errorf("%w: quoted IPv4 header length %d", packet.ErrMalformed, qhl)
		}
		if binary.BigEndian.Uint16(q[6:])&0x1fff != 0 {
			return e, fmt.Errorf("%w: ICMP error quoting a fragment after the first", packet.ErrUnsupported)
		}
		qproto = q[9]
		qsrc, qdst = netip.AddrFrom4([4]byte(q[12:16])), netip.AddrFrom4([4]byte(q[16:20]))
	} else {
		if len(q) < packet.IPv6HeaderLen || q[0]>>4 != 6 {
			return e, fmt.Errorf("%w: ICMPv6 error quoting %d bytes, not an IPv6 header", packet.ErrMalformed, len(q))
		}
		qhl, qproto = packet.IPv6HeaderLen, q[6]
		qsrc, qdst = netip.AddrFrom16([16]byte(q[8:24])), netip.AddrFrom16([16]byte(q[24:40]))
	}
	if len(q) < qhl+packet.L4HeaderLen {
		return e, fmt.Errorf("%w: ICMP error quoting %d bytes, fewer than the quoted packet's headers", packet.ErrMalformed, len(q))
	}
	if qsrc != h.Dst {
		return e, fmt.Errorf("%w: ICMP error to %v about a packet from %v", packet.ErrMalformed, h.Dst, qsrc)
	}
	ql4 := q[qhl:]
	e.proto = qproto
	switch qproto {
	case packet.ProtoUDP, packet.ProtoTCP:
		e.from = netip.AddrPortFrom(qsrc, binary.BigEndian.Uint16(ql4[0:]))
		e.to = netip.AddrPortFrom(qdst, binary.BigEndian.Uint16(ql4[2:]))
	case icmpProto:
		if t := ql4[0]; (!h.V6 && t != packet.ICMPEchoRequest) || (h.V6 && t != packet.ICMPv6EchoRequest) {
			return e, fmt.Errorf("%w: ICMP error about ICMP type %d", packet.ErrUnsupported, t)
		}
		e.from = netip.AddrPortFrom(qsrc, binary.BigEndian.Uint16(ql4[4:]))
		e.to = netip.AddrPortFrom(qdst, 0)
	default:
		return e, fmt.Errorf("%w: ICMP error about protocol %d", packet.ErrUnsupported, qproto)
	}
	return e, nil
}

// maybeICMPError reports, reading two bytes, whether the IP packet b
// (whose protocol is proto) may be an ICMP error parseICMPError reads.
func maybeICMPError(b []byte, proto uint8) bool {
	switch {
	case proto == packet.ProtoICMP && b[0]>>4 == 4:
		ihl := int(b[0]&0x0f) * 4
		return len(b) > ihl && isICMPErrorType(false, b[ihl])
	case proto == packet.ProtoICMPv6 && b[0]>>4 == 6:
		return len(b) > packet.IPv6HeaderLen && isICMPErrorType(true, b[packet.IPv6HeaderLen])
	}
	return false
}
