package passthru

import (
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanopt/wanopt/dgram/packet"
)

// FarConfig configures a Far.
type FarConfig struct {
	// Check returns why the egress policy refuses dst, or "" if it allows
	// it; ICMP is checked with port 0. Required.
	Check func(dst netip.AddrPort) string
	// WritePacket writes a client's packet out of this edge's TUN
	// (transparent egress); nil without a TUN, where passed TCP is
	// dropped (DropUnsupported, warned once) and Divert takes nothing.
	WritePacket func(pkt []byte) error
	// Sender returns the tunnel answers go through, nil while none is up.
	// Required.
	Sender func() packet.Sender
	// Count counts what crosses and what is dropped. Required.
	Count Counter
	// MaxFlows and IdleTimeout bound the table of transparent UDP and
	// echo flows (required); the passed TCP flows' table has its own
	// (DefaultMaxPassFlows, DefaultPassIdleTimeout).
	MaxFlows    int
	IdleTimeout time.Duration
	// Logger receives events; nil discards them.
	Logger *slog.Logger
	// Now is the tables' clock; nil: time.Now.
	Now func() time.Time
}

// Far is a far edge's passed TCP and transparent egress: it writes the
// clients' passed TCP (and, with a TUN, their UDP and echo requests) out
// of the TUN, learning each flow, and sends the answers the kernel routes
// back into the TUN to the near edge. Its methods are safe for concurrent
// use.
type Far struct {
	cfg       FarConfig
	log       *slog.Logger
	warnedTCP atomic.Bool
	pass      *tcpTable         // passed TCP flows, learnt from their packets up
	tr        *flowTable[dgKey] // transparent UDP and echo flows
	bufs      sync.Pool         // *[]byte: DivertTCP's and Divert's datagrams
}

// dgKey names a transparent datagram flow: a UDP flow by its endpoints,
// an echo flow by its client's address with the echo identifier as the
// port, and its server's address with port 0. proto is the packet's
// (ProtoUDP, ProtoICMP or ProtoICMPv6).
type dgKey struct {
	proto          uint8
	client, server netip.AddrPort
}

func (k dgKey) endpoints() (client, server netip.AddrPort) { return k.client, k.server }

// NewFar returns a Far.
func NewFar(cfg FarConfig) *Far {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	f := &Far{cfg: cfg, log: cfg.Logger}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	f.pass = newTCPTable(cfg.Now, 0, 0)
	f.tr = newFlowTable[dgKey](cfg.Now, cfg.IdleTimeout, cfg.MaxFlows)
	f.bufs.New = func() any { b := make([]byte, 0, bufBytes); return &b }
	return f
}

// Sweep forgets the flows idle past their timeouts.
func (f *Far) Sweep() {
	f.pass.sweep()
	f.tr.sweep()
}

// Flows is the size of the transparent datagram flows' table, Expired
// how many of its flows were forgotten idle, and TCPFlows the size of
// the passed TCP flows' table.
func (f *Far) Flows() int        { return int(f.tr.n.Load()) }
func (f *Far) Expired() uint64   { return f.tr.expired.Load() }
func (f *Far) TCPFlows() int     { return int(f.pass.n.Load()) }
func (f *Far) Transparent() bool { return f.cfg.WritePacket != nil }

// PassedFlows lists the passed TCP flows this far side sends on (learnt
// from their packets), not yet forgotten, in no particular order.
func (f *Far) PassedFlows() []PassedFlow { return f.pass.snapshot() }

// HandleTCP writes a passed TCP packet out of the TUN. A flow is learnt
// from its first packet (any but a RST, so that a flow outlives a
// restart of this edge), if the policy allows its server.
func (f *Far) HandleTCP(b []byte) {
	if f.cfg.WritePacket == nil {
		f.cfg.Count.Dropped(DropUnsupported)
		if f.warnedTCP.CompareAndSwap(false, true) {
			f.log.Warn("the near edge passes TCP unterminated (--near-rule pass:tcp:...), which this edge can only send on with --egress transparent (its own TUN); dropping those packets, further ones only counted")
		}
		return
	}
	p, err := parseTCP(b)
	if err != nil {
		f.cfg.Count.ParseError(err)
		return
	}
	k := tcpKey{p.src, p.dst}
	e := f.pass.get(k)
	if e == nil || (p.isSYN() && e.closing.Load()) {
		if p.flags&tcpRST != 0 {
			f.cfg.Count.Dropped(DropNotAllowed)
			return
		}
		if why := f.cfg.Check(netip.AddrPortFrom(p.dst.Addr().Unmap(), p.dst.Port())); why != "" {
			f.cfg.Count.Dropped(DropNotAllowed)
			f.log.Debug("passed TCP destination refused", "src", p.src, "dst", p.dst, "why", why)
			return
		}
		if e = f.pass.add(k); e == nil {
			f.cfg.Count.Dropped(DropFlowLimit)
			return
		}
	}
	f.pass.seen(e, p.flags, p.len, true)
	if err := f.cfg.WritePacket(b[:p.len]); err != nil {
		f.cfg.Count.Dropped(DropSocketError)
		return
	}
	f.cfg.Count.Up(protoTCP, p.len)
}

// DivertTCP is the far edge's stack's Config.DivertTCP: it takes the TCP
// packets from servers that answer a passed flow (learnt by the packets
// up), sending each whole to the near edge, a SYN-ACK's MSS clamped to
// what a datagram holds; it leaves the rest to the stack. It does not
// block, and returns at once while no flow is passed.
func (f *Far) DivertTCP(pkt []byte) bool {
	if f.pass.n.Load() == 0 {
		return false
	}
	p, err := parseTCP(pkt)
	if err != nil {
		return false
	}
	e := f.pass.get(tcpKey{p.dst, p.src})
	if e == nil {
		return false
	}
	f.pass.seen(e, p.flags, p.len, false)
	s := f.cfg.Sender()
	if s == nil {
		f.cfg.Count.Dropped(DropNoTunnel)
		return true
	}
	limit := s.MaxDatagramBytes()
	if 1+p.len > limit {
		// An aggregate of the server's segments (the TUN's offload): sent
		// as the segments that fit.
		if !sendCut(&f.bufs, f.cfg.Count, s, pkt, &p, packet.KindDown, limit) {
			f.cfg.Count.Dropped(DropTooBig)
		}
		return true
	}
	sendWhole(&f.bufs, f.cfg.Count, s, pkt, &p, packet.KindDown, p.src.Addr(), limit)
	return true
}

// HandleTransparent writes a client's UDP packet or echo request, parsed
// as p, out of the TUN as it came, source, TTL and checksums the
// client's. A flow is learnt from its first packet if the policy allows
// its server and the table has room. It needs WritePacket.
func (f *Far) HandleTransparent(b []byte, p *packet.Packet) {
	var k dgKey
	switch {
	case p.IsUDP():
		k = dgKey{packet.ProtoUDP, p.SrcAddrPort(), p.DstAddrPort()}
	case p.IsEchoRequest():
		k = dgKey{p.Proto, netip.AddrPortFrom(p.Src, p.ID), netip.AddrPortFrom(p.Dst, 0)}
	default:
		f.cfg.Count.Dropped(DropUnsupported)
		return
	}
	e := f.tr.get(k)
	if e == nil {
		dst := netip.AddrPortFrom(p.Dst.Unmap(), p.DstPort)
		if why := f.cfg.Check(dst); why != "" {
			f.cfg.Count.Dropped(DropNotAllowed)
			f.log.Debug("datagram destination refused", "src", p.SrcAddrPort(), "dst", dst, "proto", p.Proto, "why", why)
			return
		}
		if e = f.tr.add(k); e == nil {
			f.cfg.Count.Dropped(DropFlowLimit)
			return
		}
		f.cfg.Count.FlowOpened()
		f.log.Debug("transparent datagram flow opened", "client", k.client, "server", k.server, "proto", p.Proto)
	}
	f.tr.seen(e, 0, p.Len, true)
	if err := f.cfg.WritePacket(b[:p.Len]); err != nil {
		f.cfg.Count.Dropped(DropSocketError)
		return
	}
	f.cfg.Count.Up(p.Proto, p.Len)
}
