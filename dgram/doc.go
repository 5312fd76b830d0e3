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
// The near edge's stack hands every IPv4 and IPv6 packet that is not TCP
// to Near.Divert before gVisor sees it. Near takes UDP and ICMP/ICMPv6
// echo requests (so gVisor never answers a ping itself, which would fake
// the round trip) and sends each, whole, as one datagram; it leaves
// everything else (ICMP errors, neighbour discovery, other protocols) to
// the netstack, as before. The far edge's Far checks the destination
// against the egress policy (ICMP as port 0: a rule with ports does not
// allow ping), keeps a NAT-like table of flows, each with a connected
// kernel socket and a reader goroutine, and sends the server's answers
// back as IP packets from the server to the client, which Near writes to
// the TUN.
//
// # Datagram format
//
// A datagram is one kind byte and one IP packet:
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
// The kind byte lets an edge that both intercepts and egresses (TUN and
// --allow) tell a request from a reply, which the IP header alone cannot;
// unknown kinds are counted as malformed and dropped, so later kinds can
// be added. A packet longer than the tunnel's MaxDatagramBytes minus the
// kind byte is dropped and counted (TooBig), and its client told so as a
// router tells it (AppendTooBig): ICMP "fragmentation needed" with that
// MTU for an IPv4 packet with DF set (one without DF is only dropped: the
// tunnel carries no fragments), ICMPv6 "packet too big" for IPv6, from the
// packet's destination, at most TooBigPerSecond a second (TooBigAnswered,
// TooBigLimited). So the client's path MTU discovery (RFC 1191, 8201)
// finds the tunnel's; an answer too big for the tunnel on its way back
// from the far edge is only dropped. Every parser of bytes from the network here returns an error,
// never panics (FuzzParse, FuzzFar, FuzzNear, FuzzTCP, FuzzICMPError).
//
// # Near rules
//
// A near edge's NearRules (--near-rule ACTION:PROTO:CIDR[:PORTS], ordered,
// the first match winning) decide what a flow gets from its first packet:
// Optimise (TCP only: the stack terminates it), Pass (its IP packets cross
// whole, as datagrams) or Drop (counted as Drops.Policy); with no match TCP
// is optimised and the rest passed. UDP and ping keep no state at the near
// edge, so each of their packets is matched, which gives the first
// packet's answer while the rules stay. The matcher reads parsed headers
// (protocol, destination, port), never bytes.
//
// # Passed TCP
//
// The stack also offers every TCP packet to Near.DivertTCP
// (stack.Config.DivertTCP), which returns at once unless a rule passes or
// drops TCP or a passed flow is open. A SYN a pass rule matches opens an
// entry in a table of flows keyed by (client, server) (DefaultMaxPassFlows;
// forgotten after DefaultPassIdleTimeout idle, or PassClosingTimeout after a
// FIN or RST); that flow's packets are then sent as KindUp datagrams and
// the answers (KindDown) written to the TUN, and gVisor never sees them, so
// the client's handshake, window scale, SACK and timestamps reach the
// server. The SYN's MSS (and the SYN-ACK's, at the far edge) is clamped so
// that a full segment fits one datagram, as routers clamp it for a tunnel;
// an aggregate from the TUN's offload (GRO, up to 64 KiB) is cut into
// segments that fit (segmentTCP). The far edge can send such packets on
// only from its own TUN (--egress transparent, FarConfig.WritePacket): it
// checks the flow's server against the egress policy, learns the flow from
// its packets up, writes them out of the TUN (its kernel routes them to the
// server from the client's address), and its stack hands the server's
// answers for learnt flows to Far.DivertTCP instead of gVisor, which would
// reset them. A far edge without a TUN counts passed TCP as Unsupported
// and warns once; the near edge cannot know, and warns at start.
//
// # Flows at the far edge
//
// A UDP flow is keyed by (client address:port, server address:port) and
// owns a socket connected to the server (net.DialUDP), opened only when the
// policy allows the destination; an ICMP echo flow is keyed by (client,
// server, echo identifier) and owns an unprivileged ping socket (the
// kernel chooses the identifier on the wire; the reply gets the client's
// back, with the sequence number unchanged). Ping sockets need the far
// edge's group inside the sysctl net.ipv4.ping_group_range (which also
// governs ICMPv6). A flow ends after IdleTimeout without a packet either
// way; at most MaxFlows exist at once, and packets that would open more
// are dropped and counted.
//
// # Transparent egress for UDP and ping
//
// A far edge with its own TUN (FarConfig.WritePacket) opens no socket: a
// UDP packet or echo request is written out of the TUN as the client sent
// it (its source the client's address, its TTL and checksums the
// client's), after the same policy check, and its flow — keyed as above,
// an echo by its identifier — enters a table bounded by MaxFlows and
// forgotten after IdleTimeout. The far kernel routes the servers' answers
// into the TUN, and its stack hands each non-TCP packet to Far.Divert,
// which sends back the ones that answer a flow in the table: UDP to the
// client's address and port, echo replies, and ICMP (ICMPv6) errors —
// destination unreachable, packet too big, time exceeded, parameter
// problem — whose quoted packet is a flow's (parseICMPError; an error
// about a passed TCP flow too). Near.Deliver writes the errors to the
// client, counted as ICMP. Answers of those kinds to no flow are dropped
// (Drops.Unmatched); the rest (errors about the stack's own TCP
// connections, other ICMP) stays the stack's. A hub's branches each own a
// table; DivertAmong gives an answer to the branch whose table holds its
// flow.
package dgram
