// Package stack terminates intercepted TCP flows in a gVisor netstack
// attached to the edge's TUN device, and bridges each flow to a Dialer (the
// WAN tunnel, later) that opens its far side.
//
// The stack is promiscuous and spoofing: it answers for any destination the
// TUN delivers, IPv4 and IPv6. For each intercepted SYN it asks the Dialer
// first and completes the client's handshake only once the far side is
// connected (DESIGN.md decision 4): a refused far side gives the client a
// RST, an unreachable or timed-out one gives it no answer at all, as it would
// see without wanopt. An established flow is copied both ways with half-close
// (FIN each way independently) and resets carried through.
package stack
