package netsim

import "github.com/wanopt/wanopt/internal/monotime"

// MaxDatagramBytes is the largest datagram an Endpoint may emit: the length
// of the buffer handed to PollTransmit.
const MaxDatagramBytes = 2048

// packet is a datagram travelling through the simulator, owned by it from
// PollTransmit until delivered or dropped, then back in the pool.
type packet struct {
	buf       [MaxDatagramBytes]byte
	n         int           // datagram length
	wireBytes int           // bytes the link serialises: n plus the link's overhead
	ep        int32         // destination endpoint
	link      int32         // link the packet is on
	enqAt     monotime.Time // when the packet entered the current link's queue
	extra     monotime.Time // flow's extra one-way delay, in nanoseconds
}

// packetPool is a free list of packets, kept at its largest size, so a run
// in steady state allocates nothing.
type packetPool struct {
	free []*packet
}

func (p *packetPool) get() *packet {
	if k := len(p.free); k > 0 {
		pk := p.free[k-1]
		p.free[k-1] = nil
		p.free = p.free[:k-1]
		return pk
	}
	return new(packet)
}

func (p *packetPool) put(pk *packet) {
	pk.n = 0
	p.free = append(p.free, pk)
}
