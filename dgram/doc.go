// Package dgram carries the traffic a near edge does not terminate — UDP,
// ICMP echo (ping), and the TCP flows its rules pass — through the
// tunnel's unreliable datagrams, one IP packet per datagram, and sends it
// on from the far edge. Near and Far are each edge's end, and the socket
// NAT for UDP and ping at the far edge is here; its rooms hold the rest:
//
//	dgram/packet     the IP packets: parsing, building, too-big answers
//	dgram/passthru   passed TCP (both sides, MSS clamp, segmenting) and
//	                 transparent egress (the TUN's answers, DivertAmong)
//
// The near edge's rules (ingress.Rules) decide what each flow gets; the
// edge hands them in (NearConfig.Rules, passthru.Rules), so neither this
// package nor the stack knows how rules are written.
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
// The rules (--near-rule, package ingress) decide from a flow's first
// packet: optimise (TCP only: the stack terminates it), pass (its IP
// packets cross whole) or drop (counted as Drops.Policy); with no match
// TCP is optimised and the rest passed. UDP and ping keep no state at the
// near edge, so each packet is matched. Passed TCP, and the far edge's
// transparent egress, are package passthru's (see its doc); Near and Far
// hand it those packets and count what it does in their Stats.
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
// A far edge with its own TUN (FarConfig.WritePacket) opens no socket:
// the packet is written out of the TUN as the client sent it, and its
// answers come back through Far.Divert (package passthru).
package dgram
