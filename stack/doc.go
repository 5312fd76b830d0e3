// Package stack terminates intercepted TCP flows in a gVisor netstack
// attached to the edge's TUN device, and relays each flow to the far end a
// flow.Dialer opens (on the near edge, a tunnel stream).
//
// The stack is promiscuous and spoofing: it answers for any destination the
// TUN delivers, IPv4 and IPv6. For each intercepted SYN it asks the Dialer
// first and completes the client's handshake only once the far side is
// connected: a refused far side gives the client a RST, an unreachable or
// timed-out one gives it no answer at all, as it would see without wanopt
// (see flow.Dialer). An established flow is relayed by flow.Relay: FINs
// pass each way independently and a reset anywhere resets both ends.
//
// The same stack opens connections from any address (Dial): the far edge's
// transparent egress connects servers from the client's own address.
package stack
