package edge

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/wanopt/wanopt/dgram/packet"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/ingress"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// Far is a far edge: the responder, which accepts one near edge's tunnel
// on its listen address and connects the flows its policy allows, from
// kernel sockets or, with transparent egress, through its TUN. It may
// also intercept on a TUN of its own, as a near edge does. Status and
// Flows may be called at any time, also concurrently with Run.
type Far struct {
	endpoint
	cfg  FarConfig // in force (under mu; Reload changes it)
	peer peerLink
	// refusals counts and logs the initiations the edge refused, over the
	// process's life.
	refusals *driver.Refusals
}

// NewFar checks cfg and returns a far edge ready to Run. It opens
// nothing yet. Errors are FieldErrors.
func NewFar(cfg FarConfig) (*Far, error) {
	cfg = cfg.defaulted().(FarConfig)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	f := &Far{cfg: cfg, refusals: driver.NewRefusals(cfg.Logger.With("sub", "handshake"))}
	f.init(cfg.Shared, func(m MemoryPlan) string { return f.config().summary(m) })
	f.peer = peerLink{key: cfg.PeerKey, name: cfg.PeerName, br: ingress.New(nil, cfg.Logger.With("sub", "bridge")), link: newLink(false, "", time.Now())}
	if cfg.intercepts() {
		f.near = f.newNear(func(netip.Addr) packet.Sender { return f.peer.sender() })
	}
	return f, nil
}

// config is the configuration in force.
func (f *Far) config() FarConfig { return inForce(&f.mu, &f.cfg) }

// Role is the edge's end of the tunnel: "responder".
func (f *Far) Role() string { return "responder" }

// Run runs the edge until ctx ends, then resets the flows still open,
// closes the tunnel and the device, and returns nil. Errors are setup
// failures (the TUN device, the control socket); a peer that does not
// come is waited for, not an error. Run may be called once.
func (f *Far) Run(ctx context.Context) error {
	defer f.begin(ctx)()
	f.peer.link.wentDownAt(time.Now(), nil) // the wait starts now, not at NewFar
	return f.run(ctx, f, f.Ready, f.peer.br, func() egress.Policy { return f.cfg.Policy }, func(ctx context.Context, eg *egress.Egress) {
		f.keepUp(ctx, f.log, f.peer.link, nil, f.listen, func(ctx context.Context, t *driver.Tunnel) { f.serve(ctx, t, eg, f.peer.br) })
	}, f.peer.br.Stats)
}

// listen waits for the peer's tunnel.
func (f *Far) listen(ctx context.Context, _ netip.AddrPort) (*driver.Tunnel, error) {
	listen := f.config().Listen
	dc := driver.Config{
		Tunnel:     f.tunnelConfig(f.peer.key, f.mem.TunnelBytes, listen.Addr(), f.log),
		Logger:     f.log.With("sub", "driver"),
		OnDatagram: f.onDatagram,
		Refusals:   f.refusals,
		LocalAddr:  listen,
	}
	if err := f.bind(&dc); err != nil {
		return nil, err
	}
	if listen.Addr().Is4() {
		dc.Network = "udp4"
	}
	f.log.Info("waiting for the peer", "listen", listen)
	t, err := driver.Listen(ctx, dc)
	if err != nil {
		return nil, fmt.Errorf("listen for the peer on %v: %w", listen, err)
	}
	return t, nil
}

// Dial opens a flow from src to dst through the tunnel, as if the ingress
// had intercepted it (see Near.Dial).
func (f *Far) Dial(ctx context.Context, src, dst netip.AddrPort) (flow.Conn, error) {
	return f.peer.br.Dial(ctx, src, dst)
}

// Status reports the edge's tunnel and counters (the control socket's
// "status").
func (f *Far) Status() control.Status {
	r := f.status(f.Role())
	f.peer.fill(&r, "")
	r.Refused = refusedStatus(f.refusals.Stats())
	return r
}

// Flows lists the flows through the edge now (the control socket's
// "flows"): those intercepted here, then those connected here.
func (f *Far) Flows() []control.Flow { return f.flows(noPeer, f.peer.srtt()) }

// Ready reports whether the edge carries flows now, and if not, why (see
// Near.Ready). A far edge whose peer has not handshaken yet is not
// ready: "no tunnel up".
func (f *Far) Ready() (ready bool, reason string) {
	if why := f.notReady(); why != "" {
		return false, why
	}
	if f.peer.link.isUp() {
		return true, ""
	}
	return false, "no tunnel up: " + f.peer.link.downReason(time.Now()) + refusedReason(f.refusals)
}

// Reload reads the configuration again (Shared.Reload) and applies it:
// the egress policy and the near rules change for the flows opened from
// then on, and flows already open go on. A configuration that does not
// validate, or that changes a setting only a restart can change, is
// refused with the reason, and the running configuration stays. It
// returns what changed.
func (f *Far) Reload() (changed []string, err error) {
	f.reloadMu.Lock()
	defer f.reloadMu.Unlock()
	cur := f.config()
	next, err := readAgain(&f.base, cur, nil, nil)
	if err != nil {
		return nil, err
	}
	changed = f.reloadEndpoint(cur.Shared, next.Shared)
	f.mu.Lock()
	f.cfg.Policy, f.cfg.NearRules = next.Policy, next.NearRules
	f.mu.Unlock()
	f.logReloaded(changed)
	return changed, nil
}
