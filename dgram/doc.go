// Package dgram carries the traffic a near edge does not terminate — UDP
// and ICMP echo (ping) — through the tunnel's unreliable datagrams, one IP
// packet per datagram, and sends it on from the far edge.
//
// # Path
//
//	client ─ TUN ─ stack (Config.Divert) ─ Near.Divert ══ datagram ══ Far ─ kernel socket ─ server
//	client ─ TUN ─ stack.WritePacket ─ Near.Deliver ══ datagram ══ Far's flow reader ─ server
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
//	            wire: UDP, or an ICMP (ICMPv6) echo request (up) or reply
//	            (down); no fragments, no IPv6 extension headers
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
// never panics (FuzzParse, FuzzFar, FuzzNear).
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
package dgram
