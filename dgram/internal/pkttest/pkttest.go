// Package pkttest builds and checks the IP packets the datagram
// packages' tests feed their parsers and paths, independently of the
// code under test where it can (gVisor's header package, a plain ones'
// complement sum).
package pkttest

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/wanopt/wanopt/dgram/packet"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// ICMP and ICMPv6 error types the tests send (RFC 792, RFC 4443).
const (
	ICMPTimeExceeded   = 11
	ICMPv6DestUnreach  = 1
	ICMPv6TimeExceeded = 3
)

// SynOpts are a Linux client's SYN options: MSS 1460, SACK permitted,
// timestamps, NOP, window scale 7 (the MSS at an even offset).
var SynOpts = []byte{2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7}

// OnesSum is an independent ones'-complement sum (RFC 1071) for checking
// the checksums the builders write: a correct header or segment, with its
// pseudo-header, sums to 0xffff.
func OnesSum(parts ...[]byte) uint16 {
	var s uint32
	for _, b := range parts {
		for i := 0; i+1 < len(b); i += 2 {
			s += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			s += uint32(b[len(b)-1]) << 8
		}
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// Pseudo is the transport pseudo-header of n bytes of proto.
func Pseudo(src, dst netip.Addr, proto uint8, n int) []byte {
	if src.Is4() {
		s, d := src.As4(), dst.As4()
		return append(append(append([]byte{}, s[:]...), d[:]...), 0, proto, byte(n>>8), byte(n))
	}
	s, d := src.As16(), dst.As16()
	b := append(append([]byte{}, s[:]...), d[:]...)
	return append(b, byte(n>>24), byte(n>>16), byte(n>>8), byte(n), 0, 0, 0, proto)
}

// FixIPv4Checksum rewrites an IPv4 header's checksum after a change.
func FixIPv4Checksum(b []byte) {
	binary.BigEndian.PutUint16(b[10:], 0)
	binary.BigEndian.PutUint16(b[10:], ^OnesSum(b[:20]))
}

// UDP is a UDP packet from src to dst carrying payload.
func UDP(t testing.TB, src, dst string, payload []byte) []byte {
	t.Helper()
	s := netip.MustParseAddrPort(src)
	pkt := append(make([]byte, packet.HeaderLen(s.Addr())), payload...)
	if err := packet.PutUDP(pkt, s, netip.MustParseAddrPort(dst)); err != nil {
		t.Fatal(err)
	}
	return pkt
}

// Echo is an ICMP (ICMPv6 between IPv6 addresses) echo message of type
// typ with identifier id and sequence number 7.
func Echo(t testing.TB, src, dst string, typ uint8, id uint16, data string) []byte {
	t.Helper()
	s := netip.MustParseAddr(src)
	pkt := append(make([]byte, packet.HeaderLen(s)), data...)
	if err := packet.PutEcho(pkt, s, netip.MustParseAddr(dst), typ, id, 7); err != nil {
		t.Fatal(err)
	}
	return pkt
}

// ICMPError is the ICMP (ICMPv6) error of type typ and code that from
// sends to orig's source about orig, quoting as much of it as a router
// does (576 bytes in all for IPv4, 1280 for IPv6), checksums included.
func ICMPError(t testing.TB, from string, orig []byte, typ, code uint8) []byte {
	t.Helper()
	src := netip.MustParseAddr(from)
	var dst netip.Addr
	proto, hl, limit := uint8(packet.ProtoICMP), packet.IPv4HeaderLen, packet.MaxErrorV4
	if src.Is4() {
		dst = netip.AddrFrom4([4]byte(orig[12:16]))
	} else {
		dst = netip.AddrFrom16([16]byte(orig[8:24]))
		proto, hl, limit = packet.ProtoICMPv6, packet.IPv6HeaderLen, packet.MaxErrorV6
	}
	quote := orig[:min(len(orig), limit-hl-packet.L4HeaderLen)]
	pkt := make([]byte, hl+packet.L4HeaderLen+len(quote))
	copy(pkt[hl+packet.L4HeaderLen:], quote)
	l4, err := packet.PutIP(pkt, src, dst, proto)
	if err != nil {
		t.Fatal(err)
	}
	l4[0], l4[1] = typ, code
	var initial uint16
	if proto == packet.ProtoICMPv6 {
		initial = packet.PseudoHeaderSum(src, dst, proto, len(l4))
	}
	binary.BigEndian.PutUint16(l4[2:], ^checksum.Checksum(l4, initial))
	return pkt
}

// TCP builds a TCP packet from src to dst with flags and options
// (padded to 4 bytes) and payload, checksums included.
func TCP(t testing.TB, src, dst string, flags header.TCPFlags, opts []byte, payload string) []byte {
	t.Helper()
	s, d := netip.MustParseAddrPort(src), netip.MustParseAddrPort(dst)
	opts = append([]byte(nil), opts...)
	for len(opts)%4 != 0 {
		opts = append(opts, 0)
	}
	ipLen := header.IPv4MinimumSize
	if s.Addr().Is6() {
		ipLen = header.IPv6MinimumSize
	}
	tl := header.TCPMinimumSize + len(opts) + len(payload)
	b := make([]byte, ipLen+tl)
	sa, da := tcpip.AddrFromSlice(s.Addr().AsSlice()), tcpip.AddrFromSlice(d.Addr().AsSlice())
	if s.Addr().Is4() {
		ip := header.IPv4(b)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber), SrcAddr: sa, DstAddr: da, Flags: header.IPv4FlagDontFragment})
		ip.SetChecksum(^ip.CalculateChecksum())
	} else {
		header.IPv6(b).Encode(&header.IPv6Fields{PayloadLength: uint16(tl), TransportProtocol: header.TCPProtocolNumber, HopLimit: 64, SrcAddr: sa, DstAddr: da})
	}
	th := header.TCP(b[ipLen:])
	th.Encode(&header.TCPFields{SrcPort: s.Port(), DstPort: d.Port(), SeqNum: 1000, DataOffset: uint8(header.TCPMinimumSize + len(opts)), Flags: flags, WindowSize: 65535})
	copy(th[header.TCPMinimumSize:], opts)
	copy(th[header.TCPMinimumSize+len(opts):], payload)
	th.SetChecksum(0)
	th.SetChecksum(^checksum.Checksum(th, header.PseudoHeaderChecksum(header.TCPProtocolNumber, sa, da, uint16(tl))))
	return b
}

// TCPSegment returns an IPv4 or IPv6 TCP packet's segment and its
// addresses; false if b is not one (any bytes may be given).
func TCPSegment(b []byte) (seg []byte, src, dst netip.Addr, ok bool) {
	h, err := packet.ParseHeader(b)
	if err != nil || h.Proto != packet.ProtoTCP {
		return nil, src, dst, false
	}
	seg = b[h.HdrLen:h.Len]
	if len(seg) < header.TCPMinimumSize {
		return nil, src, dst, false
	}
	if off := int(seg[12]>>4) * 4; off < header.TCPMinimumSize || off > len(seg) {
		return nil, src, dst, false
	}
	return seg, h.Src, h.Dst, true
}

// TCPChecksumOK verifies an IPv4 or IPv6 TCP packet's checksum.
func TCPChecksumOK(b []byte) bool {
	seg, src, dst, ok := TCPSegment(b)
	if !ok {
		return false
	}
	sa, da := tcpip.AddrFromSlice(src.AsSlice()), tcpip.AddrFromSlice(dst.AsSlice())
	return checksum.Checksum(seg, header.PseudoHeaderChecksum(header.TCPProtocolNumber, sa, da, uint16(len(seg)))) == 0xffff
}

// MSSOf reads a segment's MSS option (536, TCP's default, if none; 0 if
// b is not TCP).
func MSSOf(b []byte) uint16 {
	seg, _, _, ok := TCPSegment(b)
	if !ok {
		return 0
	}
	return header.ParseSynOptions(header.TCP(seg).Options(), false).MSS
}
