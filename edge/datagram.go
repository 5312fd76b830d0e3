package edge

import (
	"errors"
	"net/netip"

	"github.com/wanopt/wanopt/dgram"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// Non-TCP traffic (package dgram): a near edge's stack diverts its
// clients' UDP and pings to e.near, which sends them through the tunnel
// as datagrams; a far edge's e.far sends them on under the egress policy,
// from kernel sockets or, with transparent egress, out of its own TUN, and
// sends the answers back. With several upstreams (--upstream) each
// datagram goes to the upstream whose route holds its destination; a hub
// (--branch) keeps a Far per branch (hub.go). A near edge with upstreams
// takes only answers from them (onUpstreamDatagram).

// errNoIngress: an answer came while the stack was not running.
var errNoIngress = errors.New("edge: no ingress to write the packet to")

// newNear is the near side of an edge with a TUN.
func (e *Edge) newNear() *dgram.Near {
	return dgram.NewNear(dgram.NearConfig{
		Route: e.datagramRoute,
		Write: func(p []byte) error {
			st := e.stack()
			if st == nil {
				return errNoIngress
			}
			return st.WritePacket(p)
		},
		Logger: e.log.With("sub", "dgram"),
		Rules:  e.cfg.NearRules,
	})
}

// PassTCPWarning is logged (and printed by --check) when a near rule passes TCP: only the far
// edge knows whether it can send the passed packets on.
const PassTCPWarning = "a --near-rule passes TCP unterminated: the far edge must run with --egress transparent (its own TUN, from which it sends the clients' packets on); a far edge with kernel egress drops them and counts them as unsupported datagrams ('wanopt status' there)"

// farWrite returns the far side's FarConfig.WritePacket: with
// transparent egress, the clients' passed TCP, UDP and echo requests go
// out of the TUN, whose kernel routes them to the servers from the
// clients' addresses; nil without.
func (e *Edge) farWrite() func([]byte) error {
	if !e.cfg.Transparent {
		return nil
	}
	return func(p []byte) error {
		st := e.stack()
		if st == nil {
			return errNoIngress
		}
		return st.WritePacket(p)
	}
}

// divertTCP is the stack's Config.DivertTCP: a near edge's passed flows
// (e.near), or with transparent egress the servers' answers to the flows
// its far side passes on (e.far; a hub's: each branch's); nil when the
// edge has neither.
func (e *Edge) divertTCP() func([]byte) bool {
	switch {
	case e.near != nil:
		return e.near.DivertTCP
	case e.cfg.Transparent && len(e.cfg.Branches) > 0:
		return func(p []byte) bool {
			// Each returns at once while it passes no TCP flow.
			for _, far := range e.hubFarSides() {
				if far.DivertTCP(p) {
					return true
				}
			}
			return false
		}
	case e.cfg.Transparent:
		return func(p []byte) bool {
			far := e.far.Load()
			return far != nil && far.DivertTCP(p)
		}
	}
	return nil
}

// divert is the stack's Config.Divert: a near edge's clients' UDP and
// pings (e.near), or with transparent egress the answers to the UDP and
// echo flows its far side sends on (e.far; a hub's: the branch's whose
// table holds the flow); nil when the edge has neither.
func (e *Edge) divert() func([]byte) bool {
	switch {
	case e.near != nil:
		return e.near.Divert
	case e.cfg.Transparent && len(e.cfg.Branches) > 0:
		return func(p []byte) bool { return dgram.DivertAmong(p, e.hubFarSides()...) }
	case e.cfg.Transparent:
		return func(p []byte) bool {
			far := e.far.Load()
			return far != nil && far.Divert(p)
		}
	}
	return nil
}

// hubFarSides returns the far sides of a hub's running branches, read
// without a lock on the packets' path (nil unless a hub).
func (e *Edge) hubFarSides() []*dgram.Far {
	if p := e.hubFars.Load(); p != nil {
		return *p
	}
	return nil
}

// storeHubFarsLocked publishes the branches' far sides (e.mu held).
func (e *Edge) storeHubFarsLocked() {
	fars := make([]*dgram.Far, 0, len(e.branches))
	for _, b := range e.branches {
		fars = append(fars, b.far)
	}
	e.hubFars.Store(&fars)
}

// datagramRoute is the tunnel carrying datagrams toward dst: the single
// peer's, or with upstreams that of the upstream whose route holds dst
// (the longest prefix, as for TCP flows); nil while it is down or when no
// route holds dst.
func (e *Edge) datagramRoute(dst netip.Addr) dgram.Sender {
	br := e.br
	if e.router != nil {
		u := e.router.route(dst.Unmap())
		if u == nil {
			return nil
		}
		br = u.br
	}
	if t := br.Tunnel(); t != nil {
		return t
	}
	return nil
}

// startFar starts the far side for eg's policy (Run); the returned
// function stops it.
func (e *Edge) startFar(eg *egress.Egress) (stop func()) {
	far := dgram.NewFar(dgram.FarConfig{Check: eg.Check, WritePacket: e.farWrite(), Logger: e.log.With("sub", "dgram")})
	e.far.Store(far)
	return far.Close
}

// onDatagram is the tunnels' driver.Config.OnDatagram: requests go to the
// far side, answers to the near side.
func (e *Edge) onDatagram(p []byte) { dgram.Demux(p, e.near, e.far.Load()) }

// onUpstreamDatagram is an upstream tunnel's driver.Config.OnDatagram:
// answers go to the near side; requests are counted there as unsupported.
func (e *Edge) onUpstreamDatagram(p []byte) { dgram.Demux(p, e.near, nil) }

// setDatagramTunnel tells the far side which tunnel answers go through
// (nil: none is up).
func (e *Edge) setDatagramTunnel(t *driver.Tunnel) {
	far := e.far.Load()
	if far == nil {
		return
	}
	if t == nil {
		far.SetTunnel(nil)
		return
	}
	far.SetTunnel(t)
}
