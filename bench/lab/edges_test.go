package lab_test

import (
	"context"
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

// TestEdgesCarryTraffic builds the edges topology with a 20 ms link and
// checks that client→server traffic crosses both edges and the link: the
// RTT is the link's, and the link's counters saw the probes.
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
	if r.Received < 8 || r.Median < 20*time.Millisecond || r.Median > 25*time.Millisecond {
		t.Errorf("client→server through the edges: %d of 10 probes, median RTT %v; want ≥8 and 20-25 ms", r.Received, r.Median)
	}
	st := l.StopLink()
	if st.AB.Packets < uint64(r.Received) || st.BA.Packets < uint64(r.Received) {
		t.Errorf("link counters %d/%d packets: the probes did not cross the emulated link", st.AB.Packets, st.BA.Packets)
	}
}
