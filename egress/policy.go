package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ErrPolicy reports an unparsable policy rule.
var ErrPolicy = errors.New("egress: invalid policy rule")

// PortRange is an inclusive range of TCP ports.
type PortRange struct{ Lo, Hi uint16 }

// Rule allows connections to a prefix, on some ports (all ports when Ports
// is empty).
type Rule struct {
	Prefix netip.Prefix
	Ports  []PortRange
}

// Policy says which destinations the egress connects to. A destination is
// connected only if
//
//   - an Allow rule matches it,
//   - no Deny rule matches it, and
//   - it is not a special address (see SpecialClass: loopback, unspecified,
//     link-local, multicast, broadcast, IPv4-mapped IPv6, or one of this
//     host's own addresses), unless an Allow rule names it explicitly: a
//     rule whose prefix lies inside the special range (127.0.0.1/32 names a
//     loopback address, 0.0.0.0/0 does not), or, for the host's own
//     addresses, a rule for exactly that address.
//
// The zero Policy allows nothing: an egress is never an open proxy unless
// told to be (rules for 0.0.0.0/0 and ::/0), and even then it does not
// reach its own host, its link's neighbours' link-local services (such as
// a cloud metadata endpoint at 169.254.169.254) or multicast groups.
type Policy struct {
	Rules []Rule // allow (--allow)
	Deny  []Rule // --deny
}

// SpecialClass names the class of special address a belongs to, or ""
// for an ordinary unicast address. isLocal reports the host's own
// addresses (nil: none).
func SpecialClass(a netip.Addr, isLocal func(netip.Addr) bool) string {
	for _, c := range specialClasses {
		for _, p := range c.prefixes {
			if p.Contains(a) {
				return c.name
			}
		}
	}
	if isLocal != nil && isLocal(a.Unmap()) {
		return "this host's address"
	}
	return ""
}

var specialClasses = []struct {
	name     string
	prefixes []netip.Prefix
}{
	{"IPv4-mapped IPv6", []netip.Prefix{netip.MustParsePrefix("::ffff:0:0/96")}},
	{"loopback", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}},
	{"unspecified", []netip.Prefix{netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("::/128")}},
	{"link-local", []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fe80::/10")}},
	{"multicast", []netip.Prefix{netip.MustParsePrefix("224.0.0.0/4"), netip.MustParsePrefix("ff00::/8")}},
	{"broadcast", []netip.Prefix{netip.MustParsePrefix("255.255.255.255/32")}},
}

// Allows reports whether the policy allows dst, counting no address as
// the host's own: Check with the host's addresses is what the egress uses.
func (p Policy) Allows(dst netip.AddrPort) bool { return p.Check(dst, nil) == "" }

// Check returns why dst is refused, or "" if the policy allows it. isLocal
// reports the host's own addresses. An IPv4-mapped IPv6 destination is
// refused unless a rule names the mapped range explicitly, and its IPv4
// address must then pass as well: that is the address a socket connects.
func (p Policy) Check(dst netip.AddrPort, isLocal func(netip.Addr) bool) string {
	a := dst.Addr().WithZone("")
	if why := p.check(a, dst.Port(), isLocal); why != "" || !a.Is4In6() {
		return why
	}
	return p.check(a.Unmap(), dst.Port(), isLocal)
}

func (p Policy) check(a netip.Addr, port uint16, isLocal func(netip.Addr) bool) string {
	for _, r := range p.Deny {
		if r.matches(a, port) {
			return "denied by the deny rule " + r.String()
		}
	}
	class := SpecialClass(a, isLocal)
	for _, r := range p.Rules {
		if !r.matches(a, port) {
			continue
		}
		if class == "" || r.names(a, class) {
			return ""
		}
	}
	if class != "" {
		return class + ", refused unless a rule names it"
	}
	return notAllowed
}

// notAllowed is Check's answer when no rule allows a destination.
const notAllowed = "not allowed by policy"

// matches reports whether r covers a on port.
func (r Rule) matches(a netip.Addr, port uint16) bool {
	if !r.Prefix.Contains(a) {
		return false
	}
	if len(r.Ports) == 0 {
		return true
	}
	for _, pr := range r.Ports {
		if port >= pr.Lo && port <= pr.Hi {
			return true
		}
	}
	return false
}

// names reports whether r names the special address a (of class)
// explicitly: its prefix lies inside a's special range, or, for the host's
// own addresses, is that one address.
func (r Rule) names(a netip.Addr, class string) bool {
	for _, c := range specialClasses {
		if c.name != class {
			continue
		}
		for _, p := range c.prefixes {
			if p.Contains(a) && p.Bits() <= r.Prefix.Bits() && p.Contains(r.Prefix.Addr()) {
				return true
			}
		}
		return false
	}
	return r.Prefix.IsSingleIP() && r.Prefix.Addr() == a
}

// String formats the policy as its rules, comma-free and space-separated.
func (p Policy) String() string {
	if len(p.Rules) == 0 {
		return "deny all"
	}
	var b strings.Builder
	for i, r := range p.Rules {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(r.String())
	}
	for _, r := range p.Deny {
		b.WriteString(" except ")
		b.WriteString(r.String())
	}
	return b.String()
}

// String formats r as ParseRule reads it.
func (r Rule) String() string {
	s := r.Prefix.String()
	if r.Prefix.Addr().Is6() {
		s = "[" + s + "]"
	}
	if len(r.Ports) == 0 {
		return s
	}
	ps := make([]string, len(r.Ports))
	for i, pr := range r.Ports {
		if pr.Lo == pr.Hi {
			ps[i] = strconv.Itoa(int(pr.Lo))
		} else {
			ps[i] = fmt.Sprintf("%d-%d", pr.Lo, pr.Hi)
		}
	}
	return s + ":" + strings.Join(ps, ",")
}

// ParseRule reads "CIDR" or "CIDR:PORTS", where PORTS is a comma-separated
// list of ports and ranges ("80,443,8000-8100"); IPv6 prefixes with ports
// are bracketed ("[2001:db8::/32]:443"). A bare address is a /32 or /128.
func ParseRule(s string) (Rule, error) {
	bad := func(why string) (Rule, error) {
		return Rule{}, fmt.Errorf("%w %q: %s (want CIDR or CIDR:PORTS, e.g. 198.18.2.0/24:80,443,8000-8100)", ErrPolicy, s, why)
	}
	pfx, ports := strings.TrimSpace(s), ""
	if strings.HasPrefix(pfx, "[") {
		end := strings.IndexByte(pfx, ']')
		if end < 0 {
			return bad("missing ]")
		}
		rest := pfx[end+1:]
		pfx = pfx[1:end]
		if rest != "" {
			if rest[0] != ':' {
				return bad("expected :PORTS after ]")
			}
			ports = rest[1:]
			if ports == "" {
				return bad("empty port list")
			}
		}
	} else if strings.Count(pfx, ":") == 1 { // IPv4 with ports
		i := strings.IndexByte(pfx, ':')
		pfx, ports = pfx[:i], pfx[i+1:]
		if ports == "" {
			return bad("empty port list")
		}
	}
	var r Rule
	if strings.Contains(pfx, "/") {
		p, err := netip.ParsePrefix(pfx)
		if err != nil {
			return bad(err.Error())
		}
		r.Prefix = p.Masked()
	} else {
		a, err := netip.ParseAddr(pfx)
		if err != nil {
			return bad(err.Error())
		}
		r.Prefix = netip.PrefixFrom(a, a.BitLen())
	}
	if ports == "" {
		return r, nil
	}
	for _, f := range strings.Split(ports, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(f), "-")
		l, err := parsePort(lo)
		if err != nil {
			return bad(err.Error())
		}
		h := l
		if isRange {
			if h, err = parsePort(hi); err != nil {
				return bad(err.Error())
			}
			if h < l {
				return bad(fmt.Sprintf("port range %s is backwards", f))
			}
		}
		r.Ports = append(r.Ports, PortRange{l, h})
	}
	return r, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return uint16(n), nil
}

// ParsePolicy parses allow and deny rules with ParseRule.
func ParsePolicy(allow []string, deny ...string) (Policy, error) {
	var p Policy
	for _, s := range allow {
		r, err := ParseRule(s)
		if err != nil {
			return Policy{}, err
		}
		p.Rules = append(p.Rules, r)
	}
	for _, s := range deny {
		r, err := ParseRule(s)
		if err != nil {
			return Policy{}, err
		}
		p.Deny = append(p.Deny, r)
	}
	return p, nil
}
