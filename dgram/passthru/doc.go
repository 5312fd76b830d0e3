// Package passthru holds what crosses the tunnel as datagrams without a
// socket of its own: the TCP flows a near edge's rule passes
// unterminated, and a far edge's transparent egress, which writes the
// clients' packets out of its own TUN and sends back the answers the
// kernel routes into it. Package dgram's Near and Far hand it those
// packets and count what it does (Counter); the IP parsing it shares with
// them is package packet's.
//
// # Passed TCP
//
// The near edge's stack offers every TCP packet to Near.DivertTCP, which
// returns at once unless the rules (Rules, from the edge: ingress.Rules)
// pass or drop TCP or a passed flow is open. A SYN a pass rule matches
// opens an entry keyed by (client, server) (DefaultMaxPassFlows;
// forgotten after DefaultPassIdleTimeout idle, or PassClosingTimeout
// after a FIN or RST); its packets then cross as datagrams and gVisor
// never sees them, so the client's handshake options reach the server.
// The SYN's MSS is clamped so a full segment fits one datagram, and a GRO
// aggregate is cut into segments that fit (segmentTCP). Only a far edge
// with its own TUN (--egress transparent, FarConfig.WritePacket) can send
// them on: its stack hands the server's answers for learnt flows to
// Far.DivertTCP instead of gVisor, which would reset them. A far edge
// without a TUN counts passed TCP as unsupported and warns once.
//
// # Transparent egress
//
// A far edge with its own TUN opens no socket for UDP and ping: the
// packet is written out of the TUN as the client sent it, after the
// egress policy's check, and its flow enters a table bounded by MaxFlows
// and IdleTimeout. Its stack hands each non-TCP answer to Far.Divert,
// which sends back those that answer a flow in the table: UDP, echo
// replies, and ICMP errors whose quoted packet is a flow's
// (parseICMPError). Answers to no flow are dropped (DropUnmatched); the
// rest stays the stack's. A hub's branches each own a table; DivertAmong
// gives an answer to the branch whose table holds its flow.
//
// Every parser of bytes from the network returns an error, never panics
// (FuzzTCP, FuzzICMPError).
package passthru
