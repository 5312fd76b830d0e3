package passthru

import "net/netip"

// Action is what a near edge does with a flow, as its rules decide
// (ingress.Rules).
type Action uint8

// The actions. The zero Action is Default: no rule matched, and the
// flow gets the default, Optimise for TCP and Pass for the rest.
const (
	Default Action = iota
	// Optimise terminates a TCP flow in the near edge's stack and carries
	// its bytes as a tunnel stream (TCP only).
	Optimise
	// Pass carries the flow's IP packets unterminated, one per tunnel
	// datagram: TCP keeps its end-to-end handshake and options.
	Pass
	// Drop drops the flow's packets (counted as Drops.Policy).
	Drop
)

// String names the action as the rules' syntax spells it ("default"
// for Default).
func (a Action) String() string {
	switch a {
	case Optimise:
		return "optimise"
	case Pass:
		return "pass"
	case Drop:
		return "drop"
	}
	return "default"
}

// Rules decide what a near edge does with a flow from its first packet.
// The edge hands them in (ingress.Rules), so that this package and the
// stack need not know how rules are written. They must not change once
// handed in: a change is a new Rules (Near.SetRules).
type Rules interface {
	// Match returns the action for a flow of proto (an IP protocol
	// number; ICMPv6 counts as ICMP) to dst, never Default: without a
	// matching rule, Optimise for TCP and Pass for the rest. It is called
	// on the packets' path: it must not block or allocate.
	Match(proto uint8, dst netip.AddrPort) Action
	// DivertsTCP reports whether Match may return other than Optimise
	// for TCP; while it does not and no flow is passed, TCP packets are
	// not read at all.
	DivertsTCP() bool
}

// defaultRules are the rules of a near edge without any.
type defaultRules struct{}

func (defaultRules) Match(proto uint8, _ netip.AddrPort) Action {
	if proto == protoTCP {
		return Optimise
	}
	return Pass
}

func (defaultRules) DivertsTCP() bool { return false }
