package lab

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestNamePattern(t *testing.T) {
	for name, want := range map[string]bool{
		"wob123-client": true, "wob1-edgea": true, "wob-client": false,
		"wobx-client": false, "other123-client": false, "wob123-client-x": false,
	} {
		if got := nameRE.MatchString(name); got != want {
			t.Errorf("%q matches = %v, want %v", name, got, want)
		}
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: lab tests create network namespaces and need root (run 'sudo make test')")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping: 'ip' (iproute2) is not installed")
	}
}

// TestBuildAndClose builds both topologies without a link and checks that
// routes are in place and that Close removes every namespace.
func TestBuildAndClose(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	for _, kind := range []Kind{Direct, Edges} {
		l, err := Build(ctx, Options{Kind: kind})
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		names := []string{}
		for _, h := range l.Hosts() {
			names = append(names, h.NS)
		}
		if kind == Edges {
			out, err := l.Command(ctx, l.Client, "ip", "route", "get", l.Server.Addr.String()).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "via 198.18.1.1") {
				t.Errorf("client's route to the server does not go via edgeA: %s %v", out, err)
			}
			out, err = l.Command(ctx, l.EdgeA, "ip", "route", "get", l.Server.Addr.String()).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "dev wan0") {
				t.Errorf("edgeA does not route the server's network over the WAN link: %s %v", out, err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatalf("%s: close: %v", kind, err)
		}
		out, _ := exec.Command("ip", "netns", "list").Output()
		for _, n := range names {
			if strings.Contains(string(out), n) {
				t.Errorf("%s: namespace %s left after Close", kind, n)
			}
		}
	}
}

func TestUnknownKind(t *testing.T) {
	needRoot(t)
	if _, err := Build(context.Background(), Options{Kind: "mesh"}); err == nil {
		t.Fatal("unknown topology accepted")
	}
}
