package edge

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/wanopt/wanopt/dgram/packet"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/ingress"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// Near is a near edge: the initiator, which dials one far edge or, with
// upstreams, several, and carries the flows it intercepts on its TUN to
// them. It also connects the flows its peers open, under its policy.
// Status and Flows may be called at any time, also concurrently with Run.
type Near struct {
	endpoint
	cfg NearConfig // in force (under mu; Reload changes it)
	// peers are the far edges it dials: one peer, or the upstreams.
	peers nearPeers
}

// nearPeers are the far edges a near edge dials: onePeer, or upstreams.
type nearPeers interface {
	// dialer carries the intercepted flows.
	dialer() flow.Dialer
	// route is the tunnel carrying datagrams toward dst (nil while it is
	// down or when no route holds dst).
	route(dst netip.Addr) packet.Sender
	// keepUp keeps the tunnels up until ctx ends, eg serving the flows
	// the peers open.
	keepUp(ctx context.Context, eg *egress.Egress)
	// fill sets the peers' part of a status.
	fill(r *control.Status)
	ready(now time.Time) (bool, string)
	// peerFor names the upstream dst goes to ("" with one peer).
	peerFor(dst netip.Addr) string
	// srtt is the one peer's tunnel's round trip (0 with upstreams).
	srtt() time.Duration
	// bridged counts what the intercepted flows met.
	bridged() ingress.Stats
	// reload applies next's peers and says what changed.
	reload(next NearConfig) []string
}

// NewNear checks cfg and returns a near edge ready to Run. It opens
// nothing yet. Errors are FieldErrors.
func NewNear(cfg NearConfig) (*Near, error) {
	cfg = cfg.defaulted().(NearConfig)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Near{cfg: cfg}
	n.init(cfg.Shared, func(m MemoryPlan) string { return n.config().summary(m) })
	if len(cfg.Upstreams) > 0 {
		n.peers = newUpstreams(n, cfg.Upstreams)
	} else {
		n.peers = newOnePeer(n, cfg)
	}
	if cfg.intercepts() {
		n.near = n.newNear(n.peers.route)
	}
	return n, nil
}

// config is the configuration in force.
func (n *Near) config() NearConfig { return inForce(&n.mu, &n.cfg) }

// Role is the edge's end of the tunnel: "initiator".
func (n *Near) Role() string { return "initiator" }

// Run runs the edge until ctx ends, then resets the flows still open,
// closes the tunnels and the device, and returns nil. Errors are setup
// failures (the TUN device, the control socket); a tunnel that cannot
// reach its peer is retried, not an error. Run may be called once.
func (n *Near) Run(ctx context.Context) error {
	defer n.begin(ctx)()
	if p, ok := n.peers.(*onePeer); ok {
		p.link.wentDownAt(time.Now(), nil) // the wait starts now, not at NewNear
	}
	return n.run(ctx, n, n.Ready, n.peers.dialer(), func() egress.Policy { return n.cfg.Policy }, n.peers.keepUp, n.peers.bridged)
}

// Dial opens a flow from src to dst through the tunnel, as if the ingress
// had intercepted it: the peer's egress connects dst (if its policy allows)
// and the returned Conn carries the flow. Errors wrap flow.ErrRefused,
// flow.ErrNotAllowed, flow.ErrUnreachable (also while no tunnel is up) or
// flow.ErrTimeout.
func (n *Near) Dial(ctx context.Context, src, dst netip.AddrPort) (flow.Conn, error) {
	return n.peers.dialer().Dial(ctx, src, dst)
}

// Status reports the edge's tunnels and counters (the control socket's
// "status").
func (n *Near) Status() control.Status {
	r := n.status(n.Role())
	n.peers.fill(&r)
	return r
}

// Flows lists the flows through the edge now (the control socket's
// "flows"): those intercepted here, then those connected here.
func (n *Near) Flows() []control.Flow { return n.flows(n.peers.peerFor, n.peers.srtt()) }

// Ready reports whether the edge carries flows now, and if not, why, in
// one line for an operator ("tunnel to 192.0.2.2:4500 down since 12s: no
// answer to 3 handshakes"). It is what a health check (/readyz) and the
// service manager's readiness wait for:
//
//   - the edge runs (Run has started and not yet stopped);
//   - its tunnel is up: the one peer's; with several upstreams, every
//     upstream's (a flow to a down upstream's routes fails, so the edge
//     is not whole); on a hub, at least one branch's (Hub.Ready);
//   - with a TUN, the ingress is open and accepts flows (not shut down).
//     The memory budget turning flows away is not counted: that passes
//     with the load.
func (n *Near) Ready() (ready bool, reason string) {
	if why := n.notReady(); why != "" {
		return false, why
	}
	return n.peers.ready(time.Now())
}

// Reload reads the configuration again (Shared.Reload) and applies it:
// the egress policy, the near rules and the upstreams change for the
// flows opened from then on, and flows already open go on. A
// configuration that does not validate, or that changes a setting only a
// restart can change (keys, addresses, the TUN, the memory budget), is
// refused with the reason, and the running configuration stays. It
// returns what changed.
func (n *Near) Reload() (changed []string, err error) {
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	cur := n.config()
	next, err := readAgain(&n.base, cur, func(next NearConfig) NearConfig { return keepResolved(cur, next) }, func(next NearConfig) []string {
		if (len(cur.Upstreams) > 0) != (len(next.Upstreams) > 0) {
			return []string{n.sh.FieldName("Upstreams") + " (several upstreams and a single peer are not the same)"}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	changed = n.reloadEndpoint(cur.Shared, next.Shared)
	n.mu.Lock()
	n.cfg.Policy, n.cfg.NearRules, n.cfg.Upstreams = next.Policy, next.NearRules, next.Upstreams
	n.mu.Unlock()
	changed = append(changed, n.peers.reload(next)...)
	n.logReloaded(changed)
	return changed, nil
}

// onePeer is a near edge's one far edge, dialled at addr.
type onePeer struct {
	peerLink
	n    *Near
	addr *peerAddr
	host string
}

func newOnePeer(n *Near, cfg NearConfig) *onePeer {
	return &onePeer{n: n, host: cfg.PeerHost,
		peerLink: peerLink{key: cfg.PeerKey, name: cfg.PeerName, br: ingress.New(nil, cfg.Logger.With("sub", "bridge")), link: newLink(true, cfg.Peer.String(), time.Now())},
		addr:     newPeerAddr(cfg.Peer, cfg.PeerHost, cfg.Resolver, cfg.Logger.With("sub", "dns"))}
}

func (p *onePeer) dialer() flow.Dialer             { return p.br }
func (p *onePeer) route(netip.Addr) packet.Sender  { return p.sender() }
func (p *onePeer) fill(r *control.Status)          { p.peerLink.fill(r, p.host) }
func (p *onePeer) peerFor(netip.Addr) string       { return "" }
func (p *onePeer) bridged() ingress.Stats          { return p.br.Stats() }
func (p *onePeer) reload(next NearConfig) []string { return nil }
func (p *onePeer) srtt() time.Duration             { return p.peerLink.srtt() }
func (p *onePeer) ready(now time.Time) (bool, string) {
	if p.link.isUp() {
		return true, ""
	}
	return false, p.link.downReason(now)
}

func (p *onePeer) keepUp(ctx context.Context, eg *egress.Egress) {
	n := p.n
	n.keepUp(ctx, n.log, p.link, p.addr, p.dial, func(ctx context.Context, t *driver.Tunnel) { n.serve(ctx, t, eg, p.br) })
}

// dial opens the tunnel to the peer at addr.
func (p *onePeer) dial(ctx context.Context, addr netip.AddrPort) (*driver.Tunnel, error) {
	n := p.n
	dc := driver.Config{
		Tunnel:          n.tunnelConfig(p.key, n.mem.TunnelBytes, addr.Addr(), n.log),
		Logger:          n.log.With("sub", "driver"),
		OnDatagram:      n.onDatagram,
		RemoteAddr:      addr,
		OnHandshakeSent: p.link.handshakesSent,
	}
	if err := n.bind(&dc); err != nil {
		return nil, err
	}
	if addr.Addr().Is4() {
		dc.Network = "udp4"
	}
	t, err := driver.Dial(ctx, dc)
	if err != nil {
		return nil, fmt.Errorf("dial the peer at %v: %w", addr, err)
	}
	return t, nil
}

// keepResolved returns next with the running addresses of the peer and
// the upstreams whose host name and port it keeps: reading the
// configuration again looks the names up again, and a new answer is no
// new configuration (the loop that dials a peer follows its name while
// the tunnel is down; a reload must neither be refused for it nor
// restart a tunnel).
func keepResolved(cur, next NearConfig) NearConfig {
	same := func(host string, addr netip.AddrPort, nhost string, naddr netip.AddrPort) bool {
		return host != "" && host == nhost && addr.Port() == naddr.Port()
	}
	if same(cur.PeerHost, cur.Peer, next.PeerHost, next.Peer) {
		next.Peer = cur.Peer
	}
	running := map[string]Upstream{}
	for _, u := range cur.Upstreams {
		running[u.Name] = u
	}
	next.Upstreams = slices.Clone(next.Upstreams)
	for i, nu := range next.Upstreams {
		if u, ok := running[nu.Name]; ok && same(u.Host, u.Addr, nu.Host, nu.Addr) {
			next.Upstreams[i].Addr = u.Addr
		}
	}
	return next
}
