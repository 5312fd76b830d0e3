package dgram

import (
	"errors"
	"sync/atomic"

	"github.com/wanopt/wanopt/dgram/packet"
	"github.com/wanopt/wanopt/dgram/passthru"
)

// Stats counts one edge side's datagram traffic: the packets its clients
// sent toward servers (up) and the answers (down), per protocol, in IP
// packet bytes, and the packets dropped, by reason.
type Stats struct {
	UDP ProtoStats `json:"udp"`
	// ICMP counts echo requests (up) and replies (down), IPv4 and IPv6,
	// and (down) the ICMP errors about a flow that a far edge with
	// transparent egress sends back, whatever the flow's protocol.
	ICMP ProtoStats `json:"icmp"`
	// TCP counts the packets of TCP flows a near edge's rule passes
	// (--near-rule pass:tcp:...), carried whole instead of terminated;
	// TCPFlows is the passed flows' table now (either edge's).
	TCP      ProtoStats `json:"tcp"`
	TCPFlows int        `json:"tcp_flows"`
	// Flows is the far edge's NAT table now (with transparent egress: its
	// table of UDP and echo flows, which hold no socket); FlowsOpened and
	// FlowsExpired count its entries since start (expired: idle).
	Flows        int    `json:"flows"`
	FlowsOpened  uint64 `json:"flows_opened"`
	FlowsExpired uint64 `json:"flows_expired"`
	Drops        Drops  `json:"drops"`
	// TooBigAnswered counts the packets too big for the tunnel (in
	// Drops.TooBig) that the near edge answered with ICMP "fragmentation
	// needed" or ICMPv6 "packet too big"; TooBigLimited those the rate
	// limit left unanswered (TooBigPerSecond).
	TooBigAnswered uint64 `json:"too_big_answered"`
	TooBigLimited  uint64 `json:"too_big_limited"`
}

// Add returns the sum of s and o (a hub's branches).
func (s Stats) Add(o Stats) Stats {
	ap := func(a, b ProtoStats) ProtoStats {
		return ProtoStats{PacketsUp: a.PacketsUp + b.PacketsUp, BytesUp: a.BytesUp + b.BytesUp,
			PacketsDown: a.PacketsDown + b.PacketsDown, BytesDown: a.BytesDown + b.BytesDown}
	}
	d, x := s.Drops, o.Drops
	return Stats{UDP: ap(s.UDP, o.UDP), ICMP: ap(s.ICMP, o.ICMP), TCP: ap(s.TCP, o.TCP), TCPFlows: s.TCPFlows + o.TCPFlows, Flows: s.Flows + o.Flows,
		FlowsOpened: s.FlowsOpened + o.FlowsOpened, FlowsExpired: s.FlowsExpired + o.FlowsExpired,
		Drops: Drops{NotAllowed: d.NotAllowed + x.NotAllowed, TooBig: d.TooBig + x.TooBig, QueueFull: d.QueueFull + x.QueueFull,
			Malformed: d.Malformed + x.Malformed, Unsupported: d.Unsupported + x.Unsupported, NoTunnel: d.NoTunnel + x.NoTunnel,
			FlowLimit: d.FlowLimit + x.FlowLimit, Policy: d.Policy + x.Policy, Unmatched: d.Unmatched + x.Unmatched, SocketErrors: d.SocketErrors + x.SocketErrors},
		TooBigAnswered: s.TooBigAnswered + o.TooBigAnswered, TooBigLimited: s.TooBigLimited + o.TooBigLimited}
}

// ProtoStats counts one protocol's packets and bytes each way.
type ProtoStats struct {
	PacketsUp   uint64 `json:"packets_up"`
	BytesUp     uint64 `json:"bytes_up"`
	PacketsDown uint64 `json:"packets_down"`
	BytesDown   uint64 `json:"bytes_down"`
}

// Drops counts packets dropped, by reason.
type Drops struct {
	// NotAllowed: the far edge's policy refuses the destination (ICMP is
	// checked as port 0), or the near edge does not carry it (multicast,
	// broadcast, link-local or unspecified destinations).
	NotAllowed uint64 `json:"not_allowed"`
	// TooBig: longer than one tunnel datagram carries.
	TooBig uint64 `json:"too_big"`
	// QueueFull: a queue on the way was full (the tunnel's, or the far
	// edge's worker's).
	QueueFull uint64 `json:"queue_full"`
	// Malformed: not a well-formed IP packet, or a datagram of an
	// unknown kind. Unsupported: well-formed but not carried (fragments,
	// IPv6 extension headers, other protocols, a reply at an edge with no
	// ingress).
	Malformed   uint64 `json:"malformed"`
	Unsupported uint64 `json:"unsupported"`
	// NoTunnel: no tunnel was up to carry it (with several upstreams: or
	// no upstream's route holds the destination).
	NoTunnel uint64 `json:"no_tunnel"`
	// FlowLimit: the far edge's NAT table was full.
	FlowLimit uint64 `json:"flow_limit"`
	// Policy: a near edge's rule (--near-rule) says drop.
	Policy uint64 `json:"policy"`
	// Unmatched: at a far edge with transparent egress, a UDP packet,
	// echo reply or ICMP error the kernel routed into its TUN that
	// answers no flow in its table (forgotten idle, or never sent).
	Unmatched uint64 `json:"unmatched"`
	// SocketErrors: the far edge's socket could not be opened or failed
	// to send or receive (e.g. ping sockets not allowed: see
	// net.ipv4.ping_group_range), or the near edge's TUN queue refused
	// the packet.
	SocketErrors uint64 `json:"socket_errors"`
}

// Total is the sum of the drops.
func (d Drops) Total() uint64 {
	return d.NotAllowed + d.TooBig + d.QueueFull + d.Malformed + d.Unsupported + d.NoTunnel + d.FlowLimit + d.Policy + d.Unmatched + d.SocketErrors
}

// Counters are the live counters behind Stats, safe for concurrent use.
type Counters struct {
	udp, icmp, tcp           protoCounters
	flowsOpened, flowsExpire atomic.Uint64
	tooBigAnswered           atomic.Uint64
	tooBigLimited            atomic.Uint64

	notAllowed, tooBig, queueFull, malformed, unsupported, noTunnel, flowLimit, policy, unmatched, socketErrors atomic.Uint64
}

type protoCounters struct{ pktUp, bytesUp, pktDown, bytesDown atomic.Uint64 }

func (c *Counters) proto(p uint8) *protoCounters {
	switch p {
	case packet.ProtoUDP:
		return &c.udp
	case packet.ProtoTCP:
		return &c.tcp
	}
	return &c.icmp
}

func (c *Counters) up(proto uint8, n int) {
	pc := c.proto(proto)
	pc.pktUp.Add(1)
	pc.bytesUp.Add(uint64(n))
}

func (c *Counters) down(proto uint8, n int) {
	pc := c.proto(proto)
	pc.pktDown.Add(1)
	pc.bytesDown.Add(uint64(n))
}

// parseError counts a Parse error.
func (c *Counters) parseError(err error) {
	if errors.Is(err, packet.ErrUnsupported) {
		c.unsupported.Add(1)
	} else {
		c.malformed.Add(1)
	}
}

// Stats returns a snapshot (Flows is the caller's to fill in).
func (c *Counters) Stats() Stats {
	ps := func(p *protoCounters) ProtoStats {
		return ProtoStats{PacketsUp: p.pktUp.Load(), BytesUp: p.bytesUp.Load(), PacketsDown: p.pktDown.Load(), BytesDown: p.bytesDown.Load()}
	}
	return Stats{UDP: ps(&c.udp), ICMP: ps(&c.icmp), TCP: ps(&c.tcp), FlowsOpened: c.flowsOpened.Load(), FlowsExpired: c.flowsExpire.Load(),
		Drops: Drops{NotAllowed: c.notAllowed.Load(), TooBig: c.tooBig.Load(), QueueFull: c.queueFull.Load(), Malformed: c.malformed.Load(),
			Unsupported: c.unsupported.Load(), NoTunnel: c.noTunnel.Load(), FlowLimit: c.flowLimit.Load(), Policy: c.policy.Load(), Unmatched: c.unmatched.Load(), SocketErrors: c.socketErrors.Load()},
		TooBigAnswered: c.tooBigAnswered.Load(), TooBigLimited: c.tooBigLimited.Load()}
}

// counting is Counters as the passed paths count (passthru.Counter).
type counting Counters

func (c *counting) Up(proto uint8, n int)   { (*Counters)(c).up(proto, n) }
func (c *counting) Down(proto uint8, n int) { (*Counters)(c).down(proto, n) }
func (c *counting) ParseError(err error)    { (*Counters)(c).parseError(err) }
func (c *counting) SendError(err error)     { countSendError((*Counters)(c), err) }
func (c *counting) FlowOpened()             { c.flowsOpened.Add(1) }

func (c *counting) Dropped(why passthru.Reason) {
	byWhy := [...]*atomic.Uint64{passthru.DropNotAllowed: &c.notAllowed, passthru.DropTooBig: &c.tooBig,
		passthru.DropUnsupported: &c.unsupported, passthru.DropNoTunnel: &c.noTunnel, passthru.DropFlowLimit: &c.flowLimit,
		passthru.DropPolicy: &c.policy, passthru.DropUnmatched: &c.unmatched, passthru.DropSocketError: &c.socketErrors}
	if int(why) < len(byWhy) {
		byWhy[why].Add(1)
		return
	}
	c.socketErrors.Add(1) // a reason this side does not know yet
}
