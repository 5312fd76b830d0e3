package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/wanem"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/tunnel"
)

// TestEdgePathMTU: the emulated link carries IP
// packets of at most 1280 bytes each way and drops larger ones silently
// (a black hole, no ICMP). A 20 MB hash-checked TCP transfer through the
// edges (echoed: 20 MB each way) completes; both edges' status shows the
// path MTU they found, the link's 1280 less the IPv4 and UDP headers; no
// IP fragment crossed the link; and once the link's MTU is raised to 1500
// mid-run, both edges find the larger size within a minute.
func TestEdgePathMTU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const small, large = 1280, 1500
	link := wanem.Config{Delay: 50 * time.Millisecond, RateBps: 100_000_000, MTU: small}
	ab, ba := link, link
	ab.Seed, ba.Seed = 1, 2
	e := startEdgeLab(t, ctx, ab, ba, harness.EdgeOptions{})
	wantSmall := tunnel.MaxUDPPayloadBytesForMTU(e.l.EdgeB.Addr, small)
	wantLarge := tunnel.MaxUDPPayloadBytesForMTU(e.l.EdgeB.Addr, large)

	took := echoHashed(t, ctx, e.l.Client.NS, 20<<20, 7, 90*time.Second)
	t.Logf("20 MB echoed through the edges (20 MB each way) intact in %v over a 1280-byte MTU", took.Round(time.Millisecond))

	status := func(side string) *control.Tunnel {
		t.Helper()
		var st control.Status
		if err := queryControl(e.sock(side), "status", &st); err != nil || st.Tunnel == nil {
			t.Fatalf("%s edge's status: %+v, %v", side, st.Tunnel, err)
		}
		return st.Tunnel
	}
	// The search may still be on its last size when the transfer ends.
	settled := func() bool {
		for _, side := range []string{"near", "far"} {
			if tn := status(side); tn.PathMTUBytes != wantSmall || tn.PathMTUSearching {
				return false
			}
		}
		return true
	}
	for end := time.Now().Add(20 * time.Second); !settled() && time.Now().Before(end); {
		time.Sleep(250 * time.Millisecond)
	}
	for _, side := range []string{"near", "far"} {
		tn := status(side)
		t.Logf("%s edge: path MTU %d B (ceiling %d, searching %v), %d probes lost, %d black holes, %d stream bytes retransmitted",
			side, tn.PathMTUBytes, tn.PathMTUCeiling, tn.PathMTUSearching, tn.PMTUProbesLost, tn.PMTUBlackHoles, tn.Retransmitted)
		if tn.PathMTUBytes != wantSmall || tn.PathMTUSearching {
			t.Errorf("%s edge: path MTU %d B (searching %v), want %d found (a %d-byte link less 28 bytes of IPv4 and UDP headers)",
				side, tn.PathMTUBytes, tn.PathMTUSearching, wantSmall, small)
		}
	}
	code, out, errs := run("status", "--control", e.sock("near"))
	if want := "path mtu: " + strconv.Itoa(wantSmall) + " B"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("wanopt status (code %d, %q) does not show %q:\n%s", code, errs, want, out)
	}

	if err := e.l.SetLinkMTU(large); err != nil {
		t.Fatal(err)
	}
	raised := time.Now()
	found := map[string]time.Duration{}
	for len(found) < 2 && time.Since(raised) < 70*time.Second {
		time.Sleep(250 * time.Millisecond)
		for _, side := range []string{"near", "far"} {
			if _, ok := found[side]; !ok && status(side).PathMTUBytes == wantLarge {
				found[side] = time.Since(raised)
			}
		}
	}
	for _, side := range []string{"near", "far"} {
		d, ok := found[side]
		switch {
		case !ok:
			t.Errorf("%s edge: path MTU %d B %v after the link's MTU went to %d, want %d", side, status(side).PathMTUBytes,
				time.Since(raised).Round(time.Second), large, wantLarge)
		case d > time.Minute:
			t.Errorf("%s edge: the raised MTU found after %v, want within a minute", side, d.Round(time.Millisecond))
		default:
			t.Logf("%s edge: path MTU %d B found %v after the link's MTU went to %d", side, wantLarge, d.Round(time.Millisecond), large)
		}
	}
	// The larger size carries data too.
	echoHashed(t, ctx, e.l.Client.NS, 4<<20, 8, 60*time.Second)

	st := e.l.StopLink()
	t.Logf("link A→B: %d packets, %d dropped over the MTU, %d fragments; B→A: %d packets, %d dropped over the MTU, %d fragments",
		st.AB.Packets, st.AB.MTUDrops, st.AB.Fragments, st.BA.Packets, st.BA.MTUDrops, st.BA.Fragments)
	if st.AB.Fragments != 0 || st.BA.Fragments != 0 {
		t.Errorf("IP fragments crossed the link: %d A→B, %d B→A; want none", st.AB.Fragments, st.BA.Fragments)
	}
	if st.AB.Packets == 0 || st.AB.MTUDrops == 0 || st.BA.MTUDrops == 0 {
		t.Errorf("the link's counters say it did not test: %d packets A→B, %d and %d dropped over the MTU", st.AB.Packets, st.AB.MTUDrops, st.BA.MTUDrops)
	}
}
