package dgram

import (
	"net/netip"

	"github.com/wanopt/wanopt/dgram/packet"
	"github.com/wanopt/wanopt/dgram/passthru"
)

// The datagram format and the passed flows' vocabulary, named here for
// the edge and the command (their homes are packages packet and
// passthru).

// Datagram kinds: the first byte of every datagram (see the package doc).
const (
	KindUp   = packet.KindUp
	KindDown = packet.KindDown
)

// IP protocol numbers and ICMP types this package handles.
const (
	ProtoICMP   = packet.ProtoICMP
	ProtoTCP    = packet.ProtoTCP
	ProtoUDP    = packet.ProtoUDP
	ProtoICMPv6 = packet.ProtoICMPv6

	ICMPEchoReply     = packet.ICMPEchoReply
	ICMPEchoRequest   = packet.ICMPEchoRequest
	ICMPv6EchoRequest = packet.ICMPv6EchoRequest
	ICMPv6EchoReply   = packet.ICMPv6EchoReply

	ICMPDestUnreachable = packet.ICMPDestUnreachable
	ICMPFragNeeded      = packet.ICMPFragNeeded
	ICMPv6PacketTooBig  = packet.ICMPv6PacketTooBig
)

// Parse errors (packet.ErrMalformed, packet.ErrUnsupported).
var (
	ErrMalformed   = packet.ErrMalformed
	ErrUnsupported = packet.ErrUnsupported
)

// Packet is a parsed IPv4 or IPv6 packet carrying UDP or an ICMP echo.
type Packet = packet.Packet

// Parse reads an IPv4 or IPv6 packet carrying UDP or an ICMP echo
// (packet.Parse).
func Parse(b []byte) (Packet, error) { return packet.Parse(b) }

// Protocol returns the transport protocol number of an IP packet
// (packet.Protocol).
func Protocol(b []byte) (uint8, bool) { return packet.Protocol(b) }

// HeaderLen is the length of the IP and UDP (or ICMP echo) headers of a
// packet between addresses of a's family (packet.HeaderLen).
func HeaderLen(a netip.Addr) int { return packet.HeaderLen(a) }

// PutUDP writes the IP and UDP headers in front of pkt's payload
// (packet.PutUDP).
func PutUDP(pkt []byte, src, dst netip.AddrPort) error { return packet.PutUDP(pkt, src, dst) }

// PutEcho writes the IP and ICMP echo headers in front of pkt's data
// (packet.PutEcho).
func PutEcho(pkt []byte, src, dst netip.Addr, typ uint8, id, seq uint16) error {
	return packet.PutEcho(pkt, src, dst, typ, id, seq)
}

// AppendTooBig appends the ICMP error a router sends back for orig when
// it is longer than the next link's mtu (packet.AppendTooBig).
func AppendTooBig(b, orig []byte, p *Packet, mtu int) ([]byte, error) {
	return packet.AppendTooBig(b, orig, p, mtu)
}

// Sender is a tunnel that carries datagrams (a *driver.Tunnel).
type Sender = passthru.Sender

// PassedFlow is one passed TCP flow of a table (Near.PassedFlows).
type PassedFlow = passthru.PassedFlow

// Rules decide what a near edge does with each flow (ingress.Rules;
// passthru.Rules).
type Rules = passthru.Rules

// Defaults of the passed TCP flows' tables (see package passthru).
const (
	DefaultPassIdleTimeout = passthru.DefaultPassIdleTimeout
	PassClosingTimeout     = passthru.PassClosingTimeout
	DefaultMaxPassFlows    = passthru.DefaultMaxPassFlows
)
