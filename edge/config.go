package edge

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/wanopt/wanopt/egress"
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
	// Exactly one of Listen (--listen: the responder, usually the far
	// edge) and Peer (--peer: the initiator) is set.
	Listen, Peer netip.AddrPort
	// CC is the tunnel's congestion control (--cc).
	CC tunnel.CongestionControl
	// PeerTimeout ends the tunnel, and with it every flow, after this long
	// without a word from the peer (--peer-timeout).
	PeerTimeout time.Duration
	// WANRateBps is the WAN's bottleneck rate if the operator knows it
	// (--wan-rate); 0: the tunnel probes it.
	WANRateBps uint64
	// Bind, if set, opens the UDP socket of each tunnel instead of a socket
	// on Listen or toward Peer: tests run an edge pair over an in-memory
	// bindtest pair. The tunnel owns and closes what it returns.
	Bind func() (bind.Conn, error)

	// Policy is the egress policy (--allow); with no rules the edge
	// connects nothing and refuses every flow its peer opens.
	Policy egress.Policy
	// Transparent connects flows from the client's address through the
	// TUN's stack (--egress transparent) instead of a kernel socket.
	Transparent bool
	DialTimeout time.Duration // --dial-timeout
	MaxFlows    int           // --max-flows
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
	// Logger receives the edge's events (never keys); nil discards them.
	Logger *slog.Logger
}

// Defaults, and the limits Validate enforces.
const (
	// DefaultMemoryMiB gives the tunnel its 64 MiB stream budget (enough
	// for 250 Mbit/s at 1 s of RTT twice over) and the intercepted
	// connections gVisor's own buffer maxima (4 MiB receive, 6 MiB send).
	DefaultMemoryMiB = 128
	MinMemoryMiB     = 16
	MaxMemoryMiB     = 1 << 20
	// DefaultFlowIdleTimeout ends flows nobody used for a day: longer than
	// any idle SSH session or database pool connection lives unattended
	// (firewalls commonly allow one hour, Linux conntrack five days), and
	// a flow waiting on a receiver or a WAN outage is not idle.
	DefaultFlowIdleTimeout = 24 * time.Hour
	// MinPeerTimeout keeps a few keepalives (every 10 s, or a third of
	// the timeout) inside PeerTimeout.
	MinPeerTimeout = 5 * time.Second
)

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
	case !c.Listen.IsValid() && !c.Peer.IsValid():
		return bad("say which end of the tunnel this edge is: --listen ADDR:PORT (far edge, responder) or --peer ADDR:PORT (near edge, initiator)")
	case c.Listen.IsValid() && c.Peer.IsValid():
		return bad("--listen and --peer are exclusive: an edge either accepts the tunnel or opens it")
	case c.Peer.IsValid() && (c.Peer.Port() == 0 || c.Peer.Addr().IsUnspecified()):
		return bad("--peer %v: want the far edge's ADDR:PORT, e.g. 198.18.0.2:4500", c.Peer)
	case c.PrivateKey.IsZero():
		return bad("--key FILE is required (make one with 'wanopt keygen --out edge.key')")
	case c.PeerKey.IsZero():
		return bad("--peer-key BASE64 is required: the peer's public key ('wanopt pubkey < peer.key')")
	case c.PeerKey == c.PrivateKey.PublicKey():
		return bad("--peer-key is this edge's own public key; give the other edge's")
	case c.Transparent && c.TUN == "":
		return bad("--egress transparent connects servers through the TUN device's stack: it needs --tun NAME, with the clients' networks routed into the device (--route CIDR)")
	case c.TUN == "" && len(c.Policy.Rules) == 0:
		return bad("this edge would do nothing: give --tun NAME to intercept flows (near edge) and/or --allow CIDR[:PORTS] to connect them (far edge)")
	case len(c.TUN) > 15:
		return bad("--tun %q: interface names have at most 15 bytes", c.TUN)
	case (len(c.TUNAddrs) > 0 || len(c.TUNRoutes) > 0) && !c.TUNSetup:
		return bad("--tun-addr and --route need --tun-setup")
	case c.TUNSetup && c.TUN == "":
		return bad("--tun-setup needs --tun NAME")
	case c.MTU != 0 && (c.MTU < 1280 || c.MTU > 65535):
		return bad("--mtu %d: want 1280 to 65535", c.MTU)
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
	}
	return nil
}

// Role names the edge's end of the tunnel: initiator (Peer set) or
// responder.
func (c Config) Role() string {
	if c.Peer.IsValid() {
		return "initiator"
	}
	return "responder"
}

// Summary describes the configuration in one line (no secrets).
func (c Config) Summary() string {
	c = c.withDefaults()
	s := c.Role()
	if c.Peer.IsValid() {
		s += " to " + c.Peer.String()
	} else {
		s += " on " + c.Listen.String()
	}
	s += fmt.Sprintf(", public key %s, peer %s, cc %v, memory %d MiB", c.PrivateKey.PublicKey().Base64(), c.PeerKey.Base64(), c.CC, c.MemoryMiB)
	if c.TUN != "" {
		s += ", ingress on TUN " + c.TUN
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

// bufferPlan is how the memory budget is split.
type bufferPlan struct {
	// TunnelBytes bounds the tunnel's stream buffers and windows over all
	// flows (tunnel stream.Config.BudgetBytes).
	TunnelBytes uint64
	// Receive and send buffer ranges of each intercepted connection.
	RecvMin, RecvDefault, RecvMax int
	SendMin, SendDefault, SendMax int
}

// buffers splits the memory budget. Only the tunnel's share is a hard cap
// over all flows; gVisor has no stack-wide limit, so the connections' share
// is a per-connection maximum, and buffers are only allocated as data waits
// in them. The LAN side's round trip is short: those buffers need not hold
// the WAN's bandwidth-delay product, which the tunnel's stream windows
// (sized from it) already do.
func (c Config) buffers() bufferPlan {
	total := c.withDefaults().MemoryMiB << 20
	clamp := func(v, lo, hi int) int { return max(lo, min(v, hi)) }
	p := bufferPlan{
		TunnelBytes: uint64(total / 2),
		RecvMin:     4 << 10, SendMin: 4 << 10,
		RecvMax: clamp(total/32, 256<<10, 4<<20),
		SendMax: clamp(total*3/64, 256<<10, 6<<20),
	}
	p.RecvDefault, p.SendDefault = min(1<<20, p.RecvMax), min(1<<20, p.SendMax)
	return p
}
