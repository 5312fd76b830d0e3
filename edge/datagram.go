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
// as datagrams; a far edge's e.far sends them on from kernel sockets,
// under the egress policy, and sends the answers back. This slice covers
// the single peer (--peer or --listen): with --upstream the near side
// drops them (counted as no tunnel), and a hub's branches (--branch) do
// not carry them yet.

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
	})
}

// datagramRoute is the tunnel carrying datagrams toward dst: the single
// peer's, nil while it is down or with upstreams (not carried yet: their
// tunnels have no datagram receiver for the answers).
func (e *Edge) datagramRoute(netip.Addr) dgram.Sender {
	if e.router != nil {
		return nil
	}
	if t := e.br.Tunnel(); t != nil {
		return t
	}
	return nil
}

// startFar starts the far side for eg's policy (Run); the returned
// function stops it.
func (e *Edge) startFar(eg *egress.Egress) (stop func()) {
	far := dgram.NewFar(dgram.FarConfig{Check: eg.Check, Logger: e.log.With("sub", "dgram")})
	e.far.Store(far)
	return far.Close
}

// onDatagram is the tunnels' driver.Config.OnDatagram: requests go to the
// far side, answers to the near side.
func (e *Edge) onDatagram(p []byte) { dgram.Demux(p, e.near, e.far.Load()) }

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
