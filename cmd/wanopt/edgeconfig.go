package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/wanopt/wanopt/edge"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// edgeSettings are the edge's settings as 'wanopt run' reads them, before
// it chooses the role they make (roleConfig): what every role shares, and
// what each role adds.
type edgeSettings struct {
	edge.Shared
	PeerKey    crypt.PublicKey
	PeerName   string
	Listen     netip.AddrPort
	Peer       netip.AddrPort
	PeerHost   string
	Upstreams  []edge.Upstream
	Branches   []edge.Branch
	HubRateBps uint64
}

// Role is the edge's end of the tunnel: initiator (--peer or --upstream)
// or responder.
func (s *edgeSettings) Role() string {
	if s.Peer.IsValid() || len(s.Upstreams) > 0 {
		return "initiator"
	}
	return "responder"
}

// roleConfig chooses the role the settings make: a hub with --branch, a
// near edge with --peer or --upstream, a far edge with --listen. What
// cannot go together is refused here, in flags.
func (s *edgeSettings) roleConfig() (edge.Config, error) {
	hub, ups := len(s.Branches) > 0, len(s.Upstreams) > 0
	switch {
	case s.CaptureDir != "" && s.TUN == "":
		return nil, errors.New("--capture records the packets of the TUN device: it needs --tun (the near edge)")
	case !s.Listen.IsValid() && !s.Peer.IsValid() && !ups:
		return nil, errors.New("say which end of the tunnel this edge is: --listen ADDR:PORT (far edge, responder) or --peer ADDR:PORT (near edge, initiator)")
	case s.Listen.IsValid() && s.Peer.IsValid():
		return nil, errors.New("--listen and --peer are exclusive: an edge either accepts the tunnel or opens it")
	case hub && s.Peer.IsValid():
		return nil, errors.New("--branch makes this edge a hub that branches dial: it needs --listen, not --peer")
	case ups && (s.Peer.IsValid() || !s.PeerKey.IsZero()):
		return nil, errors.New("--upstream and --peer/--peer-key are exclusive: name each far edge with --upstream NAME:KEY@ADDR:PORT")
	case ups && (s.Listen.IsValid() || hub):
		return nil, errors.New("--upstream makes this edge dial its peers: it cannot also --listen")
	case s.PrivateKey.IsZero():
		return nil, errors.New("--key FILE is required (make one with 'wanopt keygen --out edge.key')")
	case !hub && !ups && s.PeerKey.IsZero():
		return nil, errors.New("--peer-key BASE64 is required: the peer's public key ('wanopt pubkey < peer.key')")
	case hub && !s.PeerKey.IsZero():
		return nil, errors.New("--peer-key and --branch are exclusive: a hub names each peer with --branch NAME:KEY")
	case s.PeerName != "" && (hub || ups):
		return nil, errors.New("--peer-name names the one peer: a hub's branches and the upstreams are named by --branch NAME:KEY and --upstream NAME:KEY@ADDR:PORT")
	case len(s.NearRules) > 0 && hub:
		return nil, errors.New("--near-rule decides what a near edge does with the flows it intercepts: it needs --tun NAME, without --egress transparent (whose TUN is the far edge's way out) and without --branch")
	case s.HubRateBps > 0 && !hub:
		return nil, errors.New("--hub-rate divides a hub's link among its branches: it needs --branch")
	case hub:
		return edge.HubConfig{Shared: s.Shared, Listen: s.Listen, Branches: s.Branches, HubRateBps: s.HubRateBps}, nil
	case s.Role() == "initiator":
		return edge.NearConfig{Shared: s.Shared, PeerKey: s.PeerKey, PeerName: s.PeerName, Peer: s.Peer, PeerHost: s.PeerHost, Upstreams: s.Upstreams}, nil
	}
	return edge.FarConfig{Shared: s.Shared, PeerKey: s.PeerKey, PeerName: s.PeerName, Listen: s.Listen}, nil
}

// fieldFlags names, for each field of the edge's configuration, the flag
// that sets it: the one table that turns the edge's errors (and a
// refused reload's list of what needs a restart) into the flags the
// operator gave.
var fieldFlags = map[string]string{
	"TUN": "--tun", "TUNSetup": "--tun-setup", "TUNAddrs": "--tun-addr", "TUNRoutes": "--route",
	"MTU": "--mtu", "CaptureDir": "--capture", "NearRules": "--near-rule", "Transparent": "--egress",
	"PrivateKey": "--key", "PeerKey": "--peer-key", "PeerName": "--peer-name",
	"Listen": "--listen", "Peer": "--peer", "PeerHost": "--peer",
	"CC": "--cc", "PeerTimeout": "--peer-timeout", "WANRateBps": "--wan-rate", "TunnelMTU": "--tunnel-mtu",
	"Policy": "--allow", "DialTimeout": "--dial-timeout", "MaxFlows": "--max-flows",
	"FlowIdleTimeout": "--flow-idle-timeout", "MemoryMiB": "--memory-mib",
	"Control": "--control", "Metrics": "--metrics",
	"Branches": "--branch", "HubRateBps": "--hub-rate",
	"Upstreams": "--upstream", "Upstreams.Routes": "--upstream-route",
}

// flagOf is the flag that sets field (the field itself if none does).
func flagOf(field string) string {
	if f, ok := fieldFlags[field]; ok {
		return f
	}
	return field
}

// inFlags is err in the operator's words: the edge's fields named by
// their flags.
func inFlags(err error) error {
	var fe *edge.FieldError
	if err == nil || !errors.As(err, &fe) {
		return err
	}
	return flagError{fe.Render(flagOf), err}
}

// flagError is an edge's error in flags, wrapping the edge's own.
type flagError struct {
	msg string
	err error
}

func (e flagError) Error() string { return e.msg }
func (e flagError) Unwrap() error { return e.err }

// runningEdge is what 'wanopt run' holds of the edge it runs, whichever
// its role.
type runningEdge interface {
	Run(ctx context.Context) error
	Reload() (changed []string, err error)
	Status() control.Status
	Flows() []control.Flow
	Ready() (bool, string)
	Serving() bool
	Summary() string
	Role() string
	Memory() edge.MemoryPlan
}

// newEdge builds the edge cfg configures, with the constructor of its
// role.
func newEdge(cfg edge.Config) (runningEdge, error) {
	var e runningEdge
	var err error
	switch c := cfg.(type) {
	case edge.NearConfig:
		e, err = edge.NewNear(c)
	case edge.FarConfig:
		e, err = edge.NewFar(c)
	case edge.HubConfig:
		e, err = edge.NewHub(c)
	default:
		return nil, fmt.Errorf("no edge has a configuration of type %T", cfg)
	}
	if err != nil {
		return nil, inFlags(err)
	}
	return e, nil
}
