package harness

import (
	"context"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/harness/labtest"
	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/wanem"
)

// TestIperfOutageInLab runs one iperf transfer with an outage: the link goes
// down on time for its length, the run records it, the interval reports
// show the stall, and the run says when (or that) throughput came back.
func TestIperfOutageInLab(t *testing.T) {
	labtest.NeedLab(t, "iperf", "iperf")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := wanem.Config{Delay: 10 * time.Millisecond, RateBps: 50e6, QueueBytes: 500_000}
	l := labtest.NewLab(t, ctx, lab.Direct, cfg, cfg)
	srv, err := StartIperfServer(ctx, l, l.Server)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.kill()
	run := IperfRun{BytesPerStream: 20 << 20, Streams: 1, Timeout: time.Minute, LinkBps: 50e6,
		OutageAt: 500 * time.Millisecond, OutageFor: time.Second, Interval: ReportInterval(20 * time.Millisecond)}
	r, err := RunIperf(ctx, l, l.Client, srv, run)
	if err != nil {
		t.Fatal(err)
	}
	st := l.StopLink()
	t.Logf("run: %.1f Mbit/s in %.2f s, outage %.3f-%.3f s, recovery %.2f s, %d intervals; outage drops %d/%d",
		r.Mbps, r.Seconds, r.OutageStartS, r.OutageEndS, r.RecoveryS, len(r.Intervals), st.AB.OutageDrops, st.BA.OutageDrops)
	if r.Failed {
		t.Fatalf("the transfer failed: %s", r.Error)
	}
	if d := r.OutageEndS - r.OutageStartS; r.OutageStartS < 0.499 || r.OutageStartS > 0.6 || d < 0.998 || d > 1.1 { // times are rounded to the ms
		t.Errorf("outage %v-%v s, want it from 0.5 s for 1 s", r.OutageStartS, r.OutageEndS)
	}
	if st.AB.OutageDrops+st.BA.OutageDrops == 0 {
		t.Error("the link dropped nothing for the outage")
	}
	if r.IntervalS != 0.1 || len(r.Intervals) < 10 {
		t.Fatalf("interval %v s, %d intervals; want 0.1 s reports over the whole run", r.IntervalS, len(r.Intervals))
	}
	stalled := false
	for _, iv := range r.Intervals {
		if iv.StartS >= r.OutageStartS+0.1 && iv.EndS <= r.OutageEndS && iv.Mbps == 0 {
			stalled = true
		}
	}
	if !stalled {
		t.Errorf("no interval inside the outage shows the stall: %+v", r.Intervals)
	}
	if r.RecoveryS == 0 || (r.RecoveryS != NotRecovered && r.RecoveryS > r.Seconds) {
		t.Errorf("recovery %v s for a transfer of %.2f s hit by the outage", r.RecoveryS, r.Seconds)
	}
}
