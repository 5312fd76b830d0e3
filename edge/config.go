package edge

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/ingress"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// Config is what an edge runs with. Each field names the 'wanopt run' flag
// that sets it; the zero value of a field with a default takes it (see
// Defaults). Validate reports what is wrong, naming the flags.
type Config struct {
	// TUN is the device the ingress intercepts on (--tun); empty: no
	// ingress.
	TUN string
	// TUNSetup creates the device if needed and sets its addresses, MTU,
	// transmit queue and routes (--tun-setup; needs CAP_NET_ADMIN).
	TUNSetup  bool
	TUNAddrs  []netip.Prefix // --tun-addr
	TUNRoutes []netip.Prefix // --route
	// MTU of the device (--mtu); 0: keep the device's (attach) or
	// tun.DefaultMTU (setup).
	MTU int
	// CaptureDir receives a pcap of the TUN's packets (--capture); empty:
	// none.
	CaptureDir string

	// PrivateKey is this edge's key (--key), PeerKey the other edge's
	// public key (--peer-key).
	PrivateKey crypt.PrivateKey
	PeerKey    crypt.PublicKey
	// PeerName names the one peer in metrics and logs (--peer-name;
	// DefaultPeerName if empty). A hub's branches and a near edge's
	// upstreams are named by their own names.
	PeerName string
	// Exactly one of Listen (--listen: the responder, usually the far
	// edge) and Peer (--peer: the initiator) is set.
	Listen, Peer netip.AddrPort
	// PeerHost is the host name Peer was resolved from (--peer
	// HOST:PORT); empty when an address was given. While the tunnel is
	// down the edge looks it up again (every 30 s, from 30 s on) and
	// dials the new address if it changed.
	PeerHost string
	// Resolver looks up PeerHost and the upstreams' Host again; nil: the
	// system's resolver (net.DefaultResolver, IPv4 and IPv6).
	Resolver Resolver
	// CC is the tunnel's congestion control (--cc).
	CC tunnel.CongestionControl
	// PeerTimeout ends the tunnel, and with it every flow, after this long
	// without a word from the peer (--peer-timeout).
	PeerTimeout time.Duration
	// WANRateBps is the WAN's bottleneck rate if the operator knows it
	// (--wan-rate); 0: the tunnel probes it.
	WANRateBps uint64
	// TunnelMTU is the largest IP packet the tunnel's path MTU discovery
	// searches up to (--tunnel-mtu): the tunnel's packets never exceed
	// it, and are smaller when the path carries less. 0: 1500.
	TunnelMTU int
	// HubRateBps is, at a hub, the rate of the link its branches share
	// (--hub-rate): the hub caps each branch's tunnel at its max-min fair
	// share of it (package share). 0: each tunnel's controller alone.
	HubRateBps uint64
	// Bind, if set, opens the UDP socket of each tunnel instead of a socket
	// on Listen or toward Peer: tests run an edge pair over an in-memory
	// bindtest pair. The tunnel owns and closes what it returns.
	Bind func() (bind.Conn, error)

	// Policy is the egress policy (--allow); with no rules the edge
	// connects nothing and refuses every flow its peer opens.
	Policy egress.Policy
	// Branches, if any, make this edge a hub (--branch): it serves each of
	// these peers on its Listen socket instead of the one PeerKey, and
	// each branch's flows may reach Policy's rules and its own.
	Branches []Branch
	// Upstreams, if any, are the far edges a near edge with several peers
	// dials (--upstream), instead of Peer and PeerKey; a flow goes to the
	// one whose routes hold its destination.
	Upstreams []Upstream
	// NearRules are the near edge's policy (--near-rule, first match
	// winning): which intercepted flows are optimised (terminated, TCP
	// only), passed unterminated as datagrams, or dropped. None: TCP
	// optimised, the rest passed. Passing TCP needs a far edge with
	// transparent egress (Transparent).
	NearRules ingress.Rules
	// Transparent connects flows from the client's address through the
	// TUN's stack (--egress transparent), and sends the clients' UDP,
	// pings and passed TCP out of the TUN, instead of kernel sockets.
	Transparent bool
	DialTimeout time.Duration // --dial-timeout
	// MaxFlows caps the flows open at once (--max-flows); the memory
	// budget may hold fewer (FlowLimit).
	MaxFlows int
	// FlowIdleTimeout resets a flow (at this edge's stack or egress) that
	// moved no byte for this long (--flow-idle-timeout; DefaultFlowIdleTimeout
	// if 0; negative: never).
	FlowIdleTimeout time.Duration

	// MemoryMiB is the memory budget for flow buffers (--memory-mib; see
	// buffers).
	MemoryMiB int
	// Control is the unix socket 'wanopt status' and 'wanopt flows' query
	// (--control); empty: none.
	Control string
	// Metrics is the TCP address serving Prometheus metrics at /metrics
	// (--metrics; see edge/metrics); empty: none.
	Metrics string
	// Logger receives the edge's events (never keys); nil discards them.
	Logger *slog.Logger
	// Reload, if set, reads the configuration again for Edge.Reload
	// (wanopt run: the config file and the command line); nil: the edge
	// cannot reload.
	Reload func() (Config, error)
}

// Defaults, and the limits Validate enforces.
const (
	// DefaultMemoryMiB gives the tunnel a 96 MiB stream budget (250 Mbit/s
	// at 1 s of RTT three times over), streaming flows LAN buffers of
	// 1 MiB each way, and room for about 1,290 flows (see buffers): a
	// branch of a few hundred users. It is a ceiling, not an allocation.
	DefaultMemoryMiB = 384
	MinMemoryMiB     = 16
	MaxMemoryMiB     = 1 << 20
	// DefaultFlowIdleTimeout ends flows nobody used for a day: longer than
	// any idle SSH session or database pool connection lives unattended
	// (firewalls commonly allow one hour, Linux conntrack five days), and
	// a flow waiting on a receiver or a WAN outage is not idle.
	DefaultFlowIdleTimeout = 24 * time.Hour
	// MaxTunnelMTU is the largest --tunnel-mtu: a 9,000-byte jumbo frame
	// and some room.
	MaxTunnelMTU = 9216
	// MinPeerTimeout keeps a few keepalives (every 10 s, or a third of
	// the timeout) inside PeerTimeout.
	MinPeerTimeout = 5 * time.Second
)

// DefaultPeerName is the one peer's name when Config.PeerName is empty.
const DefaultPeerName = "peer"

// peerName is the one peer's name (Config.PeerName or DefaultPeerName).
func (c Config) peerName() string {
	if c.PeerName == "" {
		return DefaultPeerName
	}
	return c.PeerName
}

// ErrConfig marks a configuration Validate refused.
var ErrConfig = errors.New("bad edge configuration")

// withDefaults fills in the zero fields that have a default.
func (c Config) withDefaults() Config {
	if c.MemoryMiB == 0 {
		c.MemoryMiB = DefaultMemoryMiB
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = egress.DefaultDialTimeout
	}
	if c.MaxFlows == 0 {
		c.MaxFlows = egress.DefaultMaxFlows
	}
	if c.TunnelMTU == 0 {
		c.TunnelMTU = 1500
	}
	if c.PeerTimeout == 0 {
		c.PeerTimeout = tunnel.DefaultIdleTimeout
	}
	if c.FlowIdleTimeout == 0 {
		c.FlowIdleTimeout = DefaultFlowIdleTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate checks the configuration (after defaults) and says what to
// change; errors wrap ErrConfig.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	switch {
	case c.CaptureDir != "" && c.TUN == "":
		return bad("--capture records the packets of the TUN device: it needs --tun (the near edge)")
	case !c.Listen.IsValid() && !c.Peer.IsValid() && len(c.Upstreams) == 0:
		return bad("say which end of the tunnel this edge is: --listen ADDR:PORT (far edge, responder) or --peer ADDR:PORT (near edge, initiator)")
	case c.Listen.IsValid() && c.Peer.IsValid():
		return bad("--listen and --peer are exclusive: an edge either accepts the tunnel or opens it")
	case c.PeerHost != "" && !c.Peer.IsValid():
		return bad("PeerHost %q needs Peer, the address it resolved to (--peer HOST:PORT)", c.PeerHost)
	case c.Peer.IsValid() && (c.Peer.Port() == 0 || c.Peer.Addr().IsUnspecified()):
		return bad("--peer %v: want the far edge's ADDR:PORT, e.g. 198.18.0.2:4500", c.Peer)
	case c.PrivateKey.IsZero():
		return bad("--key FILE is required (make one with 'wanopt keygen --out edge.key')")
	case len(c.Branches) == 0 && len(c.Upstreams) == 0 && c.PeerKey.IsZero():
		return bad("--peer-key BASE64 is required: the peer's public key ('wanopt pubkey < peer.key')")
	case c.PeerKey == c.PrivateKey.PublicKey():
		return bad("--peer-key is this edge's own public key; give the other edge's")
	case len(c.NearRules) > 0 && (c.TUN == "" || c.Transparent || len(c.Branches) > 0):
		return bad("--near-rule decides what a near edge does with the flows it intercepts: it needs --tun NAME, without --egress transparent (whose TUN is the far edge's way out) and without --branch")
	case c.Transparent && c.TUN == "":
		return bad("--egress transparent connects servers through the TUN device's stack: it needs --tun NAME, with the clients' networks routed into the device (--route CIDR)")
	case c.TUN == "" && len(c.Policy.Rules) == 0 && len(c.Branches) == 0:
		return bad("this edge would do nothing: give --tun NAME to intercept flows (near edge) and/or --allow CIDR[:PORTS] to connect them (far edge)")
	case c.PeerName != "" && !branchName.MatchString(c.PeerName):
		return bad("--peer-name %q: a name is 1 to 32 letters, digits, '.', '_' or '-', starting with a letter or digit", c.PeerName)
	case c.PeerName != "" && (len(c.Branches) > 0 || len(c.Upstreams) > 0):
		return bad("--peer-name names the one peer: a hub's branches and the upstreams are named by --branch NAME:KEY and --upstream NAME:KEY@ADDR:PORT")
	case len(c.TUN) > 15:
		return bad("--tun %q: interface names have at most 15 bytes", c.TUN)
	case (len(c.TUNAddrs) > 0 || len(c.TUNRoutes) > 0) && !c.TUNSetup:
		return bad("--tun-addr and --route need --tun-setup")
	case c.TUNSetup && c.TUN == "":
		return bad("--tun-setup needs --tun NAME")
	case c.MTU != 0 && (c.MTU < 1280 || c.MTU > 65535):
		return bad("--mtu %d: want 1280 to 65535", c.MTU)
	case c.TunnelMTU != 0 && (c.TunnelMTU < 1280 || c.TunnelMTU > MaxTunnelMTU):
		return bad("--tunnel-mtu %d: want 1280 (the IPv6 minimum, which every path carries) to %d", c.TunnelMTU, MaxTunnelMTU)
	case c.DialTimeout < 0:
		return bad("--dial-timeout %v: must be positive", c.DialTimeout)
	case c.MaxFlows < 0:
		return bad("--max-flows %d: must be positive", c.MaxFlows)
	case c.PeerTimeout < MinPeerTimeout:
		return bad("--peer-timeout %v: want at least %v (keepalives go every 10 s)", c.PeerTimeout, MinPeerTimeout)
	case c.MemoryMiB < MinMemoryMiB || c.MemoryMiB > MaxMemoryMiB:
		return bad("--memory-mib %d: want %d to %d", c.MemoryMiB, MinMemoryMiB, MaxMemoryMiB)
	case c.CC != tunnel.CCBBR && c.CC != tunnel.CCCubic:
		return bad("--cc %q: want bbr or cubic", c.CC)
	case c.HubRateBps > 0 && len(c.Branches) == 0:
		return bad("--hub-rate divides a hub's link among its branches: it needs --branch")
	case len(c.Branches) > 0:
		return c.validateBranches()
	case len(c.Upstreams) > 0:
		return c.validateUpstreams()
	}
	return nil
}

// Role names the edge's end of the tunnel: initiator (Peer set) or
// responder.
func (c Config) Role() string {
	if c.Peer.IsValid() || len(c.Upstreams) > 0 {
		return "initiator"
	}
	return "responder"
}

// Summary describes the configuration in one line (no secrets).
func (c Config) Summary() string {
	c = c.withDefaults()
	s := c.Role()
	switch {
	case len(c.Upstreams) > 0:
		var ups []string
		for _, u := range c.Upstreams {
			ups = append(ups, fmt.Sprintf("%s at %s", u.Name, hostAddr(u.Host, u.Addr)))
		}
		s += " to upstreams " + strings.Join(ups, ", ")
	case c.Peer.IsValid():
		s += " to " + hostAddr(c.PeerHost, c.Peer)
	default:
		s += " on " + c.Listen.String()
	}
	if len(c.Branches) > 0 {
		names := make([]string, len(c.Branches))
		for i, b := range c.Branches {
			names[i] = b.Name
		}
		s = fmt.Sprintf("hub on %v for branches %s, public key %s, cc %v, memory %d MiB (%d flows)",
			c.Listen, strings.Join(names, ", "), c.PrivateKey.PublicKey().Base64(), c.CC, c.MemoryMiB, c.FlowLimit())
		if len(c.Policy.Rules) > 0 || len(c.Policy.Deny) > 0 {
			s += ", egress for every branch to " + c.Policy.String()
		}
		return s
	}
	s += fmt.Sprintf(", public key %s", c.PrivateKey.PublicKey().Base64())
	if len(c.Upstreams) == 0 {
		s += ", peer " + c.PeerKey.Base64()
	}
	s += fmt.Sprintf(", cc %v, memory %d MiB (%d flows)", c.CC, c.MemoryMiB, c.FlowLimit())
	if c.TUN != "" {
		s += ", ingress on TUN " + c.TUN
		if len(c.NearRules) > 0 {
			s += " (near rules: " + c.NearRules.String() + ")"
		}
	}
	if len(c.Policy.Rules) > 0 {
		s += ", egress to " + c.Policy.String()
		if c.Transparent {
			s += " (transparent, from the clients' addresses through TUN " + c.TUN + ")"
		}
	} else {
		s += ", no egress (flows from the peer are refused)"
	}
	return s
}

// hostAddr is a peer's address for the summary: with a host name, the
// name and port, and the address it resolved to when it was read.
func hostAddr(host string, addr netip.AddrPort) string {
	if host == "" {
		return addr.String()
	}
	return fmt.Sprintf("%s (%v)", net.JoinHostPort(host, strconv.Itoa(int(addr.Port()))), addr)
}

// bufferPlan is how the memory budget is split.
type bufferPlan struct {
	// TunnelBytes bounds the tunnel's stream buffers and windows beyond
	// their floors, over all flows (tunnel stream.Config.BudgetBytes).
	TunnelBytes uint64
	// FlowFloorBytes is what each flow reserves at open (flow.Budget);
	// FlowLimit flows fit the floors' share. GrantBytes bounds the grants
	// of streaming flows over all flows.
	FlowFloorBytes, GrantBytes int64
	FlowLimit                  int
	// RecvFloor and SendFloor are an intercepted connection's buffers
	// without a grant, RecvGrown and SendGrown with one.
	RecvFloor, RecvGrown, SendFloor, SendGrown int
}

// The pieces of a flow's floor (FlowFloorBytes): what one flow can pin at
// its smallest buffers while neither end reads.
const (
	// streamFloorBytes is a tunnel stream's receive window and send buffer
	// at open, each one 32 KiB chunk (stream.DefaultChunkBytes): the
	// floors the stream package grants regardless of the budget. The
	// receive window is also the credit the peer assumes, so both edges
	// use this value. A new flow does not wait on it: the far edge's
	// answer carries a window sized from the path.
	streamFloorBytes = 32 << 10
	// lanFloorBytes is an intercepted connection's receive and send
	// buffer without a grant: a 8 KiB window, enough for a keystroke or a
	// request, on a LAN whose round trip is short.
	lanFloorBytes = 16 << 10
	// relayFloorBytes is the relay's two small copy buffers (flow.Relay).
	relayFloorBytes = 2 * 4 << 10
	// flowOverheadBytes is what a flow costs beyond its buffers: the
	// netstack endpoint and its queues, the stream's state, table entries
	// and two or three goroutine stacks. TestEdgeMemoryBudget (cmd/wanopt)
	// logs the RSS per admitted flow.
	flowOverheadBytes = 48 << 10
	flowFloorBytes    = 2*streamFloorBytes + 2*lanFloorBytes + relayFloorBytes + flowOverheadBytes
)

// buffers splits the memory budget: a quarter for the tunnel's stream
// buffers and windows beyond their floors, a quarter for the grants of
// streaming flows, and half for the floors of admitted flows, which sets
// how many flows the edge admits (FlowLimit). Every share is a hard cap,
// so the flows' memory never exceeds the budget, whatever they hold. A
// grant lets a flow's LAN buffers grow to what the LAN side needs: its
// round trip is short, so they need not hold the WAN's bandwidth-delay
// product, which the stream windows do (1 MiB holds 32 ms at 250 Mbit/s).
// The size of a grant sets how many flows stream with large buffers at
// once; a flow without one copies 4 KiB at a time, a TUN write and a
// client ACK each. At 1 MiB, 32 flows sharing 250 Mbit/s all hold a grant
// (`wanbench cisco --streams 32`).
func (c Config) buffers() bufferPlan {
	c = c.withDefaults()
	total := int64(c.MemoryMiB) << 20
	clamp := func(v, lo, hi int64) int { return int(max(lo, min(v, hi))) }
	p := bufferPlan{
		TunnelBytes:    uint64(total / 4),
		GrantBytes:     total / 4,
		FlowFloorBytes: flowFloorBytes,
		FlowLimit:      int(min(int64(c.MaxFlows), total/2/flowFloorBytes)),
		RecvFloor:      lanFloorBytes, SendFloor: lanFloorBytes,
		RecvGrown: clamp(total/256, 256<<10, 1<<20),
		SendGrown: clamp(total/256, 256<<10, 1<<20),
	}
	return p
}

// FlowLimit is how many flows the edge admits at once: as many floors as
// half the memory budget holds (about 1,290 at the default 384 MiB, 53 at
// 16 MiB), at most MaxFlows. Opens beyond it are refused.
func (c Config) FlowLimit() int { return c.buffers().FlowLimit }

// FixedOverheadMiB is what an edge's resident memory holds beside its
// budget (--memory-mib): the Go runtime and code, the netstack, the
// packet buffers, the metrics library, the garbage collector's headroom.
// TestEdgeMemoryBudget (cmd/wanopt) checks that an edge at --memory-mib 16
// with 1,000 flows pressing stays within both.
const FixedOverheadMiB = 40

// RuntimeMemoryLimit is the soft memory limit for the Go runtime
// (runtime/debug.SetMemoryLimit) of a process running this one edge: the
// budget plus the part of the fixed overhead the runtime manages, so that
// garbage is collected before the process outgrows budget and overhead.
func (c Config) RuntimeMemoryLimit() int64 {
	return int64(c.withDefaults().MemoryMiB+FixedOverheadMiB/2) << 20
}
