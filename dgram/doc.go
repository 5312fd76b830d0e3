// Package dgram carries the traffic a near edge does not terminate — UDP,
// ICMP echo (ping), and the TCP flows its rules pass — through the
// tunnel's unreliable datagrams, one IP packet per datagram, and sends it
// on from the far edge. It also holds the near edge's rules (NearRules),
// which decide what each flow gets.
//
// # Path
//
//	client ─ TUN ─ stack (Config.Divert) ─ Near.Divert ══ datagram ══ Far ─ kernel socket ─ server
//	client ─ TUN ─ stack.WritePacket ─ Near.Deliver ══ datagram ══ Far's flow reader ─ server
//
// or, with transparent egress at the far edge:
//
//	... ══ datagram ══ Far ─ WritePacket ─ far TUN ─ far kernel ─ server
//	... ══ datagram ══ Far.Divert ─ far stack (Config.Divert) ─ far TUN ─ far kernel ─ server
//
// The near edge's stack hands every non-TCP packet to Near.Divert before
// gVisor sees it. Near sends UDP and ICMP/ICMPv6 echo requests whole, one
// datagram each (so gVisor never answers a ping itself and fakes the round
// trip), and leaves the rest (ICMP errors, neighbour discovery, other
// protocols) to the netstack. Far checks the destination against the
// egress policy (ICMP as port 0: a rule with ports does not allow ping),
// keeps a NAT-like table of flows and sends the answers back as IP packets
// from the server to the client, which Near writes to the TUN.
//
// # Datagram format
//
//	byte 0      kind: 1 (KindUp) a packet a near edge's client sent, for
//	            the far edge to send on; 2 (KindDown) a packet for the
//	            near edge to deliver to its client (a reply)
//	bytes 1...  one IPv4 or IPv6 packet, headers and checksums as on the
//	            wire: UDP, an ICMP (ICMPv6) echo request (up) or reply
//	            (down), a passed flow's TCP segment, or (down, from a far
//	            edge with transparent egress) an ICMP error about a
//	            client's packet; no fragments, no IPv6 extension headers
//
// The kind byte lets an edge that both intercepts and egresses tell a
// request from a reply; unknown kinds are counted as malformed and
// dropped, so kinds can be added. A packet longer than MaxDatagramBytes
// minus the kind byte is dropped (TooBig) and its client told as a router
// tells it (AppendTooBig, at most TooBigPerSecond a second): ICMP
// "fragmentation needed" for IPv4 with DF (without DF it is only dropped),
// ICMPv6 "packet too big" for IPv6, so the client's path MTU discovery
// (RFC 1191, 8201) finds the tunnel's. Every parser of bytes from the
// network returns an error, never panics (FuzzParse, FuzzFar, FuzzNear,
// FuzzTCP, FuzzICMPError).
//
// # Near rules
//
// NearRules (--near-rule ACTION:PROTO:CIDR[:PORTS], first match wins)
// decide from a flow's first packet: Optimise (TCP only: the stack
// terminates it), Pass (its IP packets cross whole) or Drop (counted as
// Drops.Policy); with no match TCP is optimised and the rest passed. UDP
// and ping keep no state at the near edge, so each packet is matched. The
// matcher reads parsed headers, never bytes.
//
// # Passed TCP
//
// The stack offers every TCP packet to Near.DivertTCP, which returns at
// once unless a rule passes or drops TCP or a passed flow is open. A SYN a
// pass rule matches opens an entry keyed by (client, server)
// (DefaultMaxPassFlows; forgotten after DefaultPassIdleTimeout idle, or
// PassClosingTimeout after a FIN or RST); its packets then cross as
// datagrams and gVisor never sees them, so the client's handshake options
// reach the server. The SYN's MSS is clamped so a full segment fits one
// datagram, and a GRO aggregate is cut into segments that fit
// (segmentTCP). Only a far edge with its own TUN (--egress transparent,
// FarConfig.WritePacket) can send them on: its stack hands the server's
// answers for learnt flows to Far.DivertTCP instead of gVisor, which would
// reset them. A far edge without a TUN counts passed TCP as Unsupported
// and warns once.
//
// # Flows at the far edge
//
// A UDP flow is keyed by (client address:port, server address:port) and
// owns a socket connected to the server, opened only when the policy
// allows it. An ICMP echo flow is keyed by (client, server, echo
// identifier) and owns an unprivileged ping socket (the reply gets the
// client's identifier back); ping sockets need the far edge's group in
// net.ipv4.ping_group_range. A flow ends after IdleTimeout without a
// packet either way; at most MaxFlows exist, and packets that would open
// more are dropped and counted.
//
// # Transparent egress for UDP and ping
//
// A far edge with its own TUN opens no socket: the packet is written out
// of the TUN as the client sent it, after the same policy check, and its
// flow enters a table bounded by MaxFlows and IdleTimeout. Its stack hands
// each non-TCP answer to Far.Divert, which sends back those that answer a
// flow in the table: UDP, echo replies, and ICMP errors whose quoted
// packet is a flow's (parseICMPError). Answers to no flow are dropped
// (Drops.Unmatched); the rest stays the stack's. A hub's branches each own
// a table; DivertAmong gives an answer to the branch whose table holds
// its flow.
package dgram
