package ingress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/wanopt/wanopt/dgram/packet"
	"github.com/wanopt/wanopt/dgram/passthru"
	"github.com/wanopt/wanopt/egress"
)

// Action is what a near edge does with a flow (Rule). It is the type of
// the hook the datagram paths take the decision through
// (passthru.Rules), so that neither they nor the stack know the rules.
type Action = passthru.Action

// The actions. The zero Action is Default: no rule matched, and the flow
// gets the default, Optimise for TCP and Pass for the rest.
const (
	Default  = passthru.Default
	Optimise = passthru.Optimise // the stack terminates it (TCP only)
	Pass     = passthru.Pass     // its IP packets cross whole, one per datagram
	Drop     = passthru.Drop     // counted as the datagrams' Drops.Policy
)

// Protocol numbers a Rule names.
const (
	ProtoTCP  = packet.ProtoTCP
	ProtoUDP  = packet.ProtoUDP
	ProtoICMP = packet.ProtoICMP
)

// ProtoAny in a Rule matches every protocol.
const ProtoAny = 0

// Rule matches the first packet of a flow by protocol, destination
// prefix and destination port, and says what to do with the flow.
type Rule struct {
	Action Action
	// Proto is ProtoTCP, ProtoUDP, ProtoICMP (ICMP and ICMPv6 echo) or
	// ProtoAny.
	Proto uint8
	// Dst and its Ports (egress.Rule): the destination prefix, and the
	// destination ports it covers (all when empty; a rule with ports never
	// matches ICMP, as in the egress policy).
	Dst egress.Rule
}

// ErrRule marks a rule ParseRule cannot read.
var ErrRule = errors.New("near rule")

// RuleSyntax is the syntax ParseRule reads, for flag help.
const RuleSyntax = "ACTION:PROTO:CIDR[:PORTS]"

// ParseRule reads "ACTION:PROTO:CIDR[:PORTS]": ACTION is optimise,
// pass or drop; PROTO tcp, udp, icmp (ping, IPv4 and IPv6) or any; and
// CIDR[:PORTS] the destination as an egress rule spells it (egress.ParseRule:
// "198.18.2.0/24:80,443,8000-8100", IPv6 bracketed with ports,
// "[2001:db8::/32]:22"). optimise is for TCP only: a datagram protocol
// has no stream to optimise.
func ParseRule(s string) (Rule, error) {
	bad := func(why string) (Rule, error) {
		return Rule{}, fmt.Errorf("%w %q: %s (want %s, e.g. pass:tcp:198.18.2.2/32:22 or drop:udp:0.0.0.0/0:137-139)", ErrRule, s, why, RuleSyntax)
	}
	act, rest, ok1 := strings.Cut(strings.TrimSpace(s), ":")
	proto, dst, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return bad("missing fields")
	}
	var r Rule
	switch strings.ToLower(act) {
	case "optimise", "optimize":
		r.Action = Optimise
	case "pass":
		r.Action = Pass
	case "drop":
		r.Action = Drop
	default:
		return bad(fmt.Sprintf("action %q is not optimise, pass or drop", act))
	}
	switch strings.ToLower(proto) {
	case "tcp":
		r.Proto = ProtoTCP
	case "udp":
		r.Proto = ProtoUDP
	case "icmp":
		r.Proto = ProtoICMP
	case "any":
		r.Proto = ProtoAny
	default:
		return bad(fmt.Sprintf("protocol %q is not tcp, udp, icmp or any", proto))
	}
	if r.Action == Optimise && r.Proto != ProtoTCP {
		return bad("optimise terminates TCP only; other protocols can be passed or dropped")
	}
	d, err := egress.ParseRule(dst)
	if err != nil {
		return bad(err.Error())
	}
	r.Dst = d
	return r, nil
}

// String formats r as ParseRule reads it.
func (r Rule) String() string {
	p := "any"
	switch r.Proto {
	case ProtoTCP:
		p = "tcp"
	case ProtoUDP:
		p = "udp"
	case ProtoICMP:
		p = "icmp"
	}
	return r.Action.String() + ":" + p + ":" + r.Dst.String()
}

// Rules are a near edge's ordered rules: the first that matches a
// flow decides its action.
type Rules []Rule

// ParseRules parses each rule with ParseRule.
func ParseRules(ss []string) (Rules, error) {
	var rs Rules
	for _, s := range ss {
		r, err := ParseRule(s)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// String formats the rules space-separated ("default" for none).
func (rs Rules) String() string {
	if len(rs) == 0 {
		return "default"
	}
	ss := make([]string, len(rs))
	for i, r := range rs {
		ss[i] = r.String()
	}
	return strings.Join(ss, " ")
}

// HasTCPPass reports whether a rule may pass TCP.
func (rs Rules) HasTCPPass() bool {
	for _, r := range rs {
		if r.Action == Pass && (r.Proto == ProtoTCP || r.Proto == ProtoAny) {
			return true
		}
	}
	return false
}

// DivertsTCP reports whether a rule may pass or drop TCP, so that the
// near edge reads TCP packets at all (passthru.Rules).
func (rs Rules) DivertsTCP() bool {
	for _, r := range rs {
		if r.Action != Optimise && (r.Proto == ProtoTCP || r.Proto == ProtoAny) {
			return true
		}
	}
	return false
}

// Match returns the action of the first rule matching a flow of proto
// (ICMPv6 counts as ProtoICMP) to dst, whose port is ignored for ICMP;
// Optimise for TCP and Pass for the rest when none matches. It works on
// parsed headers, never on bytes, and does not allocate.
func (rs Rules) Match(proto uint8, dst netip.AddrPort) Action {
	if proto == packet.ProtoICMPv6 {
		proto = ProtoICMP
	}
	a := dst.Addr().Unmap()
	for i := range rs {
		r := &rs[i]
		if r.Proto != ProtoAny && r.Proto != proto {
			continue
		}
		if !r.Dst.Prefix.Contains(a) {
			continue
		}
		if len(r.Dst.Ports) > 0 {
			if proto != ProtoTCP && proto != ProtoUDP {
				continue
			}
			in := false
			for _, pr := range r.Dst.Ports {
				if dst.Port() >= pr.Lo && dst.Port() <= pr.Hi {
					in = true
					break
				}
			}
			if !in {
				continue
			}
		}
		return r.Action
	}
	if proto == ProtoTCP {
		return Optimise
	}
	return Pass
}
