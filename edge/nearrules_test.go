package edge

import (
	"crypto/rand"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/wanopt/wanopt/ingress"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// TestNearRulesReload: the near rules reach the near side at NewNear
// and change with a reload, which lists them among the changes;
// a configuration that would give them to an edge without interception is
// refused, and the running rules stay.
func TestNearRulesReload(t *testing.T) {
	ka, _ := crypt.GenerateKey(rand.Reader)
	kb, _ := crypt.GenerateKey(rand.Reader)
	rules := func(ss ...string) ingress.Rules {
		rs, err := ingress.ParseRules(ss)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	base := NearConfig{Shared: Shared{PrivateKey: ka, LAN: LAN{TUN: "wo-test", NearRules: rules("pass:tcp:198.18.2.2/32:22")}},
		PeerKey: kb.PublicKey(), Peer: netip.MustParseAddrPort("198.18.0.2:4500")}
	next := base
	base.Reload = func() (Config, error) { return next, nil }
	e, err := NewNear(base)
	if err != nil {
		t.Fatal(err)
	}
	ssh, smb := netip.MustParseAddrPort("198.18.2.2:22"), netip.MustParseAddrPort("198.18.2.2:139")
	if got := e.near.Rules().Match(ingress.ProtoTCP, ssh); got != ingress.Pass {
		t.Fatalf("at New, TCP to %v: %v, want pass", ssh, got)
	}
	if !strings.Contains(e.Status().Config, "near rules: pass:tcp:198.18.2.2/32:22") {
		t.Errorf("status config %q does not show the rules", e.Status().Config)
	}

	next.NearRules = rules("drop:udp:0.0.0.0/0:137-139")
	changed, err := e.Reload()
	if err != nil || len(changed) != 1 || changed[0] != "near rules: drop:udp:0.0.0.0/0:137-139" {
		t.Fatalf("reload: changed %q, err %v", changed, err)
	}
	if got := e.near.Rules().Match(ingress.ProtoTCP, ssh); got != ingress.Optimise {
		t.Errorf("after the reload, TCP to %v: %v, want optimise", ssh, got)
	}
	if got := e.near.Rules().Match(ingress.ProtoUDP, smb); got != ingress.Drop {
		t.Errorf("after the reload, UDP to %v: %v, want drop", smb, got)
	}

	next.TUN = ""
	if _, err := e.Reload(); err == nil || !strings.Contains(err.Error(), "NearRules") {
		t.Errorf("reload to near rules without a TUN: %v, want refused naming NearRules", err)
	}
	if got := fmt.Sprint(e.near.Rules()); got != "drop:udp:0.0.0.0/0:137-139" {
		t.Errorf("the running rules did not stay: %q", got)
	}
}
