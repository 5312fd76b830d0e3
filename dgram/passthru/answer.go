package passthru

import (
	"net/netip"

	"github.com/wanopt/wanopt/dgram/packet"
)

// The answers of transparent egress: the kernel routes the servers'
// answers to the clients' addresses into the far edge's TUN, whose stack
// offers each to Divert before it sees it.

// Divert is the far edge's stack's Config.Divert with transparent egress
// (WritePacket): it takes the packets from the TUN that answer a
// transparent flow — UDP, echo replies, ICMP errors about a flow's
// packets, a passed TCP flow's too — and sends each, whole, to the near
// edge. An answer of those kinds to no known flow is dropped
// (DropUnmatched) rather than left to the stack, which would answer for
// the client; the rest is left to the stack. It does not block; without
// WritePacket it takes nothing.
func (f *Far) Divert(pkt []byte) bool {
	if f.cfg.WritePacket == nil {
		return false
	}
	return DivertAmong(pkt, []*Far{f}, nil)
}

// DivertAmong is Divert for a hub's far sides, one a branch (all with
// WritePacket): the packet is read once and goes to the far side whose
// table holds the flow it answers; far(fs[i]) is a side's Far (nil: fs
// are Fars). An answer of no flow in any is counted (DropUnmatched) by
// the first far side, the hub's first branch.
func DivertAmong[F any](pkt []byte, fs []F, far func(F) *Far) bool {
	if len(fs) == 0 {
		return false
	}
	a, ok := readAnswer(pkt)
	if !ok {
		return false
	}
	side := func(x F) *Far {
		if far == nil {
			return any(x).(*Far)
		}
		return far(x)
	}
	for _, x := range fs {
		if side(x).take(pkt, &a) {
			return true
		}
	}
	if a.aboutTCP {
		return false // about the stack's own connection
	}
	side(fs[0]).cfg.Count.Dropped(DropUnmatched)
	return true
}

// answer is what readAnswer read of a packet that may answer a flow.
type answer struct {
	// aboutTCP: an ICMP error about a TCP segment (tk); else the
	// datagram flow dk.
	aboutTCP bool
	tk       tcpKey
	dk       dgKey
	n        int   // the packet's length
	proto    uint8 // the protocol it is counted as
}

// readAnswer reads pkt, from the TUN, as an answer to a flow the far
// side may have sent on: UDP, an echo reply, or an ICMP error about UDP,
// an echo request or TCP; false for anything else (the stack's).
func readAnswer(pkt []byte) (answer, bool) {
	var a answer
	proto, ok := packet.Protocol(pkt)
	if !ok {
		return a, false
	}
	switch {
	case maybeICMPError(pkt, proto):
		ie, err := parseICMPError(pkt)
		if err != nil {
			return a, false // the stack's to use or drop, as before
		}
		a.n, a.proto = ie.len, packet.ProtoICMP // counted as ICMP, whatever it is about
		if ie.proto == protoTCP {
			a.aboutTCP, a.tk = true, tcpKey{ie.from, ie.to}
		} else {
			a.dk = dgKey{ie.proto, ie.from, ie.to}
		}
		return a, true
	case proto == packet.ProtoUDP || proto == packet.ProtoICMP || proto == packet.ProtoICMPv6:
		p, err := packet.Parse(pkt)
		if err != nil {
			return a, false // other ICMP, fragments, malformed: the stack's
		}
		switch {
		case p.IsUDP():
			a.dk = dgKey{packet.ProtoUDP, p.DstAddrPort(), p.SrcAddrPort()}
		case p.IsEchoReply():
			a.dk = dgKey{p.Proto, netip.AddrPortFrom(p.Dst, p.ID), netip.AddrPortFrom(p.Src, 0)}
		default:
			return a, false // an echo request to a client's address: the stack's
		}
		a.n, a.proto = p.Len, p.Proto
		return a, true
	}
	return a, false
}

// take sends pkt, read as a, to the near edge if it answers a flow in
// f's tables, and reports whether it did (a drop on the way counted).
func (f *Far) take(pkt []byte, a *answer) bool {
	if a.aboutTCP {
		e := f.pass.get(a.tk)
		if e == nil {
			return false
		}
		f.pass.seen(e, 0, 0, false)
	} else {
		e := f.tr.get(a.dk)
		if e == nil {
			return false
		}
		f.tr.seen(e, 0, a.n, false)
	}
	s := f.cfg.Sender()
	if s == nil {
		f.cfg.Count.Dropped(DropNoTunnel)
		return true
	}
	if 1+a.n > s.MaxDatagramBytes() {
		f.cfg.Count.Dropped(DropTooBig)
		return true
	}
	bp := f.bufs.Get().(*[]byte)
	b := append(append((*bp)[:0], packet.KindDown), pkt[:a.n]...)
	err := s.SendDatagram(b)
	*bp = b
	f.bufs.Put(bp)
	if err != nil {
		f.cfg.Count.SendError(err)
		return true
	}
	f.cfg.Count.Down(a.proto, a.n)
	return true
}
