package lab_test

import (
	"context"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/measure"
	"github.com/wanopt/wanopt/bench/wanem"
)

// The test binary doubles as the link helper: the lab starts it again
// with this variable set, and TestMain runs the emulator instead of tests.
const helperEnv = "WANOPT_LAB_TEST_LINK_HELPER"

func TestMain(m *testing.M) {
	lab.RunLinkHelperIf(helperEnv)
	os.Exit(m.Run())
}

// maxEdgesRTT bounds TestEdgesCarryTraffic's median RTT (10 ms each way).
const maxEdgesRTT = 32 * time.Millisecond

// TestEdgesCarryTraffic builds the edges topology with a 20 ms link: probes
// cross both edges and the link, with the link's RTT and counters.
func TestEdgesCarryTraffic(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: lab tests create network namespaces and need root (run 'sudo make test')")
	}
	t.Setenv(helperEnv, "1")
	ctx := context.Background()
	l, err := lab.Build(ctx, lab.Options{Kind: lab.Edges, LinkCommand: []string{os.Args[0]}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := wanem.Config{Delay: 10 * time.Millisecond}
	if err := l.StartLink(ctx, cfg, cfg); err != nil {
		t.Fatal(err)
	}
	r, err := measure.RTT(ctx, l.Client.NS, l.Client.Addr, l.Server.NS, l.Server.Addr, 10, 5*time.Millisecond, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The median must show the link's delay once each way: at least 20 ms,
	// and well short of 40 ms (the delay applied twice). The margin above
	// 20 ms is scheduling beside other race-enabled lab tests on two cores.
	if r.Received < 8 || r.Median < 20*time.Millisecond || r.Median > maxEdgesRTT {
		t.Errorf("client→server through the edges: %d of 10 probes, median RTT %v; want ≥8 and 20 ms to %v", r.Received, r.Median, maxEdgesRTT)
	}
	// The same over IPv6: the lab is dual-stack.
	for _, h := range []*lab.Host{l.Client, l.EdgeA, l.EdgeB, l.Server} {
		if !h.Addr6.Is6() || !netip.MustParsePrefix("2001:2::/48").Contains(h.Addr6) {
			t.Errorf("%s's IPv6 address %v: want one in 2001:2::/48", h.Role, h.Addr6)
		}
	}
	r6, err := measure.RTT(ctx, l.Client.NS, l.Client.Addr6, l.Server.NS, l.Server.Addr6, 10, 5*time.Millisecond, time.Second)
	if err != nil {
		t.Fatalf("client→server over IPv6 (%v → %v): %v", l.Client.Addr6, l.Server.Addr6, err)
	}
	if r6.Received < 8 || r6.Median < 20*time.Millisecond || r6.Median > maxEdgesRTT {
		t.Errorf("client→server over IPv6 through the edges: %d of 10 probes, median RTT %v; want ≥8 and 20 ms to %v", r6.Received, r6.Median, maxEdgesRTT)
	}
	st := l.StopLink()
	if n := uint64(r.Received + r6.Received); st.AB.Packets < n || st.BA.Packets < n {
		t.Errorf("link counters %d/%d packets: the %d probes did not cross the emulated link", st.AB.Packets, st.BA.Packets, n)
	}
}

// TestLinkOutage takes the link helper down and up: probes sent while it is
// down are lost and counted as outage drops, and cross again once it is up.
func TestLinkOutage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: lab tests create network namespaces and need root (run 'sudo make test')")
	}
	t.Setenv(helperEnv, "1")
	ctx := context.Background()
	l, err := lab.Build(ctx, lab.Options{Kind: lab.Direct, LinkCommand: []string{os.Args[0]}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.SetLinkDown(true); err == nil {
		t.Error("SetLinkDown without a running link did not fail")
	}
	cfg := wanem.Config{Delay: 2 * time.Millisecond}
	if err := l.StartLink(ctx, cfg, cfg); err != nil {
		t.Fatal(err)
	}
	// probe returns how many of 10 probes came back (measure.RTT fails
	// when none did).
	probe := func() int {
		t.Helper()
		r, err := measure.RTT(ctx, l.Client.NS, l.Client.Addr, l.Server.NS, l.Server.Addr, 10, 5*time.Millisecond, 200*time.Millisecond)
		if err != nil && r.Received != 0 {
			t.Fatal(err)
		}
		return r.Received
	}
	if n := probe(); n < 8 {
		t.Fatalf("before the outage %d of 10 probes came back, want ≥8", n)
	}
	if err := l.SetLinkDown(true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the helper reads the command
	if n := probe(); n != 0 {
		t.Errorf("during the outage %d of 10 probes came back, want 0", n)
	}
	if err := l.SetLinkDown(false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := probe(); n < 8 {
		t.Errorf("after the outage %d of 10 probes came back, want ≥8", n)
	}
	st := l.StopLink()
	if st.AB.OutageDrops < 10 {
		t.Errorf("A→B outage drops %d, want at least the 10 probes", st.AB.OutageDrops)
	}
	if err := l.SetLinkDown(false); err == nil {
		t.Error("SetLinkDown after StopLink did not fail")
	}
}
