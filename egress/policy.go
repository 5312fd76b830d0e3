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

// Policy says which destinations the egress connects to. The zero Policy
// allows nothing: an egress is never an open proxy unless told to be
// (a rule for 0.0.0.0/0 and ::/0).
type Policy struct {
	Rules []Rule
}

// Allows reports whether some rule allows dst.
func (p Policy) Allows(dst netip.AddrPort) bool {
	a := dst.Addr().Unmap()
	for _, r := range p.Rules {
		if !r.Prefix.Contains(a) {
			continue
		}
		if len(r.Ports) == 0 {
			return true
		}
		for _, pr := range r.Ports {
			if dst.Port() >= pr.Lo && dst.Port() <= pr.Hi {
				return true
			}
		}
	}
	return false
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

// ParsePolicy parses each rule with ParseRule.
func ParsePolicy(rules []string) (Policy, error) {
	var p Policy
	for _, s := range rules {
		r, err := ParseRule(s)
		if err != nil {
			return Policy{}, err
		}
		p.Rules = append(p.Rules, r)
	}
	return p, nil
}
