package passthru

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanopt/wanopt/dgram/packet"
)

// bufBytes is the room of a datagram being built: larger than any of the
// default tunnel size.
const bufBytes = 2048

// NearConfig configures a Near.
type NearConfig struct {
	// Route returns the tunnel that carries packets toward dst, or nil
	// when none is up. Required.
	Route func(dst netip.Addr) packet.Sender
	// Write writes one IP packet to the TUN, toward the client; pkt is
	// only valid during the call. Required.
	Write func(pkt []byte) error
	// Count counts what crosses and what is dropped. Required.
	Count Counter
	// TooBig answers the client of pkt (parsed as p), which no datagram
	// of mtu bytes carries even cut into segments, as a router would.
	// Required.
	TooBig func(pkt []byte, p *packet.Packet, mtu int)
	// Rules decide what each flow gets; nil: TCP optimised, the rest
	// passed.
	Rules Rules
	// PassIdleTimeout and MaxPassFlows bound the table of passed TCP
	// flows (DefaultPassIdleTimeout, DefaultMaxPassFlows when 0).
	PassIdleTimeout time.Duration
	MaxPassFlows    int
	// Now is the table's clock; nil: time.Now.
	Now func() time.Time
}

// Near is a near edge's passed TCP: it sends the packets of flows a rule
// passes through the tunnel whole, and writes the far edge's answers
// (theirs, and ICMP errors about the clients' packets) to the TUN. Its
// methods are safe for concurrent use.
type Near struct {
	cfg   NearConfig
	bufs  sync.Pool // *[]byte: the datagrams being built
	rules atomic.Pointer[rulesBox]
	pass  *tcpTable
}

type rulesBox struct{ r Rules }

// NewNear returns a Near.
func NewNear(cfg NearConfig) *Near {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	n := &Near{cfg: cfg, pass: newTCPTable(cfg.Now, cfg.PassIdleTimeout, cfg.MaxPassFlows)}
	n.bufs.New = func() any { b := make([]byte, 0, bufBytes); return &b }
	n.SetRules(cfg.Rules)
	return n
}

// SetRules replaces the rules (nil: the defaults), for the flows that
// start from now on: passed TCP flows already in the table stay passed,
// and flows already terminated stay with the stack.
func (n *Near) SetRules(r Rules) {
	if r == nil {
		r = defaultRules{}
	}
	n.rules.Store(&rulesBox{r})
}

// Rules returns the rules in force.
func (n *Near) Rules() Rules { return n.rules.Load().r }

// PassedFlows lists the TCP flows a pass rule sent as datagrams, not yet
// forgotten (idle), in no particular order.
func (n *Near) PassedFlows() []PassedFlow { return n.pass.snapshot() }

// Flows is the size of the passed flows' table.
func (n *Near) Flows() int { return int(n.pass.n.Load()) }

// DivertTCP is the stack's Config.DivertTCP: it is called with each TCP
// packet from the TUN. It takes (returns true for) the packets of flows a
// pass rule matched on their SYN, which it sends whole through the tunnel
// (the SYN's MSS clamped to what a datagram holds), and the SYNs a drop
// rule matches, which it drops; it leaves the optimised flows to the
// stack. Without a rule that passes or drops TCP and with no passed flow
// left, it returns at once.
func (n *Near) DivertTCP(pkt []byte) bool {
	rules := n.rules.Load().r
	if !rules.DivertsTCP() && n.pass.n.Load() == 0 {
		return false
	}
	p, err := parseTCP(pkt)
	if err != nil {
		return false // the stack's to count and drop
	}
	k := tcpKey{p.src, p.dst}
	e := n.pass.get(k)
	if p.isSYN() {
		switch rules.Match(protoTCP, p.dst) {
		case Drop:
			n.cfg.Count.Dropped(DropPolicy)
			return true
		case Optimise:
			if e != nil {
				n.pass.remove(k) // the tuple's old passed flow is over
			}
			return false
		}
		if e = n.pass.add(k); e == nil {
			n.cfg.Count.Dropped(DropFlowLimit)
			return true
		}
	}
	if e == nil {
		return false
	}
	n.pass.seen(e, p.flags, p.len, true)
	s := n.cfg.Route(p.dst.Addr())
	if s == nil {
		n.cfg.Count.Dropped(DropNoTunnel)
		return true
	}
	limit := s.MaxDatagramBytes()
	if 1+p.len > limit {
		n.sendSegments(s, pkt, &p, limit)
		return true
	}
	sendWhole(&n.bufs, n.cfg.Count, s, pkt, &p, packet.KindUp, p.dst.Addr(), limit)
	return true
}

// sendWhole sends the TCP packet pkt (parsed as p) as one datagram of
// kind, a SYN's MSS clamped to what a datagram of limit bytes toward
// peer's family holds.
func sendWhole(bufs *sync.Pool, c Counter, s packet.Sender, pkt []byte, p *tcpPacket, kind byte, peer netip.Addr, limit int) {
	bp := bufs.Get().(*[]byte)
	b := append(append((*bp)[:0], kind), pkt[:p.len]...)
	if p.flags&tcpSYN != 0 {
		if mss := mssFor(peer, limit); mss > 0 {
			clampMSS(b[1+p.hdrLen:], mss)
		}
	}
	err := s.SendDatagram(b)
	*bp = b
	bufs.Put(bp)
	switch {
	case err != nil:
		c.SendError(err)
	case kind == packet.KindUp:
		c.Up(protoTCP, p.len)
	default:
		c.Down(protoTCP, p.len)
	}
}

// sendSegments sends a passed TCP packet too long for a datagram (an
// aggregate of segments from the TUN's offload) as segments that fit; one
// whose headers alone do not fit is answered as a router would.
func (n *Near) sendSegments(s packet.Sender, pkt []byte, p *tcpPacket, limit int) {
	if !sendCut(&n.bufs, n.cfg.Count, s, pkt, p, packet.KindUp, limit) {
		n.cfg.Count.Dropped(DropTooBig)
		n.cfg.TooBig(pkt, &packet.Packet{Src: p.src.Addr(), Dst: p.dst.Addr(), Len: p.len}, limit-1)
	}
}

// sendCut sends the TCP packet pkt (parsed as p), longer than a datagram
// of limit bytes, as datagrams of kind holding the segments it is cut
// into (segmentTCP); false if it cannot be cut, with nothing sent.
func sendCut(bufs *sync.Pool, c Counter, s packet.Sender, pkt []byte, p *tcpPacket, kind byte, limit int) bool {
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	b, ok := segmentTCP((*bp)[:0], pkt, p, kind, limit-1, func(d []byte) {
		switch err := s.SendDatagram(d); {
		case err != nil:
			c.SendError(err)
		case kind == packet.KindUp:
			c.Up(protoTCP, len(d)-1)
		default:
			c.Down(protoTCP, len(d)-1)
		}
	})
	*bp = b
	return ok
}

// Deliver takes a KindDown datagram's packet (the kind byte removed) if
// it is this package's, a TCP segment or an ICMP error, writes it to the
// TUN if it belongs to a passed flow or a client's datagram, and reports
// whether it took the packet.
func (n *Near) Deliver(pkt []byte) bool {
	proto, ok := packet.Protocol(pkt)
	switch {
	case ok && proto == protoTCP:
		n.deliverTCP(pkt)
	case ok && maybeICMPError(pkt, proto):
		n.deliverICMPError(pkt)
	default:
		return false
	}
	return true
}

// deliverTCP writes a passed flow's packet from the far edge to the TUN;
// a packet of a flow not passed here is dropped (NotAllowed).
func (n *Near) deliverTCP(pkt []byte) {
	p, err := parseTCP(pkt)
	if err != nil {
		n.cfg.Count.ParseError(err)
		return
	}
	e := n.pass.get(tcpKey{p.dst, p.src})
	if e == nil {
		n.cfg.Count.Dropped(DropNotAllowed)
		return
	}
	n.pass.seen(e, p.flags, p.len, false)
	n.write(pkt[:p.len], protoTCP)
}

// deliverICMPError writes an ICMP error about a client's packet to the
// TUN. An error about TCP is written only for a passed flow (the stack
// terminates the others: their errors are the far edge's own).
func (n *Near) deliverICMPError(pkt []byte) {
	ie, err := parseICMPError(pkt)
	if err != nil {
		n.cfg.Count.ParseError(err)
		return
	}
	if ie.proto == protoTCP && n.pass.get(tcpKey{ie.from, ie.to}) == nil {
		n.cfg.Count.Dropped(DropNotAllowed)
		return
	}
	n.write(pkt[:ie.len], packet.ProtoICMP)
}

// write writes pkt to the TUN, counted as proto.
func (n *Near) write(pkt []byte, proto uint8) {
	if err := n.cfg.Write(pkt); err != nil {
		n.cfg.Count.Dropped(DropSocketError)
		return
	}
	n.cfg.Count.Down(proto, len(pkt))
}
