package edge

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/wanopt/wanopt/dgram"
	"github.com/wanopt/wanopt/dgram/packet"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/edge/metrics"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/ingress"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// endpoint is what a near and a far edge share beside base: the egress
// that connects the flows their peers open, and the sides of the
// datagrams (datagram.go).
type endpoint struct {
	base
	// near carries the clients' UDP and pings intercepted on the TUN (nil
	// unless the edge intercepts: LAN.intercepts).
	near *dgram.Near
	// far sends the peers' datagrams on (set by Run).
	far atomic.Pointer[dgram.Far]
	// eg is the egress (set by Run, under mu).
	eg *egress.Egress
}

// egress returns the egress (nil before Run).
func (p *endpoint) egress() *egress.Egress {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.eg
}

// run is the Run of a near or far edge until ctx ends: it opens the TUN
// (its intercepted flows to flows), the egress (under the policy policy
// returns, called with mu held), the far side, the control socket and
// the metrics, then runs loop, which keeps the tunnels up; bridge counts
// what the flows to the peers met.
func (p *endpoint) run(ctx context.Context, src control.Source, ready metrics.Ready, flows flow.Dialer, policy func() egress.Policy,
	loop func(context.Context, *egress.Egress), bridge func() ingress.Stats) error {
	if p.sh.TUN != "" {
		if err := p.openIngress(ctx, flows, p.divert(), p.divertTCP()); err != nil {
			return err
		}
		defer p.closeIngress()
	}
	p.mu.Lock()
	pol := policy()
	p.mu.Unlock()
	eg := egress.New(pol, p.egressDialer(), p.egressOptions(p.log.With("sub", "egress")))
	p.mu.Lock()
	p.eg = eg
	eg.SetPolicy(policy()) // a reload may have come since
	p.mu.Unlock()
	stopFar := p.startFar(eg)
	defer stopFar()
	stopRates := p.sampleRates(func() []*egress.Egress { return []*egress.Egress{eg} })
	defer stopRates()
	if err := p.serveControl(ctx, src, ready); err != nil {
		return err
	}
	defer p.stopControl()
	if p.near != nil && p.sh.NearRules.HasTCPPass() {
		p.log.Warn(PassTCPWarning)
	}
	loop(ctx, eg)
	p.logStopped(eg.Stats(), bridge())
	return nil
}

// serve runs one tunnel to the one peer, whose flows br bridges, until
// it closes or ctx ends.
func (p *endpoint) serve(ctx context.Context, t *driver.Tunnel, eg *egress.Egress, br *ingress.Dialer) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	egDone := make(chan error, 1)
	go func() { egDone <- eg.Serve(sctx, t) }()
	br.SetTunnel(t)
	p.setDatagramTunnel(t)
	select {
	case <-t.Done():
	case <-ctx.Done():
		p.log.Info("stopping: closing flows and the tunnel")
	}
	br.SetTunnel(nil)
	p.setDatagramTunnel(nil)
	if st := p.stack(); ctx.Err() != nil && st != nil {
		// Reset the intercepted flows while the tunnel still carries the
		// far side's end of them.
		st.Close()
	}
	cancel()
	if err := <-egDone; err != nil && !errors.Is(err, driver.ErrTunnelClosed) {
		p.log.Warn("egress stopped", "err", err)
	}
	t.Close()
}

// status is a near or far edge's status beside its tunnels'.
func (p *endpoint) status(role string) control.Status {
	r := p.base.status(role)
	if eg := p.egress(); eg != nil {
		r.Egress = eg.Stats()
	}
	if p.near != nil {
		s := p.near.Stats()
		r.DatagramIngress = &s
	}
	if far := p.far.Load(); far != nil {
		s := far.Stats()
		r.DatagramEgress = &s
	}
	return r
}

// flows lists the flows through the edge now: those intercepted here
// (peerFor names the upstream a destination goes to, "" with one peer),
// then those connected here; srtt is the one peer's tunnel's round trip.
func (p *endpoint) flows(peerFor func(netip.Addr) string, srtt time.Duration) []control.Flow {
	var out []control.Flow
	out = stackFlows(out, p.stack(), peerFor, srtt)
	if p.near != nil {
		out = passedFlows(out, "ingress", p.near.PassedFlows(), peerFor, srtt)
	}
	if far := p.far.Load(); far != nil {
		out = passedFlows(out, "egress", far.PassedFlows(), peerFor, srtt)
	}
	if eg := p.egress(); eg != nil {
		out = egressFlows(out, eg, "", srtt)
	}
	return out
}

// peerLink is the one peer's tunnel of a near or far edge: the peer's
// key and name, the bridge that carries the flows intercepted for it, and
// its tunnel's life.
type peerLink struct {
	key  crypt.PublicKey
	name string
	br   *ingress.Dialer
	link *link
}

// fill sets the one peer's part of r: its name, key and tunnel; host is
// the name its address was resolved from.
func (l *peerLink) fill(r *control.Status, host string) {
	r.PeerName, r.PeerKey = peerName(l.name), l.key.Base64()
	r.Bridge = l.br.Stats()
	var keysAge time.Duration
	if t := l.br.Tunnel(); t != nil {
		r.Tunnel = tunnelStatus(t)
		keysAge = r.Tunnel.HandshakeAge
	}
	ts := l.link.snapshot(time.Now(), keysAge)
	ts.Host = host
	r.TunnelState = &ts
}

// srtt is the tunnel's smoothed round trip (0 while down).
func (l *peerLink) srtt() time.Duration {
	if t := l.br.Tunnel(); t != nil {
		return t.Stats().Tunnel.SmoothedRTT
	}
	return 0
}

// sender is the tunnel carrying datagrams to the peer (nil while down).
func (l *peerLink) sender() packet.Sender {
	if t := l.br.Tunnel(); t != nil {
		return t
	}
	return nil
}
