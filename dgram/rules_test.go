package dgram

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// The matcher works on parsed headers (protocol, destination), never on
// bytes from the network, so it has a table test and no fuzz test; the
// bytes it is fed from are parsed by Parse and parseTCP (FuzzParse,
// FuzzTCP).
func TestNearRulesMatch(t *testing.T) {
	rs, err := ParseNearRules([]string{
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
		{ProtoTCP, "198.18.2.2:80", Optimise},    // a later optimise rule
		{ProtoTCP, "198.18.2.3:22", Optimise},    // another host of the /24
		{ProtoUDP, "198.18.2.2:22", Pass},        // the pass rule is TCP's; default for UDP
		{ProtoUDP, "10.1.1.1:137", Drop},         // first port of the range
		{ProtoUDP, "10.1.1.1:139", Drop},         // last
		{ProtoUDP, "10.1.1.1:140", Pass},         // outside
		{ProtoTCP, "10.1.1.1:137", Optimise},     // the drop is UDP's
		{ProtoTCP, "198.18.2.7:2323", Drop},      // second port of a list
		{ProtoTCP, "198.18.9.1:443", Pass},       // any
		{ProtoICMP, "198.18.9.1:0", Pass},        // any, no ports
		{ProtoICMP, "198.18.3.3:0", Drop},        // a bare address is a /32
		{ProtoICMP, "198.18.3.4:0", Pass},        // default
		{ProtoICMP, "10.1.1.1:0", Pass},          // a rule with ports never matches ICMP
		{ProtoTCP, "[2001:db8::5]:22", Pass},     // IPv6
		{ProtoTCP, "[2001:db8:1::5]:22", Pass},   // first match wins over the later drop
		{ProtoICMPv6, "[2001:db8:1::5]:0", Drop}, // ICMPv6 is icmp (and any)
		{ProtoUDP, "[2001:db8:1::5]:53", Drop},
		{ProtoTCP, "[::ffff:198.18.2.2]:22", Pass}, // mapped addresses as IPv4
		{ProtoTCP, "[2001:db9::1]:22", Optimise},
	} {
		if got := rs.Match(c.proto, ap(c.dst)); got != c.want {
			t.Errorf("Match(%d, %s) = %v, want %v", c.proto, c.dst, got, c.want)
		}
	}
	if got := NearRules(nil).Match(ProtoTCP, ap("1.2.3.4:80")); got != Optimise {
		t.Errorf("no rules, TCP: %v, want optimise", got)
	}
	if got := NearRules(nil).Match(ProtoUDP, ap("1.2.3.4:80")); got != Pass {
		t.Errorf("no rules, UDP: %v, want pass", got)
	}
	if !rs.HasTCPPass() || (NearRules{rs[1]}).HasTCPPass() {
		t.Error("HasTCPPass")
	}
	// String reads back as the same rules.
	back, err := ParseNearRules(strings.Fields(rs.String()))
	if err != nil || back.String() != rs.String() {
		t.Errorf("String %q reads back as %q, %v", rs, back, err)
	}
}

func TestParseNearRuleErrors(t *testing.T) {
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
		_, err := ParseNearRule(c.in)
		if err == nil || !errors.Is(err, ErrNearRule) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseNearRule(%q) = %v, want an ErrNearRule saying %q", c.in, err, c.want)
		}
	}
}

// TestNearDropRules: a drop rule's UDP and pings are dropped and counted
// (Drops.Policy); the rest passes as before, and SetRules applies to the
// next packets.
func TestNearDropRules(t *testing.T) {
	s := &fakeSender{max: 1400}
	rs, err := ParseNearRules([]string{"drop:udp:0.0.0.0/0:137-139", "drop:icmp:198.18.3.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	n := NewNear(NearConfig{Route: func(netip.Addr) Sender { return s }, Write: func([]byte) error { return nil }, Rules: rs})
	netbios := udpPkt(t, "198.18.1.2:137", "198.18.2.255:138", []byte("x"))
	dns := udpPkt(t, "198.18.1.2:5000", "198.18.2.2:53", []byte("q"))
	ping := echo4(t, "198.18.1.2", "198.18.3.3", ICMPEchoRequest, "abcd")
	for _, p := range [][]byte{netbios, dns, ping} {
		if !n.Divert(p) {
			t.Fatal("Divert left a UDP or ping packet to the stack")
		}
	}
	if len(s.sent) != 1 || !bytes.Equal(s.sent[0][1:], dns) {
		t.Fatalf("sent %d datagrams, want the DNS query alone", len(s.sent))
	}
	if st := n.Stats(); st.Drops.Policy != 2 || st.Drops.Total() != 2 || st.UDP.PacketsUp != 1 {
		t.Errorf("stats %+v", st)
	}
	n.SetRules(nil)
	n.Divert(ping)
	if len(s.sent) != 2 || n.Stats().Drops.Policy != 2 {
		t.Errorf("after SetRules(nil): sent %d, %+v", len(s.sent), n.Stats().Drops)
	}
	if got := n.Rules().String(); got != "default" {
		t.Errorf("Rules %q", got)
	}
}
