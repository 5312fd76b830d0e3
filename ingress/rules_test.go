package ingress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/wanopt/wanopt/dgram/packet"
)

// The matcher works on parsed headers (protocol, destination), never on
// bytes from the network, so it has a table test and no fuzz test; the
// bytes it is fed from are parsed by package packet and passthru (FuzzParse,
// FuzzTCP).
func TestRulesMatch(t *testing.T) {
	rs, err := ParseRules([]string{
		"pass:tcp:198.18.2.2/32:22",
		"drop:udp:0.0.0.0/0:137-139",
		"drop:tcp:198.18.2.0/24:23,2323",
		"optimise:tcp:198.18.2.0/24",
		"pass:any:198.18.9.0/24",
		"drop:icmp:198.18.3.3",
		"pass:tcp:[2001:db8::/32]:22",
		"drop:any:[2001:db8:1::/48]",
	})
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort
	for _, c := range []struct {
		proto uint8
		dst   string
		want  Action
	}{
		{ProtoTCP, "198.18.2.2:22", Pass},
		{ProtoTCP, "198.18.2.2:80", Optimise},           // a later optimise rule
		{ProtoTCP, "198.18.2.3:22", Optimise},           // another host of the /24
		{ProtoUDP, "198.18.2.2:22", Pass},               // the pass rule is TCP's; default for UDP
		{ProtoUDP, "10.1.1.1:137", Drop},                // first port of the range
		{ProtoUDP, "10.1.1.1:139", Drop},                // last
		{ProtoUDP, "10.1.1.1:140", Pass},                // outside
		{ProtoTCP, "10.1.1.1:137", Optimise},            // the drop is UDP's
		{ProtoTCP, "198.18.2.7:2323", Drop},             // second port of a list
		{ProtoTCP, "198.18.9.1:443", Pass},              // any
		{ProtoICMP, "198.18.9.1:0", Pass},               // any, no ports
		{ProtoICMP, "198.18.3.3:0", Drop},               // a bare address is a /32
		{ProtoICMP, "198.18.3.4:0", Pass},               // default
		{ProtoICMP, "10.1.1.1:0", Pass},                 // a rule with ports never matches ICMP
		{ProtoTCP, "[2001:db8::5]:22", Pass},            // IPv6
		{ProtoTCP, "[2001:db8:1::5]:22", Pass},          // first match wins over the later drop
		{packet.ProtoICMPv6, "[2001:db8:1::5]:0", Drop}, // ICMPv6 is icmp (and any)
		{ProtoUDP, "[2001:db8:1::5]:53", Drop},
		{ProtoTCP, "[::ffff:198.18.2.2]:22", Pass}, // mapped addresses as IPv4
		{ProtoTCP, "[2001:db9::1]:22", Optimise},
	} {
		if got := rs.Match(c.proto, ap(c.dst)); got != c.want {
			t.Errorf("Match(%d, %s) = %v, want %v", c.proto, c.dst, got, c.want)
		}
	}
	if got := Rules(nil).Match(ProtoTCP, ap("1.2.3.4:80")); got != Optimise {
		t.Errorf("no rules, TCP: %v, want optimise", got)
	}
	if got := Rules(nil).Match(ProtoUDP, ap("1.2.3.4:80")); got != Pass {
		t.Errorf("no rules, UDP: %v, want pass", got)
	}
	if !rs.HasTCPPass() || (Rules{rs[1]}).HasTCPPass() {
		t.Error("HasTCPPass")
	}
	// String reads back as the same rules.
	back, err := ParseRules(strings.Fields(rs.String()))
	if err != nil || back.String() != rs.String() {
		t.Errorf("String %q reads back as %q, %v", rs, back, err)
	}
}

func TestParseRuleErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"pass", "missing fields"},
		{"pass:tcp", "missing fields"},
		{"allow:tcp:10.0.0.0/8", `action "allow"`},
		{"pass:sctp:10.0.0.0/8", `protocol "sctp"`},
		{"optimise:udp:10.0.0.0/8", "optimise terminates TCP only"},
		{"optimise:any:10.0.0.0/8", "optimise terminates TCP only"},
		{"pass:tcp:10.0.0.0/33", "10.0.0.0/33"},
		{"pass:tcp:10.0.0.0/8:0", "port"},
		{"drop:udp:10.0.0.0/8:139-137", "backwards"},
		{"pass:tcp:2001:db8::/32:22", "pass:tcp:2001:db8::/32:22"}, // IPv6 with ports wants brackets
	} {
		_, err := ParseRule(c.in)
		if err == nil || !errors.Is(err, ErrRule) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseRule(%q) = %v, want an ErrRule saying %q", c.in, err, c.want)
		}
	}
}
