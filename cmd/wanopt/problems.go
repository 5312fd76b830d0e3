package main

// The words of input errors: what is wrong with a value, as an operator
// would say it, never the text of Go's parsers.

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"strconv"
	"strings"
)

// fileProblem says why a file could not be read.
func fileProblem(err error) string {
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "no such file"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied: this user may not read it"
	case errors.As(err, &pe):
		return pe.Err.Error()
	}
	return err.Error()
}

// addrProblem says what is wrong with an IP address, or "".
func addrProblem(a string) string {
	if _, err := netip.ParseAddr(a); err == nil {
		return ""
	}
	if strings.Contains(a, "%") {
		return a + ": an address with a zone (%) is not allowed here"
	}
	return a + " is not an IP address"
}

// prefixProblem says what is wrong with a CIDR prefix, or "".
func prefixProblem(s string) string {
	addr, bits, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return "not a prefix: want ADDR/BITS, e.g. 198.18.2.0/24 or 2001:db8::/32"
	}
	if p := addrProblem(addr); p != "" {
		return p
	}
	a, _ := netip.ParseAddr(addr)
	n, err := strconv.Atoi(bits)
	switch {
	case strings.Contains(bits, ":") && a.Is6():
		return "an IPv6 prefix with ports is bracketed: [" + addr + "/" + strings.SplitN(bits, ":", 2)[0] + "]:PORTS"
	case err != nil || bits == "" || bits[0] == '+' || bits[0] == '-':
		return fmt.Sprintf("/%s is not a prefix length", bits)
	case n > a.BitLen():
		v := "IPv4"
		if a.Is6() {
			v = "IPv6"
		}
		return fmt.Sprintf("/%d is longer than an %s address (at most /%d)", n, v, a.BitLen())
	case len(bits) > 1 && bits[0] == '0':
		return fmt.Sprintf("/%s: write the prefix length without leading zeros", bits)
	}
	if _, err := netip.ParsePrefix(s); err != nil {
		return "not a prefix: want ADDR/BITS, e.g. 198.18.2.0/24 or 2001:db8::/32"
	}
	return ""
}

// ruleSyntax ends the errors about CIDR[:PORTS].
const ruleSyntax = "want CIDR[:PORTS], e.g. 198.18.2.0/24:80,443,8000-8100 or [2001:db8::/32]:443"

// ruleProblem says what is wrong with CIDR[:PORTS] (an egress rule), split
// as egress.ParseRule splits it.
func ruleProblem(s string) string {
	pfx, ports := strings.TrimSpace(s), ""
	hasPorts := false
	if strings.HasPrefix(pfx, "[") {
		end := strings.IndexByte(pfx, ']')
		if end < 0 {
			return "missing ] after the IPv6 prefix (" + ruleSyntax + ")"
		}
		rest := pfx[end+1:]
		pfx = pfx[1:end]
		if rest != "" {
			if rest[0] != ':' {
				return "expected :PORTS after ] (" + ruleSyntax + ")"
			}
			ports, hasPorts = rest[1:], true
		}
	} else if strings.Count(pfx, ":") == 1 {
		pfx, ports, hasPorts = pfx[:strings.IndexByte(pfx, ':')], pfx[strings.IndexByte(pfx, ':')+1:], true
	}
	why := ""
	if strings.Contains(pfx, "/") {
		why = prefixProblem(pfx)
	} else {
		why = addrProblem(pfx)
	}
	if why == "" && hasPorts {
		why = portsProblem(ports)
	}
	if why == "" {
		why = "not a destination"
	}
	return why + " (" + ruleSyntax + ")"
}

// portsProblem says what is wrong with a list of ports and ranges, or "".
func portsProblem(ports string) string {
	if ports == "" {
		return "the port list after : is empty"
	}
	for _, f := range strings.Split(ports, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(f), "-")
		l, err := parsePortNumber(lo)
		if err != nil {
			return err.Error()
		}
		if isRange {
			h, err := parsePortNumber(hi)
			if err != nil {
				return err.Error()
			}
			if h < l {
				return fmt.Sprintf("the port range %s is backwards", f)
			}
		}
	}
	return ""
}

// nearRuleProblem says what is wrong with ACTION:PROTO:CIDR[:PORTS], split
// as ingress.ParseRule splits it.
func nearRuleProblem(s string) string {
	const syntax = "want ACTION:PROTO:CIDR[:PORTS], e.g. pass:tcp:198.18.2.2/32:22 or drop:udp:0.0.0.0/0:137-139"
	act, rest, ok1 := strings.Cut(strings.TrimSpace(s), ":")
	proto, dst, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return syntax
	}
	a, p := strings.ToLower(act), strings.ToLower(proto)
	switch {
	case a != "optimise" && a != "optimize" && a != "pass" && a != "drop":
		return fmt.Sprintf("action %q is not optimise, pass or drop (%s)", act, syntax)
	case p != "tcp" && p != "udp" && p != "icmp" && p != "any":
		return fmt.Sprintf("protocol %q is not tcp, udp, icmp or any (%s)", proto, syntax)
	case (a == "optimise" || a == "optimize") && p != "tcp":
		return "optimise terminates TCP only; other protocols can be passed or dropped"
	}
	return "destination " + dst + ": " + ruleProblem(dst)
}
