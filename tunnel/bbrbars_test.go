package tunnel

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// This file checks the BBR bars on warm connections over netsim: link
// ratio without loss from 1 to 200 ms, with 1 % random loss at 100 ms
// over several seeds, with 0.5 % loss on a 600 ms 50 Mbit/s GEO path, and
// the number of ProbeRTT episodes in 30 s at 250 ms.
//
// With WANOPT_BBR_BARS=1 the transfers have the bars' size (4 x 100 MB
// lossless, 4 x 50 MB lossy, more seeds) and the bars themselves are
// asserted (link ratio >= 0.92 lossless, >= 0.85 lossy); that takes
// about a minute of CPU. By default the transfers are a quarter of that
// and the floors lower, since every transfer pays a fixed ramp that
// weighs more on a short one. The floors still catch a collapse of BBR's
// model under random loss and ProbeRTT running on a path whose min RTT
// is re-measured every cycle.

// fullBars reports whether the full-sized runs were asked for.
func fullBars() bool { return os.Getenv("WANOPT_BBR_BARS") != "" }

// barFigures are what one measured transfer reports.
type barFigures struct {
	ratio      float64 // application goodput / link rate
	retransPct float64 // stream bytes retransmitted / new stream bytes sent
	lossPct    float64 // packets declared lost / packets sent
	probeRTTs  int     // ProbeRTT episodes during the transfer
	elapsed    time.Duration
}

func (f barFigures) String() string {
	return fmt.Sprintf("link_ratio=%.3f retrans_pct=%.2f loss_pct=%.2f probe_rtt=%d elapsed=%v",
		f.ratio, f.retransPct, f.lossPct, f.probeRTTs, f.elapsed.Round(time.Millisecond))
}

// measureBars warms a connection up on path, idles 500 ms, then moves
// streams x perStream bytes from client to server and returns the figures
// of that transfer, from the first OPEN_RESULT to the last byte read.
func measureBars(t *testing.T, seed uint64, path pathConfig, streams, perStream int) barFigures {
	t.Helper()
	n := newTestNet(t, seed, path, nil)
	warmUp(t, n, seed, path)
	n.sim.RunFor(500 * time.Millisecond)

	warm := n.client.c.Stats()
	f := barFigures{elapsed: timedTransfer(t, n, streams, perStream, 7, 300*time.Second)}
	cs := n.client.c.Stats()
	f.ratio = float64(streams*perStream) * 8 / f.elapsed.Seconds() / float64(path.rateBps)
	if sent := cs.StreamBytesSent - warm.StreamBytesSent; sent > 0 {
		f.retransPct = 100 * float64(cs.StreamBytesRetransmitted-warm.StreamBytesRetransmitted) / float64(sent)
	}
	if sent := cs.PacketsSent - warm.PacketsSent; sent > 0 {
		f.lossPct = 100 * float64(cs.PacketsLost-warm.PacketsLost) / float64(sent)
	}
	f.probeRTTs = cs.BBR.ProbeRTTCount - warm.BBR.ProbeRTTCount
	return f
}

// perStreamFor returns the bytes per stream (of 4) that keep the link busy
// for about d.
func perStreamFor(rateBps int64, d time.Duration) int {
	return int(float64(rateBps) / 8 * d.Seconds() / 4)
}

// TestBBRBarsLossless is bar 1: no loss, 250 Mbit/s, warm connection, 4
// streams, link ratio >= 0.92 at every RTT.
func TestBBRBarsLossless(t *testing.T) {
	perStream, floor := 25<<20, 0.85
	rtts := []time.Duration{time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}
	switch {
	case fullBars():
		perStream, floor = 100<<20, 0.92
	case testing.Short():
		rtts = rtts[2:3]
	}
	for _, rtt := range rtts {
		t.Run(rtt.String(), func(t *testing.T) {
			path := pathConfig{rateBps: 250_000_000, rtt: rtt}
			f := measureBars(t, 11, path, 4, perStream)
			t.Logf("250 Mbit/s, rtt %v, no loss, 4 x %d MB: %v", rtt, perStream>>20, f)
			if f.ratio < floor {
				t.Errorf("rtt %v: link ratio %.3f, want >= %.2f", rtt, f.ratio, floor)
			}
		})
	}
}

// TestBBRBarsRandomLoss is bar 2 at 100 ms: 1 % random loss each way,
// several seeds, link ratio >= 0.85 for each.
func TestBBRBarsRandomLoss(t *testing.T) {
	perStream, floor := 12<<20, 0.75
	seeds := []uint64{1, 2, 3}
	switch {
	case fullBars():
		perStream, floor = 50<<20, 0.85
		seeds = []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	case testing.Short():
		seeds = seeds[:1]
	}
	path := pathConfig{rateBps: 250_000_000, rtt: 100 * time.Millisecond, lossPct: 1}
	for _, seed := range seeds {
		f := measureBars(t, seed, path, 4, perStream)
		t.Logf("seed %d: 250 Mbit/s, 100 ms, 1%% loss, 4 x %d MB: %v", seed, perStream>>20, f)
		if f.ratio < floor {
			t.Errorf("seed %d: link ratio %.3f with 1%% loss, want >= %.2f", seed, f.ratio, floor)
		}
		if f.probeRTTs > 0 {
			t.Errorf("seed %d: %d ProbeRTT episodes in %v", seed, f.probeRTTs, f.elapsed)
		}
	}
}

// TestBBRBarsGEO is bar 2 on a GEO path: 600 ms, 50 Mbit/s, 0.5 % loss.
func TestBBRBarsGEO(t *testing.T) {
	d, floor := 10*time.Second, 0.75
	seeds := []uint64{1}
	if fullBars() {
		d, floor = 20*time.Second, 0.85
		seeds = []uint64{1, 2, 3, 4}
	} else if testing.Short() {
		t.Skip("GEO warm-up takes a minute of simulated time")
	}
	path := pathConfig{rateBps: 50_000_000, rtt: 600 * time.Millisecond, lossPct: 0.5}
	for _, seed := range seeds {
		f := measureBars(t, seed, path, 4, perStreamFor(path.rateBps, d))
		t.Logf("seed %d: 50 Mbit/s, 600 ms, 0.5%% loss, %v of data: %v", seed, d, f)
		if f.ratio < floor {
			t.Errorf("seed %d: link ratio %.3f with 0.5%% loss at 600 ms, want >= %.2f", seed, f.ratio, floor)
		}
	}
}

// TestBBRBarsProbeRTT counts ProbeRTT episodes in 30 s of bulk transfer at
// 250 ms: the path's min RTT is re-measured in ProbeBW DOWN and CRUISE
// (within one packet's serialisation of the minimum a small packet set),
// so ProbeRTT must not run at all.
func TestBBRBarsProbeRTT(t *testing.T) {
	rate := int64(50_000_000)
	if fullBars() {
		rate = 250_000_000
	}
	path := pathConfig{rateBps: rate, rtt: 250 * time.Millisecond}
	f := measureBars(t, 21, path, 4, perStreamFor(path.rateBps, 30*time.Second))
	t.Logf("%d Mbit/s, 250 ms, no loss, 30 s of data: %v", rate/1e6, f)
	if f.probeRTTs > 0 {
		t.Errorf("%d ProbeRTT episodes in %v of bulk transfer, want 0", f.probeRTTs, f.elapsed)
	}
	if f.ratio < 0.92 {
		t.Errorf("link ratio %.3f, want >= 0.92", f.ratio)
	}
}
