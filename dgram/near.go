package dgram

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/wanopt/wanopt/dgram/packet"
	"github.com/wanopt/wanopt/dgram/passthru"
	"github.com/wanopt/wanopt/tunnel"
)

// NearConfig configures a Near.
type NearConfig struct {
	// Route returns the tunnel that carries packets toward dst, or nil
	// when none is up. Required.
	Route func(dst netip.Addr) packet.Sender
	// Write writes one IP packet to the TUN, toward the client; pkt is
	// only valid during the call. Required.
	Write func(pkt []byte) error
	// Logger receives events; nil discards them.
	Logger *slog.Logger
	// Rules are the near edge's policy (ingress.Rules; SetRules changes
	// them); nil: TCP is optimised (left to the stack) and the rest
	// passed.
	Rules passthru.Rules
	// PassIdleTimeout and MaxPassFlows bound the table of passed TCP
	// flows (DefaultPassIdleTimeout, DefaultMaxPassFlows when 0).
	PassIdleTimeout time.Duration
	MaxPassFlows    int

	// now is the clock of the too-big answers' rate limit and of the
	// passed flows' table; nil: time.Now (tests move it).
	now func() time.Time
}

// The rate of the "packet too big" answers (Near.Divert): at most
// TooBigPerSecond a second on average, in bursts of at most TooBigBurst,
// as routers' ICMP rate limits do: a client learns from the first answer
// of each flow, and a flood of big (or forged) packets does not turn into
// as many packets toward the LAN.
const (
	TooBigPerSecond = 100
	TooBigBurst     = 10
)

// Near is a near edge's end: it sends the clients' UDP and ping packets
// that its stack diverts (Divert) through the tunnel, and writes the far
// edge's answers (Deliver) to the TUN. Its methods are safe for
// concurrent use.
type Near struct {
	cfg  NearConfig
	log  *slog.Logger
	ctr  Counters
	bufs sync.Pool // *[]byte: the datagrams being built

	pass *passthru.Near // the rules, and the passed TCP flows

	// The too-big answers' token bucket (allowTooBig).
	tbMu     sync.Mutex
	tbTokens float64
	tbLast   time.Time
}

// NewNear returns a Near.
func NewNear(cfg NearConfig) *Near {
	if cfg.now == nil {
		cfg.now = time.Now
	}
	n := &Near{cfg: cfg, log: cfg.Logger, tbTokens: TooBigBurst, tbLast: cfg.now()}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	n.bufs.New = func() any { b := make([]byte, 0, readBufBytes); return &b }
	n.pass = passthru.NewNear(passthru.NearConfig{Route: cfg.Route, Write: cfg.Write, Count: (*counting)(&n.ctr),
		TooBig: n.answerTooBig, Rules: cfg.Rules, PassIdleTimeout: cfg.PassIdleTimeout, MaxPassFlows: cfg.MaxPassFlows, Now: cfg.now})
	return n
}

// SetRules replaces the rules (nil: the defaults), for the flows that
// start from now on: passed TCP flows already in the table stay passed,
// and flows already terminated stay with the stack. rs must not change
// afterwards.
func (n *Near) SetRules(rs passthru.Rules) { n.pass.SetRules(rs) }

// Rules returns the rules in force.
func (n *Near) Rules() passthru.Rules { return n.pass.Rules() }

// PassedFlows lists the TCP flows a pass rule sent as datagrams, not yet
// forgotten (idle), in no particular order.
func (n *Near) PassedFlows() []passthru.PassedFlow { return n.pass.PassedFlows() }

// Stats returns the near side's counters.
func (n *Near) Stats() Stats {
	s := n.ctr.Stats()
	s.TCPFlows = n.pass.Flows()
	return s
}

// Divert is the stack's Config.Divert: it is called with each non-TCP
// packet from the TUN, and takes (returns true for) UDP, ICMP and ICMPv6
// echo requests, and fragments of ICMP, which the netstack would
// otherwise reassemble and answer; it leaves the rest to the netstack. A
// packet it takes is sent through the tunnel or dropped and counted; one
// too long for a datagram is answered as a router would (answerTooBig).
func (n *Near) Divert(pkt []byte) bool {
	if !divertable(pkt) {
		return false
	}
	p, err := packet.Parse(pkt)
	if err != nil {
		n.ctr.parseError(err)
		return true
	}
	if !p.IsUDP() && !p.IsEchoRequest() {
		n.ctr.unsupported.Add(1)
		return true
	}
	if d := p.Dst; d.IsMulticast() || d.IsLinkLocalUnicast() || d.IsUnspecified() || d == limitedBroadcast {
		// This LAN's business, never the far edge's. (Loopback and the
		// rest are the far edge's policy to refuse.)
		n.ctr.notAllowed.Add(1)
		return true
	}
	// Datagram flows keep no state here: each packet is matched, which
	// is the first packet's answer as long as the rules stay.
	if n.pass.Rules().Match(p.Proto, p.DstAddrPort()) == passthru.Drop {
		n.ctr.policy.Add(1)
		return true
	}
	s := n.cfg.Route(p.Dst)
	if s == nil {
		n.ctr.noTunnel.Add(1)
		return true
	}
	if limit := s.MaxDatagramBytes(); 1+p.Len > limit {
		n.ctr.tooBig.Add(1)
		n.answerTooBig(pkt, &p, limit-1)
		return true
	}
	bp := n.bufs.Get().(*[]byte)
	b := append(append((*bp)[:0], packet.KindUp), pkt[:p.Len]...)
	err = s.SendDatagram(b)
	*bp = b
	n.bufs.Put(bp)
	if err != nil {
		countSendError(&n.ctr, err)
		return true
	}
	n.ctr.up(p.Proto, p.Len)
	return true
}

// answerTooBig tells the client of pkt (parsed as p), which the tunnel
// cannot carry, the largest IP packet it can (mtu): ICMP fragmentation
// needed for IPv4 with DF set, ICMPv6 packet too big, at the rate the
// token bucket allows. An IPv4 packet without DF is only dropped (a
// router would fragment it; the tunnel carries no fragments), and so is
// one from a source no answer can go to.
func (n *Near) answerTooBig(pkt []byte, p *packet.Packet, mtu int) {
	if p.Src.Is4() && binary.BigEndian.Uint16(pkt[6:])&0x4000 == 0 {
		return
	}
	if s := p.Src; s.IsUnspecified() || s.IsMulticast() || s == limitedBroadcast {
		return
	}
	if !n.allowTooBig() {
		n.ctr.tooBigLimited.Add(1)
		return
	}
	bp := n.bufs.Get().(*[]byte)
	defer n.bufs.Put(bp)
	b, err := packet.AppendTooBig((*bp)[:0], pkt, p, mtu)
	*bp = b
	if err != nil {
		n.log.Debug("cannot build a packet-too-big answer", "src", p.Src, "dst", p.Dst, "mtu", mtu, "err", err)
		return
	}
	if err := n.cfg.Write(b); err != nil {
		n.ctr.socketErrors.Add(1)
		return
	}
	n.ctr.tooBigAnswered.Add(1)
}

// allowTooBig takes a token from the too-big answers' bucket, if one is
// there.
func (n *Near) allowTooBig() bool {
	n.tbMu.Lock()
	defer n.tbMu.Unlock()
	now := n.cfg.now()
	if el := now.Sub(n.tbLast); el > 0 {
		n.tbTokens = min(TooBigBurst, n.tbTokens+el.Seconds()*TooBigPerSecond)
		n.tbLast = now
	}
	if n.tbTokens < 1 {
		return false
	}
	n.tbTokens--
	return true
}

// divertable reports whether Divert takes pkt: UDP, an ICMP or ICMPv6
// echo request, or a fragment that may be one of those (IPv4 fragments
// after the first, IPv6 fragment headers). Malformed packets of those
// protocols are taken too (and dropped); anything else is the netstack's.
func divertable(pkt []byte) bool {
	proto, ok := packet.Protocol(pkt)
	if !ok {
		return false
	}
	switch proto {
	case packet.ProtoUDP:
		return true
	case packet.ProtoICMP:
		if pkt[0]>>4 != 4 {
			return false
		}
		ihl := int(pkt[0]&0x0f) * 4
		if len(pkt) > 7 && (pkt[6]&0x1f != 0 || pkt[7] != 0) {
			return true // a fragment after the first: its type is unknown
		}
		return len(pkt) <= ihl || pkt[ihl] == packet.ICMPEchoRequest
	case packet.ProtoICMPv6:
		return len(pkt) <= packet.IPv6HeaderLen || pkt[packet.IPv6HeaderLen] == packet.ICMPv6EchoRequest
	case ipv6FragmentHeader:
		return pkt[0]>>4 == 6
	}
	return false
}

// limitedBroadcast is 255.255.255.255.
var limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// ipv6FragmentHeader is the next-header value of IPv6's fragment header.
const ipv6FragmentHeader = 44

// Deliver takes a KindDown datagram's packet (the kind byte removed) and
// writes it to the TUN. Only UDP, echo replies, the packets of passed TCP
// flows and ICMP errors about the clients' packets (from a far edge with
// transparent egress; about TCP, only a passed flow's) are written.
func (n *Near) Deliver(pkt []byte) {
	if n.pass.Deliver(pkt) {
		return
	}
	p, err := packet.Parse(pkt)
	if err != nil {
		n.ctr.parseError(err)
		return
	}
	if !p.IsUDP() && !p.IsEchoReply() {
		n.ctr.unsupported.Add(1)
		return
	}
	if err := n.cfg.Write(pkt[:p.Len]); err != nil {
		n.ctr.socketErrors.Add(1)
		return
	}
	n.ctr.down(p.Proto, p.Len)
}

// countSendError counts a datagram the tunnel refused.
func countSendError(c *Counters, err error) {
	switch {
	case errors.Is(err, tunnel.ErrDatagramQueueFull):
		c.queueFull.Add(1)
	case errors.Is(err, tunnel.ErrDatagramTooLarge):
		c.tooBig.Add(1)
	default:
		c.noTunnel.Add(1) // closed under us
	}
}

// Demux hands a datagram from the tunnel (a driver.Config.OnDatagram) to
// near (KindDown) or far (KindUp), without the kind byte. Either may be
// nil when the edge has no ingress or no egress; what it cannot take is
// counted by the other as unsupported, a datagram of an unknown kind as
// malformed.
func Demux(p []byte, near *Near, far *Far) {
	var ctr *Counters
	switch {
	case far != nil:
		ctr = &far.ctr
	case near != nil:
		ctr = &near.ctr
	default:
		return
	}
	if len(p) == 0 {
		ctr.malformed.Add(1)
		return
	}
	switch p[0] {
	case packet.KindUp:
		if far != nil {
			far.Deliver(p[1:])
			return
		}
		ctr.unsupported.Add(1)
	case packet.KindDown:
		if near != nil {
			near.Deliver(p[1:])
			return
		}
		ctr.unsupported.Add(1)
	default:
		ctr.malformed.Add(1)
	}
}

// DivertTCP is the stack's Config.DivertTCP: it takes the packets of
// the TCP flows a rule passes or drops (passthru.Near.DivertTCP).
func (n *Near) DivertTCP(pkt []byte) bool { return n.pass.DivertTCP(pkt) }
