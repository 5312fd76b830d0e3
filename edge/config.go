package edge

import (
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

// Config is the configuration of one of the edge's roles: NearConfig
// (NewNear), FarConfig (NewFar) or HubConfig (NewHub). Shared.Reload
// returns one.
type Config interface {
	shared() Shared
	// validate checks the configuration, defaults filled in.
	validate() error
	// defaulted is the configuration with the zero fields that have a
	// default filled in.
	defaulted() Config
	// summary describes the configuration in one line (no secrets).
	summary(MemoryPlan) string
}

// Shared is what every role is configured with; each role's
// configuration embeds it. The zero value of a field with a default
// takes it (see Defaults). Errors name the fields (FieldError).
type Shared struct {
	// PrivateKey is this edge's key.
	PrivateKey crypt.PrivateKey
	// CC is the tunnels' congestion control.
	CC tunnel.CongestionControl
	// PeerTimeout ends a tunnel, and with it every flow, after this long
	// without a word from its peer.
	PeerTimeout time.Duration
	// WANRateBps is the WAN's bottleneck rate if the operator knows it;
	// 0: the tunnel probes it.
	WANRateBps uint64
	// TunnelMTU is the largest IP packet the tunnel's path MTU discovery
	// searches up to: the tunnel's packets never exceed it, and are
	// smaller when the path carries less. 0: 1500.
	TunnelMTU int
	// Bind, if set, opens the UDP socket of each tunnel instead of a socket
	// on the listen address or toward the peer: tests run an edge pair
	// over an in-memory bindtest pair. The tunnel owns and closes what it
	// returns.
	Bind func() (bind.Conn, error)
	// Resolver looks the peers' host names up again; nil: the system's
	// resolver (net.DefaultResolver, IPv4 and IPv6).
	Resolver Resolver

	// Policy is the egress policy; with no rules the edge connects
	// nothing and refuses every flow its peer opens (a hub's branches add
	// their own rules).
	Policy      egress.Policy
	DialTimeout time.Duration
	// MaxFlows caps the flows open at once; the memory budget may hold
	// fewer (MemoryPlan.FlowLimit).
	MaxFlows int
	// FlowIdleTimeout resets a flow (at this edge's stack or egress) that
	// moved no byte for this long (DefaultFlowIdleTimeout if 0; negative:
	// never).
	FlowIdleTimeout time.Duration
	// MemoryMiB is the memory budget for flow buffers (see PlanMemory).
	MemoryMiB int

	// LAN is the TUN device, if any.
	LAN

	// Control is the unix socket 'wanopt status' and 'wanopt flows' query;
	// empty: none.
	Control string
	// Metrics is the TCP address serving Prometheus metrics at /metrics
	// (see edge/metrics); empty: none.
	Metrics string
	// Logger receives the edge's events (never keys); nil discards them.
	Logger *slog.Logger
	// Reload, if set, reads the configuration again for Reload (wanopt
	// run: the config file and the command line); nil: the edge cannot
	// reload.
	Reload func() (Config, error)
	// FieldName names a field in what the edge tells its operator over
	// the control socket (a refused reload): cmd/wanopt gives its flags.
	// nil: the field's own name.
	FieldName func(field string) string
}

// LAN is the edge's TUN device: a near edge intercepts the flows routed
// into it; with Transparent, a far edge or a hub connects its servers
// through it instead.
type LAN struct {
	// TUN is the device's name; empty: none.
	TUN string
	// TUNSetup creates the device if needed and sets its addresses, MTU,
	// transmit queue and routes (needs CAP_NET_ADMIN).
	TUNSetup  bool
	TUNAddrs  []netip.Prefix
	TUNRoutes []netip.Prefix
	// MTU of the device; 0: keep the device's (attach) or tun.DefaultMTU
	// (setup).
	MTU int
	// CaptureDir receives a pcap of the TUN's packets; empty: none.
	CaptureDir string
	// NearRules are the near edge's policy (first match winning): which
	// intercepted flows are optimised (terminated, TCP only), passed
	// unterminated as datagrams, or dropped. None: TCP optimised, the
	// rest passed. Passing TCP needs a far edge with transparent egress.
	NearRules ingress.Rules
	// Transparent connects flows from the client's address through the
	// TUN's stack, and sends the clients' UDP, pings and passed TCP out
	// of the TUN, instead of kernel sockets.
	Transparent bool
}

// intercepts reports whether the edge intercepts the flows routed into
// its TUN (and so has a near side for their datagrams).
func (l LAN) intercepts() bool { return l.TUN != "" && !l.Transparent }

// NearConfig is a near edge's: the initiator, which dials one far edge
// (Peer, PeerKey) or several (Upstreams).
type NearConfig struct {
	Shared
	// PeerKey is the far edge's public key, PeerName its name in metrics
	// and logs (DefaultPeerName if empty); neither with Upstreams.
	PeerKey  crypt.PublicKey
	PeerName string
	// Peer is the far edge's address.
	Peer netip.AddrPort
	// PeerHost is the host name Peer was resolved from; empty when an
	// address was given. While the tunnel is down the edge looks it up
	// again (every 30 s, from 30 s on) and dials the new address if it
	// changed.
	PeerHost string
	// Upstreams, if any, are the far edges the near edge dials instead of
	// Peer and PeerKey; a flow goes to the one whose routes hold its
	// destination.
	Upstreams []Upstream
}

// FarConfig is a far edge's: the responder, which accepts the tunnel of
// one near edge (PeerKey) on Listen.
type FarConfig struct {
	Shared
	PeerKey  crypt.PublicKey
	PeerName string
	Listen   netip.AddrPort
}

// HubConfig is a hub's: a far edge that serves several near edges, its
// branches, on one Listen socket.
type HubConfig struct {
	Shared
	Listen netip.AddrPort
	// Branches are the near edges the hub serves; each branch's flows may
	// reach Policy's rules and its own.
	Branches []Branch
	// HubRateBps is the rate of the link the branches share: the hub caps
	// each branch's tunnel at its max-min fair share of it (package
	// share). 0: each tunnel's controller alone.
	HubRateBps uint64
}

// Defaults, and the limits the constructors enforce.
const (
	// DefaultFlowIdleTimeout ends flows nobody used for a day: longer than
	// any idle SSH session or database pool connection lives unattended
	// (firewalls commonly allow one hour, Linux conntrack five days), and
	// a flow waiting on a receiver or a WAN outage is not idle.
	DefaultFlowIdleTimeout = 24 * time.Hour
	// MaxTunnelMTU is the largest TunnelMTU: a 9,000-byte jumbo frame and
	// some room.
	MaxTunnelMTU = 9216
	// MinPeerTimeout keeps a few keepalives (every 10 s, or a third of
	// the timeout) inside PeerTimeout.
	MinPeerTimeout = 5 * time.Second
)

// DefaultPeerName is the one peer's name when PeerName is empty.
const DefaultPeerName = "peer"

func peerName(name string) string {
	if name == "" {
		return DefaultPeerName
	}
	return name
}

func (c NearConfig) shared() Shared { return c.Shared }
func (c FarConfig) shared() Shared  { return c.Shared }
func (c HubConfig) shared() Shared  { return c.Shared }

func (c NearConfig) defaulted() Config { c.Shared = c.Shared.withDefaults(); return c }
func (c FarConfig) defaulted() Config  { c.Shared = c.Shared.withDefaults(); return c }
func (c HubConfig) defaulted() Config  { c.Shared = c.Shared.withDefaults(); return c }

// withDefaults fills in the zero fields that have a default.
func (c Shared) withDefaults() Shared {
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
	if c.FieldName == nil {
		c.FieldName = fieldName
	}
	return c
}

// validate checks what every role shares.
func (c Shared) validate() error {
	switch {
	case c.CaptureDir != "" && c.TUN == "":
		return bad("CaptureDir", "{CaptureDir} records the packets of the TUN device: it needs {TUN NAME} (the near edge)")
	case c.PrivateKey.IsZero():
		return bad("PrivateKey", "{PrivateKey} is required: this edge's private key")
	case len(c.NearRules) > 0 && (c.TUN == "" || c.Transparent):
		return bad("NearRules", "{NearRules} decides what a near edge does with the flows it intercepts: it needs {TUN NAME}, without {Transparent transparent} (whose TUN is the far edge's way out)")
	case c.Transparent && c.TUN == "":
		return bad("Transparent", "{Transparent transparent} connects servers through the TUN device's stack: it needs {TUN NAME}, with the clients' networks routed into the device ({TUNRoutes CIDR})")
	case len(c.TUN) > 15:
		return bad("TUN", "{TUN} %q: interface names have at most 15 bytes", c.TUN)
	case len(c.TUNAddrs) > 0 && !c.TUNSetup:
		return bad("TUNAddrs", "{TUNAddrs} and {TUNRoutes} need {TUNSetup}")
	case len(c.TUNRoutes) > 0 && !c.TUNSetup:
		return bad("TUNRoutes", "{TUNRoutes} needs {TUNSetup}")
	case c.TUNSetup && c.TUN == "":
		return bad("TUNSetup", "{TUNSetup} needs {TUN NAME}")
	case c.MTU != 0 && (c.MTU < 1280 || c.MTU > 65535):
		return bad("MTU", "{MTU} %d: want 1280 to 65535", c.MTU)
	case c.TunnelMTU < 1280 || c.TunnelMTU > MaxTunnelMTU:
		return bad("TunnelMTU", "{TunnelMTU} %d: want 1280 (the IPv6 minimum, which every path carries) to %d", c.TunnelMTU, MaxTunnelMTU)
	case c.DialTimeout < 0:
		return bad("DialTimeout", "{DialTimeout} %v: must be positive", c.DialTimeout)
	case c.MaxFlows < 0:
		return bad("MaxFlows", "{MaxFlows} %d: must be positive", c.MaxFlows)
	case c.PeerTimeout < MinPeerTimeout:
		return bad("PeerTimeout", "{PeerTimeout} %v: want at least %v (keepalives go every 10 s)", c.PeerTimeout, MinPeerTimeout)
	case c.MemoryMiB < MinMemoryMiB || c.MemoryMiB > MaxMemoryMiB:
		return bad("MemoryMiB", "{MemoryMiB} %d: want %d to %d", c.MemoryMiB, MinMemoryMiB, MaxMemoryMiB)
	case c.CC != tunnel.CCBBR && c.CC != tunnel.CCCubic:
		return bad("CC", "{CC} %q: want bbr or cubic", c.CC)
	}
	return nil
}

// validatePeer checks the one peer of a near or far edge.
func (c Shared) validatePeer(key crypt.PublicKey, name string) error {
	switch {
	case key.IsZero():
		return bad("PeerKey", "{PeerKey} is required: the peer's public key ('wanopt pubkey < peer.key')")
	case key == c.PrivateKey.PublicKey():
		return bad("PeerKey", "{PeerKey} is this edge's own public key; give the other edge's")
	case name != "" && !branchName.MatchString(name):
		return bad("PeerName", "{PeerName} %q: a name is 1 to 32 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// validateWork refuses an edge that would neither intercept nor connect.
func (c Shared) validateWork() error {
	if c.TUN == "" && len(c.Policy.Rules) == 0 {
		return bad("TUN", "this edge would do nothing: give {TUN NAME} to intercept flows (near edge) and/or {Policy CIDR[:PORTS]} to connect them (far edge)")
	}
	return nil
}

func (c NearConfig) validate() error {
	if err := c.Shared.validate(); err != nil {
		return err
	}
	if err := c.validateWork(); err != nil {
		return err
	}
	if len(c.Upstreams) > 0 {
		switch {
		case c.Peer.IsValid() || !c.PeerKey.IsZero():
			return bad("Upstreams", "{Upstreams} and {Peer}/{PeerKey} are exclusive: name each far edge as an upstream")
		case c.PeerName != "":
			return bad("PeerName", "{PeerName} names the one peer: the upstreams are named by their own names")
		}
		return c.validateUpstreams()
	}
	switch {
	case c.PeerHost != "" && !c.Peer.IsValid():
		return bad("PeerHost", "{PeerHost} %q needs {Peer}, the address it resolved to", c.PeerHost)
	case !c.Peer.IsValid():
		return bad("Peer", "{Peer} is required: the far edge's ADDR:PORT (or give upstreams)")
	case c.Peer.Port() == 0 || c.Peer.Addr().IsUnspecified():
		return bad("Peer", "{Peer} %v: want the far edge's ADDR:PORT, e.g. 198.18.0.2:4500", c.Peer)
	}
	return c.validatePeer(c.PeerKey, c.PeerName)
}

func (c FarConfig) validate() error {
	if err := c.Shared.validate(); err != nil {
		return err
	}
	if !c.Listen.IsValid() {
		return bad("Listen", "{Listen} is required: the ADDR:PORT the far edge accepts the tunnel on")
	}
	if err := c.validatePeer(c.PeerKey, c.PeerName); err != nil {
		return err
	}
	return c.validateWork()
}

func (c NearConfig) summary(m MemoryPlan) string {
	s := "initiator"
	if len(c.Upstreams) > 0 {
		var ups []string
		for _, u := range c.Upstreams {
			ups = append(ups, fmt.Sprintf("%s at %s", u.Name, hostAddr(u.Host, u.Addr)))
		}
		s += " to upstreams " + strings.Join(ups, ", ") + ", public key " + c.PrivateKey.PublicKey().Base64()
	} else {
		s += " to " + hostAddr(c.PeerHost, c.Peer) + ", public key " + c.PrivateKey.PublicKey().Base64() + ", peer " + c.PeerKey.Base64()
	}
	return s + c.Shared.summary(m)
}

func (c FarConfig) summary(m MemoryPlan) string {
	return "responder on " + c.Listen.String() + ", public key " + c.PrivateKey.PublicKey().Base64() + ", peer " + c.PeerKey.Base64() + c.Shared.summary(m)
}

// summary is the tail of a near or far edge's summary.
func (c Shared) summary(m MemoryPlan) string {
	s := fmt.Sprintf(", cc %v, memory %d MiB (%d flows)", c.CC, c.MemoryMiB, m.FlowLimit)
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

// Check reports what NewNear, NewFar or NewHub would refuse in c (a
// FieldError), or nil: a command checks its configuration before it runs
// an edge.
func Check(c Config) error { return c.defaulted().validate() }
