package stack

import (
	"errors"
	"fmt"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/nested"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// DivertFunc is offered each IPv4 and IPv6 packet from the TUN that is not
// TCP (Config.Divert), or that is (Config.DivertTCP), before the netstack
// sees it. pkt is the whole IP packet, valid only during the call; the
// function copies what it keeps and must not block (it runs on the TUN's
// reader goroutine). It returns true if it took the packet, which the
// netstack then never sees, and false to leave it to the netstack.
type DivertFunc func(pkt []byte) bool

// divertEndpoint wraps the NIC's link endpoint: inbound packets that are
// not TCP go to a DivertFunc first (Config.Divert), TCP packets to
// another (Config.DivertTCP), which may take them; those they leave go on
// to the netstack as before. Outbound packets pass through untouched.
type divertEndpoint struct {
	nested.Endpoint
	divert, divertTCP DivertFunc // either may be nil
	diverted          atomic.Uint64
}

var _ gstack.NetworkDispatcher = (*divertEndpoint)(nil)

func newDivertEndpoint(lower gstack.LinkEndpoint, f, tcp DivertFunc) *divertEndpoint {
	e := &divertEndpoint{divert: f, divertTCP: tcp}
	e.Endpoint.Init(lower, e)
	return e
}

// DeliverNetworkPacket offers a packet to the DivertFunc for its kind,
// and passes up what it does not take. Telling TCP apart reads one
// header byte in place; only packets offered are made contiguous (no copy
// when they already are, as every packet from a TUN is).
func (e *divertEndpoint) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *gstack.PacketBuffer) {
	d := pkt.Data()
	n := d.Size()
	f := e.divert
	if isTCP(d, n) {
		f = e.divertTCP
	}
	if f != nil {
		if b, ok := d.PullUp(n); ok && f(b) {
			e.diverted.Add(1)
			return
		}
	}
	e.Endpoint.DeliverNetworkPacket(proto, pkt)
}

// isTCP reports whether the n-byte IP packet d is TCP (its IPv6 next
// header, without extension headers). Packets too short to say are not.
func isTCP(d gstack.PacketData, n int) bool {
	h, ok := d.PullUp(min(n, header.IPv6MinimumSize))
	if !ok || len(h) == 0 {
		return false
	}
	switch header.IPVersion(h) {
	case header.IPv4Version:
		return len(h) >= header.IPv4MinimumSize && h[9] == uint8(header.TCPProtocolNumber)
	case header.IPv6Version:
		return len(h) >= header.IPv6MinimumSize && h[6] == uint8(header.TCPProtocolNumber)
	}
	return false
}

// errNotIP: WritePacket was given bytes that are not an IP packet.
var errNotIP = errors.New("stack: not an IPv4 or IPv6 packet")

// WritePacket writes one IP packet (copied) out of the TUN toward the
// clients, through the NIC's queue like the netstack's own packets: a
// reply to a packet the Config.Divert function took. Its checksums must
// be complete. It fails when the queue is full (the packet is dropped) or
// the stack is closed.
func (st *Stack) WritePacket(pkt []byte) error {
	var proto tcpip.NetworkProtocolNumber
	switch header.IPVersion(pkt) {
	case header.IPv4Version:
		proto = header.IPv4ProtocolNumber
	case header.IPv6Version:
		proto = header.IPv6ProtocolNumber
	default:
		return errNotIP
	}
	if terr := st.s.WriteRawPacket(nicID, proto, buffer.MakeWithData(pkt)); terr != nil {
		return fmt.Errorf("stack: write a packet to the TUN: %s", terr)
	}
	return nil
}
