package passthru

import "github.com/wanopt/wanopt/dgram/packet"

const protoTCP = packet.ProtoTCP

// Reason is why a packet was dropped, as the side's counters name it
// (dgram.Drops).
type Reason uint8

const (
	DropNotAllowed  Reason = iota // the far edge's policy, or a flow not passed here
	DropTooBig                    // longer than a datagram carries
	DropUnsupported               // not carried (passed TCP at a far edge without a TUN)
	DropNoTunnel                  // no tunnel up
	DropFlowLimit                 // a flow table full
	DropPolicy                    // a near edge's rule says drop
	DropUnmatched                 // an answer from the TUN to no flow
	DropSocketError               // the TUN refused the packet
)

// Counter is where the paths count what they carry and drop: the side's
// datagram counters (dgram.Counters), so that one Stats covers UDP, ping
// and passed TCP alike. Its methods are called on the packets' paths,
// concurrently.
type Counter interface {
	// Up and Down count a packet of n bytes of proto sent on toward the
	// server or the client.
	Up(proto uint8, n int)
	Down(proto uint8, n int)
	Dropped(why Reason)
	// ParseError counts a packet a parser refused (malformed or
	// unsupported, as the error wraps).
	ParseError(err error)
	// SendError counts a datagram the tunnel refused.
	SendError(err error)
	// FlowOpened counts a transparent datagram flow learnt.
	FlowOpened()
}
