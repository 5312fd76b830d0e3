package edge

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanopt/wanopt/dgram/packet"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/ingress"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// Upstream is one of the far edges a near edge with several peers dials:
// an intercepted flow goes to the upstream whose Routes hold its
// destination, the most specific prefix winning, as WireGuard's
// AllowedIPs choose a peer.
type Upstream struct {
	Name string
	Key  crypt.PublicKey
	Addr netip.AddrPort
	// Host is the host name Addr was resolved from; empty when an
	// address was given. While the upstream's tunnel is down the edge
	// looks it up again, as for NearConfig.PeerHost.
	Host   string
	Routes []netip.Prefix
}

// validateUpstreams checks a near edge's upstreams.
func (c NearConfig) validateUpstreams() error {
	names := map[string]bool{}
	keys := map[crypt.PublicKey]string{}
	routes := map[netip.Prefix]string{}
	own := c.PrivateKey.PublicKey()
	for _, u := range c.Upstreams {
		switch {
		case !branchName.MatchString(u.Name):
			return bad("Upstreams", "{Upstreams} %q: a name is 1 to 32 letters, digits, '.', '_' or '-', starting with a letter or digit", u.Name)
		case names[u.Name]:
			return bad("Upstreams", "{Upstreams} %s is given twice", u.Name)
		case u.Key.IsZero() || u.Key == own:
			return bad("Upstreams", "{Upstreams} %s: give the far edge's public key", u.Name)
		case keys[u.Key] != "":
			return bad("Upstreams", "{Upstreams} %s and %s have the same key", keys[u.Key], u.Name)
		case !u.Addr.IsValid() || u.Addr.Port() == 0 || u.Addr.Addr().IsUnspecified():
			return bad("Upstreams", "{Upstreams} %s: want the far edge's ADDR:PORT", u.Name)
		case len(u.Routes) == 0:
			return bad("Upstreams", "{Upstreams} %s carries nothing: give it {Upstreams.Routes} %s:CIDR", u.Name, u.Name)
		}
		for _, p := range u.Routes {
			if o, ok := routes[p.Masked()]; ok {
				return bad("Upstreams.Routes", "{Upstreams.Routes} %v is given to both %s and %s: a destination needs one upstream", p, o, u.Name)
			}
			routes[p.Masked()] = u.Name
		}
		names[u.Name], keys[u.Key] = true, u.Name
	}
	return nil
}

// upstream is a running upstream: its bridge to the tunnel of the
// moment, and how to stop its loop (a reload removing it).
type upstream struct {
	Upstream
	br     *ingress.Dialer
	link   *link     // its tunnel's life
	addr   *peerAddr // where its loop dials it
	cancel context.CancelFunc
	done   chan struct{}
}

// newUpstream returns u of the near edge n, not yet running, at now.
func newUpstream(n *Near, u Upstream, now time.Time) *upstream {
	log := n.log.With("upstream", u.Name)
	return &upstream{Upstream: u, br: ingress.New(nil, log.With("sub", "bridge")), link: newLink(true, u.Addr.String(), now),
		addr: newPeerAddr(u.Addr, u.Host, n.sh.Resolver, log.With("sub", "dns"))}
}

// router is the near edge's flow.Dialer with several upstreams: it hands
// each flow to the bridge of the upstream that routes its destination.
// A reload swaps its list.
type router struct {
	ups        atomic.Pointer[[]*upstream]
	unroutable atomic.Uint64
}

// list returns the upstreams in force.
func (r *router) list() []*upstream {
	if p := r.ups.Load(); p != nil {
		return *p
	}
	return nil
}

// route returns the upstream for dst: the longest prefix holding it.
func (r *router) route(dst netip.Addr) *upstream {
	var best *upstream
	bits := -1
	for _, u := range r.list() {
		for _, p := range u.Routes {
			if p.Contains(dst) && p.Bits() > bits {
				best, bits = u, p.Bits()
			}
		}
	}
	return best
}

// Dial opens a flow to dst through the upstream that routes it; a
// destination no upstream routes is unreachable (the client's SYN goes
// unanswered, as without a route).
func (r *router) Dial(ctx context.Context, src, dst netip.AddrPort) (flow.Conn, error) {
	u := r.route(dst.Addr().Unmap())
	if u == nil {
		r.unroutable.Add(1)
		return nil, fmt.Errorf("no upstream route holds %v: %w", dst.Addr(), flow.ErrUnreachable)
	}
	return u.br.Dial(ctx, src, dst)
}

// upstreams are a near edge's several far edges: the router that hands
// each flow to the bridge of the upstream that routes its destination,
// and the loops that keep their tunnels up.
type upstreams struct {
	n      *Near
	router router
	// Set by keepUp (under n.mu): what the loops share.
	ctx context.Context
	eg  *egress.Egress
	wg  sync.WaitGroup
}

func newUpstreams(n *Near, list []Upstream) *upstreams {
	s := &upstreams{n: n}
	var ups []*upstream
	now := time.Now()
	for _, u := range list {
		ups = append(ups, newUpstream(n, u, now))
	}
	s.router.ups.Store(&ups)
	return s
}

func (s *upstreams) dialer() flow.Dialer { return &s.router }

// route is the tunnel of the upstream whose route holds dst (the longest
// prefix, as for TCP flows).
func (s *upstreams) route(dst netip.Addr) packet.Sender {
	u := s.router.route(dst.Unmap())
	if u == nil {
		return nil
	}
	if t := u.br.Tunnel(); t != nil {
		return t
	}
	return nil
}

func (s *upstreams) peerFor(dst netip.Addr) string {
	if u := s.router.route(dst); u != nil {
		return u.Name
	}
	return ""
}

func (s *upstreams) srtt() time.Duration { return 0 }

func (s *upstreams) bridged() ingress.Stats {
	var b ingress.Stats
	for _, u := range s.router.list() {
		b = b.Add(u.br.Stats())
	}
	return b
}

func (s *upstreams) ready(now time.Time) (bool, string) {
	var down []string
	for _, u := range s.router.list() {
		if !u.link.isUp() {
			down = append(down, "upstream "+u.Name+": "+u.link.downReason(now))
		}
	}
	if len(down) > 0 {
		return false, strings.Join(down, "; ")
	}
	return true, ""
}

// fill sets the status of each upstream.
func (s *upstreams) fill(r *control.Status) {
	var out []control.Peer
	for _, u := range s.router.list() {
		routes := make([]string, len(u.Routes))
		for i, p := range u.Routes {
			routes[i] = p.String()
		}
		slices.Sort(routes)
		p := control.Peer{Name: u.Name, Key: u.Key.Base64(), Routes: routes}
		var keysAge time.Duration
		if t := u.br.Tunnel(); t != nil {
			p.Tunnel = tunnelStatus(t)
			keysAge = p.Tunnel.HandshakeAge
		}
		ts := u.link.snapshot(time.Now(), keysAge)
		ts.Host = u.Host
		p.TunnelState = &ts
		out = append(out, p)
	}
	r.Peers = out
}

// keepUp keeps a tunnel up to every upstream until ctx ends.
func (s *upstreams) keepUp(ctx context.Context, eg *egress.Egress) {
	// Under reloadMu, so that a reload sees every loop started or none.
	s.n.reloadMu.Lock()
	s.n.mu.Lock()
	s.ctx, s.eg = ctx, eg
	s.n.mu.Unlock()
	for _, u := range s.router.list() {
		s.start(u)
	}
	s.n.reloadMu.Unlock()
	<-ctx.Done()
	s.wg.Wait()
}

// running reports whether keepUp runs (Reload then starts and stops
// loops).
func (s *upstreams) running() bool {
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	return s.ctx != nil
}

// start starts u's loop (at Run, or added by a reload).
func (s *upstreams) start(u *upstream) {
	s.n.mu.Lock()
	ctx, eg := s.ctx, s.eg
	s.n.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	u.cancel, u.done = cancel, make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(u.done)
		s.loop(ctx, u, func(ctx context.Context, t *driver.Tunnel) {
			if err := eg.Serve(ctx, t); err != nil && !errors.Is(err, driver.ErrTunnelClosed) {
				s.n.log.Warn("egress stopped", "upstream", u.Name, "err", err)
			}
		})
	}()
}

// loop keeps u's tunnel up until ctx ends, as the one peer's loop does;
// serveEgress serves the flows its peer opens.
func (s *upstreams) loop(ctx context.Context, u *upstream, serveEgress func(context.Context, *driver.Tunnel)) {
	n := s.n
	log := n.log.With("upstream", u.Name)
	open := func(ctx context.Context, addr netip.AddrPort) (*driver.Tunnel, error) {
		// The upstreams share the stream memory evenly.
		dc := driver.Config{RemoteAddr: addr, Logger: log.With("sub", "driver"),
			Tunnel:     n.tunnelConfig(u.Key, n.mem.share(len(n.config().Upstreams)), addr.Addr(), log),
			OnDatagram: n.onAnswer, OnHandshakeSent: u.link.handshakesSent}
		if addr.Addr().Is4() {
			dc.Network = "udp4"
		}
		return driver.Dial(ctx, dc)
	}
	n.keepUp(ctx, log, u.link, u.addr, open, func(ctx context.Context, t *driver.Tunnel) {
		u.br.SetTunnel(t)
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); serveEgress(sctx, t) }()
		select {
		case <-t.Done():
		case <-ctx.Done():
		}
		u.br.SetTunnel(nil)
		cancel()
		<-done
		t.Close()
	})
}

// reload brings a running near edge's upstreams to next's: one removed
// (or whose key or address changed) stops, its tunnel closing and the
// flows through it reset; one added starts at once; the others keep
// their tunnels and flows and take their new routes.
func (s *upstreams) reload(next NearConfig) (changed []string) {
	if !s.running() {
		return nil
	}
	have := map[string]*upstream{}
	for _, u := range s.router.list() {
		have[u.Name] = u
	}
	var list []*upstream
	kept := map[string]bool{}
	for _, nu := range next.Upstreams {
		u, ok := have[nu.Name]
		if ok && u.Key == nu.Key && u.Addr == nu.Addr && u.Host == nu.Host {
			if !slices.Equal(u.Routes, nu.Routes) {
				changed = append(changed, fmt.Sprintf("upstream %s routes: %v", nu.Name, nu.Routes))
			}
			// A copy with the new routes, sharing the running loop.
			list = append(list, &upstream{Upstream: nu, br: u.br, link: u.link, addr: u.addr, cancel: u.cancel, done: u.done})
			kept[nu.Name] = true
			continue
		}
		list = append(list, newUpstream(s.n, nu, time.Now()))
	}
	s.router.ups.Store(&list)
	for name, u := range have {
		if !kept[name] {
			u.cancel()
			<-u.done
			changed = append(changed, "upstream "+name+" removed")
		}
	}
	for _, u := range list {
		if !kept[u.Name] {
			s.start(u)
			changed = append(changed, "upstream "+u.Name+" added")
		}
	}
	return changed
}
