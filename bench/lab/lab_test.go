package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/wanem"
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

// downRecorder records the SetDown and SetMTU calls the link helper makes.
type downRecorder struct {
	calls []bool
	mtus  []int
}

func (d *downRecorder) SetDown(down bool) { d.calls = append(d.calls, down) }

func (d *downRecorder) SetMTU(mtu int) error {
	if err := (wanem.Config{MTU: mtu}).Validate(); err != nil {
		return err
	}
	d.mtus = append(d.mtus, mtu)
	return nil
}

// TestLinkCommands feeds the helper's input as the lab writes it: the spec
// is decoded, down and up arrive in order, an unknown command is counted.
func TestLinkCommands(t *testing.T) {
	in := strings.NewReader(`{"a":{"ns":"n1","dev":"wan0"},"b":{"ns":"n2","dev":"wan0"},"ab":{"delay":5000000},"offload":true}` +
		"\ndown\n  up  \nsideways\n\ndown\nmtu 1280\nmtu  1500 \nmtu 10\nmtu x\n")
	spec, control, err := readLinkSpec(in)
	if err != nil {
		t.Fatal(err)
	}
	if spec.A.NS != "n1" || spec.B.NS != "n2" || spec.AB.Delay != 5*time.Millisecond || !spec.Offload {
		t.Fatalf("spec decoded as %+v", spec)
	}
	var rec downRecorder
	ignored := readLinkCommands(control, &rec, io.Discard)
	if fmt.Sprint(rec.calls) != "[true false true]" {
		t.Errorf("SetDown calls %v, want [true false true]", rec.calls)
	}
	if fmt.Sprint(rec.mtus) != "[1280 1500]" {
		t.Errorf("SetMTU calls %v, want [1280 1500]", rec.mtus)
	}
	if ignored != 3 {
		t.Errorf("%d commands ignored, want 3 (the unknown one, MTU 10, MTU x)", ignored)
	}
	if _, _, err := readLinkSpec(strings.NewReader("down\n")); err == nil {
		t.Error("a command before the spec was accepted as a spec")
	}
}
