package edge

import (
	"net/netip"

	"github.com/wanopt/wanopt/dgram"
	"github.com/wanopt/wanopt/dgram/packet"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// Non-TCP traffic (package dgram): an edge intercepting on its TUN diverts
// its clients' UDP and pings to its near side, which sends them through
// the tunnel as datagrams; the far side of a near or far edge sends them
// on under the egress policy, from kernel sockets or, with transparent
// egress, out of its own TUN, and sends the answers back. With several
// upstreams each datagram goes to the upstream whose route holds its
// destination; a hub keeps a Far per branch (hub.go). A near edge with
// upstreams takes only answers from them (onAnswer).

// newNear is the near side of an edge intercepting on its TUN; route
// picks the tunnel toward a destination.
func (p *endpoint) newNear(route func(dst netip.Addr) packet.Sender) *dgram.Near {
	return dgram.NewNear(dgram.NearConfig{
		Route:  route,
		Write:  p.writeTUN,
		Logger: p.log.With("sub", "dgram"),
		Rules:  p.sh.NearRules,
	})
}

// PassTCPWarning is logged when a near rule passes TCP: only the far
// edge knows whether it can send the passed packets on.
const PassTCPWarning = "a near rule passes TCP unterminated: the far edge must run with transparent egress (its own TUN, from which it sends the clients' packets on); a far edge with kernel egress drops them and counts them as unsupported datagrams ('wanopt status' there)"

// divertTCP is the stack's Config.DivertTCP: the passed flows of an edge
// that intercepts (near), or with transparent egress the servers'
// answers to the flows its far side passes on; nil when the edge has
// neither.
func (p *endpoint) divertTCP() func([]byte) bool {
	return p.divertWith((*dgram.Near).DivertTCP, (*dgram.Far).DivertTCP)
}

// divert is the stack's Config.Divert: the clients' UDP and pings of an
// edge that intercepts (near), or with transparent egress the answers to
// the UDP and echo flows its far side sends on; nil when the edge has
// neither.
func (p *endpoint) divert() func([]byte) bool {
	return p.divertWith((*dgram.Near).Divert, (*dgram.Far).Divert)
}

// divertWith is a divert function: near's on the near side, or far's on
// the far side of the moment.
func (p *endpoint) divertWith(near func(*dgram.Near, []byte) bool, far func(*dgram.Far, []byte) bool) func([]byte) bool {
	switch {
	case p.near != nil:
		return func(b []byte) bool { return near(p.near, b) }
	case p.sh.Transparent:
		return func(b []byte) bool {
			f := p.far.Load()
			return f != nil && far(f, b)
		}
	}
	return nil
}

// startFar starts the far side for eg's policy (Run); the returned
// function stops it.
func (p *endpoint) startFar(eg *egress.Egress) (stop func()) {
	far := dgram.NewFar(dgram.FarConfig{Check: eg.Check, WritePacket: p.writeOut(), Logger: p.log.With("sub", "dgram")})
	p.far.Store(far)
	return far.Close
}

// onDatagram is the one peer's tunnel's driver.Config.OnDatagram:
// requests go to the far side, answers to the near side.
func (p *endpoint) onDatagram(b []byte) { dgram.Demux(b, p.near, p.far.Load()) }

// onAnswer is an upstream tunnel's driver.Config.OnDatagram: answers go
// to the near side; requests are counted there as unsupported.
func (p *endpoint) onAnswer(b []byte) { dgram.Demux(b, p.near, nil) }

// setDatagramTunnel tells the far side which tunnel answers go through
// (nil: none is up).
func (p *endpoint) setDatagramTunnel(t *driver.Tunnel) {
	far := p.far.Load()
	if far == nil {
		return
	}
	if t == nil {
		far.SetTunnel(nil)
		return
	}
	far.SetTunnel(t)
}
