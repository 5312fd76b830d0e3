package edge

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/ingress"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// Upstream is one of the far edges a near edge with several peers dials
// (--upstream NAME:KEY@ADDR:PORT): an intercepted flow goes to the
// upstream whose Routes hold its destination, the most specific prefix
// winning (--upstream-route NAME:CIDR), as WireGuard's AllowedIPs choose
// a peer.
type Upstream struct {
	Name string
	Key  crypt.PublicKey
	Addr netip.AddrPort
	// Host is the host name Addr was resolved from (--upstream
	// NAME:KEY@HOST:PORT); empty when an address was given. While the
	// upstream's tunnel is down the edge looks it up again, as for
	// Config.PeerHost.
	Host   string
	Routes []netip.Prefix
}

// validateUpstreams checks a near edge's upstreams.
func (c Config) validateUpstreams() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	switch {
	case c.Peer.IsValid() || !c.PeerKey.IsZero():
		return bad("--upstream and --peer/--peer-key are exclusive: name each far edge with --upstream NAME:KEY@ADDR:PORT")
	case c.Listen.IsValid() || len(c.Branches) > 0:
		return bad("--upstream makes this edge dial its peers: it cannot also --listen")
	}
	names := map[string]bool{}
	keys := map[crypt.PublicKey]string{}
	routes := map[netip.Prefix]string{}
	own := c.PrivateKey.PublicKey()
	for _, u := range c.Upstreams {
		switch {
		case !branchName.MatchString(u.Name):
			return bad("--upstream %q: a name is 1 to 32 letters, digits, '.', '_' or '-', starting with a letter or digit", u.Name)
		case names[u.Name]:
			return bad("--upstream %s is given twice", u.Name)
		case u.Key.IsZero() || u.Key == own:
			return bad("--upstream %s: give the far edge's public key", u.Name)
		case keys[u.Key] != "":
			return bad("--upstream %s and %s have the same key", keys[u.Key], u.Name)
		case !u.Addr.IsValid() || u.Addr.Port() == 0 || u.Addr.Addr().IsUnspecified():
			return bad("--upstream %s: want the far edge's ADDR:PORT", u.Name)
		case len(u.Routes) == 0:
			return bad("--upstream %s carries nothing: give it --upstream-route %s:CIDR", u.Name, u.Name)
		}
		for _, p := range u.Routes {
			if o, ok := routes[p.Masked()]; ok {
				return bad("--upstream-route %v is given to both %s and %s: a destination needs one upstream", p, o, u.Name)
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

// newUpstream returns u of an edge configured by cfg, not yet running,
// at now.
func newUpstream(u Upstream, cfg Config, now time.Time) *upstream {
	log := cfg.Logger.With("upstream", u.Name)
	return &upstream{Upstream: u, br: ingress.New(nil, log.With("sub", "bridge")), link: newLink(true, u.Addr.String(), now),
		addr: newPeerAddr(u.Addr, u.Host, cfg.Resolver, log.With("sub", "dns"))}
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
		return nil, fmt.Errorf("no --upstream-route holds %v: %w", dst.Addr(), flow.ErrUnreachable)
	}
	return u.br.Dial(ctx, src, dst)
}

// upstreamLoop keeps u's tunnel up until ctx ends, as tunnelLoop does for
// the one peer; serveEgress serves the flows its peer opens.
func (e *Edge) upstreamLoop(ctx context.Context, cfg Config, u *upstream, serveEgress func(context.Context, *driver.Tunnel)) {
	log := e.log.With("upstream", u.Name)
	open := func(ctx context.Context, addr netip.AddrPort) (*driver.Tunnel, error) {
		// The upstreams share the stream memory evenly.
		dc := driver.Config{RemoteAddr: addr, Logger: log.With("sub", "driver"),
			Tunnel:     e.tunnelConfig(cfg, u.Key, cfg.buffers().TunnelBytes/uint64(len(cfg.Upstreams)), log),
			OnDatagram: e.onUpstreamDatagram, OnHandshakeSent: u.link.handshakesSent}
		dc.Tunnel.MaxUDPPayloadBytes = tunnel.MaxUDPPayloadBytesForMTU(addr.Addr(), cfg.withDefaults().TunnelMTU) // IPv6's headers are larger
		if addr.Addr().Is4() {
			dc.Network = "udp4"
		}
		return driver.Dial(ctx, dc)
	}
	e.keepUp(ctx, log, u.link, u.addr, open, func(ctx context.Context, t *driver.Tunnel) {
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

// upstreamStatus is the status of each upstream.
func (e *Edge) upstreamStatus() []control.Peer {
	var out []control.Peer
	if e.router == nil {
		return nil
	}
	for _, u := range e.router.list() {
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
	return out
}

// upRun is what a near edge's upstream loops share.
type upRun struct {
	ctx context.Context
	cfg Config
	eg  *egress.Egress
	wg  sync.WaitGroup
}

// startUpstream starts u's loop (at Run, or added by a reload).
func (e *Edge) startUpstream(r *upRun, u *upstream) {
	ctx, cancel := context.WithCancel(r.ctx)
	u.cancel, u.done = cancel, make(chan struct{})
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(u.done)
		e.upstreamLoop(ctx, r.cfg, u, func(ctx context.Context, t *driver.Tunnel) {
			if err := r.eg.Serve(ctx, t); err != nil && !errors.Is(err, driver.ErrTunnelClosed) {
				e.log.Warn("egress stopped", "upstream", u.Name, "err", err)
			}
		})
	}()
}

// runUpstreams keeps a tunnel up to every upstream until ctx ends.
func (e *Edge) runUpstreams(ctx context.Context, cfg Config, eg *egress.Egress) {
	r := &upRun{ctx: ctx, cfg: cfg, eg: eg}
	e.mu.Lock()
	e.upRun = r
	e.mu.Unlock()
	for _, u := range e.router.list() {
		e.startUpstream(r, u)
	}
	<-ctx.Done()
	r.wg.Wait()
}

// reloadUpstreams brings a running near edge's upstreams to next's: one
// removed (or whose key or address changed) stops, its tunnel closing and
// the flows through it reset; one added starts at once; the others keep
// their tunnels and flows and take their new routes.
func (e *Edge) reloadUpstreams(next Config) (changed []string) {
	e.mu.Lock()
	r := e.upRun
	e.mu.Unlock()
	if r == nil {
		return nil
	}
	have := map[string]*upstream{}
	for _, u := range e.router.list() {
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
		list = append(list, newUpstream(nu, e.config(), time.Now()))
	}
	e.router.ups.Store(&list)
	for name, u := range have {
		if !kept[name] {
			u.cancel()
			<-u.done
			changed = append(changed, "upstream "+name+" removed")
		}
	}
	for _, u := range list {
		if !kept[u.Name] {
			e.startUpstream(r, u)
			changed = append(changed, "upstream "+u.Name+" added")
		}
	}
	return changed
}
