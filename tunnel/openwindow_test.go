package tunnel

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// path250ms is the long path of bar 1: 250 Mbit/s, 250 ms.
var path250ms = pathConfig{rateBps: 250_000_000, rtt: 250 * time.Millisecond}

// warmUpDownload carries streams of 20 BDPs from server to client (the
// client opens, the server writes) until the server's BBR has left
// Startup: the client has then received at the path's rate.
func warmUpDownload(t *testing.T, n *testNet, seed uint64, path pathConfig) {
	t.Helper()
	bdp := int(float64(path.rateBps) / 8 * path.rtt.Seconds())
	establish(t, n)
	for i := 0; ; i++ {
		cli, srv := bulkNet(n, 0, false, 0)
		srv.perStream = 20 * bdp
		cli.open(n.sim.Now(), 1)
		n.sim.Wake(n.flow)
		n.runUntil(t, 60*time.Second, func() bool { b, f := cli.received(); return f && b == 20*bdp })
		if n.server.c.Stats().BBR.Mode.IsProbeBW() {
			return
		}
		if i == 4 {
			t.Fatalf("seed %d: server BBR in %v after the warm-up", seed, n.server.c.Stats().BBR.Mode)
		}
	}
}

// rampRTTs opens one endless stream on n's warm connection, with data
// flowing toward the client (download) or the server, and returns the time
// in RTTs from its OPEN_RESULT until the receiver's rate over a sliding
// quarter RTT first reaches 80 % of the link (in stream bytes: 1400 of
// every 1500 bytes on the wire), as wanbench's bar 3 measures it.
//
// With dropOpen, the client's first datagram after the open (the one with
// STREAM_OPEN and the credit granted with it) is lost.
func rampRTTs(t *testing.T, n *testNet, path pathConfig, download, dropOpen bool) float64 {
	t.Helper()
	const endless = 1 << 40
	cli, srv := bulkNet(n, 0, false, 0)
	rcv := srv
	if download {
		srv.perStream, rcv = endless, cli
	} else {
		cli.perStream = endless
	}
	var opened monotime.Time
	n.client.onEvent = func(now monotime.Time, ev Event) {
		if ev.Kind == EventOpenResult && opened == 0 {
			opened = now
		}
		cli.onEvent(now, ev)
	}
	cli.open(n.sim.Now(), 1)
	if dropOpen {
		n.client.dropNext = 1
	}
	n.sim.Wake(n.flow)

	window := path.rtt / 4
	step := window / 8
	target := 0.8 * float64(path.rateBps) / 8 * window.Seconds() * 1400 / 1500
	type sample struct {
		at monotime.Time
		n  int
	}
	var hist []sample
	var reached monotime.Time
	var tick func()
	tick = func() {
		now := n.sim.Now()
		got, _ := rcv.received()
		hist = append(hist, sample{now, got})
		for len(hist) > 1 && now.Sub(hist[0].at) > window {
			hist = hist[1:]
		}
		if opened != 0 && now.Sub(hist[0].at) >= window-step/2 && float64(got-hist[0].n) >= target {
			reached = now
			return
		}
		n.sim.At(now.Add(step), tick)
	}
	n.sim.At(n.sim.Now().Add(step), tick)
	n.runUntil(t, 30*path.rtt+10*time.Second, func() bool { return reached != 0 })
	return float64(reached.Sub(opened)) / float64(path.rtt)
}

// TestNewStreamRampWarm is bar 3 on the long path: on a warm connection a
// new stream reaches 80 % of the link within 2 RTTs of its OPEN_RESULT,
// because its receiver grants 2 BDPs at open instead of the initial
// 1 MiB: with OPEN_RESULT when the acceptor receives (upload), with
// STREAM_OPEN when the opener does (download). When the packet with
// STREAM_OPEN is lost, the credit is sent again with it.
func TestNewStreamRampWarm(t *testing.T) {
	for _, tc := range []struct {
		name               string
		download, dropOpen bool
	}{{"upload", false, false}, {"download", true, false}, {"download, open lost", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			const seed = 61
			n := newTestNet(t, seed, path250ms, nil)
			if tc.download {
				warmUpDownload(t, n, seed, path250ms)
			} else {
				warmUp(t, n, seed, path250ms)
			}
			n.sim.RunFor(500 * time.Millisecond)
			rtts := rampRTTs(t, n, path250ms, tc.download, tc.dropOpen)
			for _, e := range []*simEnd{n.client, n.server} {
				if err := e.closedErr(); err != nil {
					t.Fatalf("seed %d, %s: closed: %v", seed, tc.name, err)
				}
			}
			rcv := n.server.c.Stats()
			if tc.download {
				rcv = n.client.c.Stats()
			}
			t.Logf("seed %d, %s: 80%% of the link %.2f RTTs after OPEN_RESULT; receiver's rate estimate %.1f Mbit/s, srtt %v",
				seed, tc.name, rtts, float64(rcv.RecvRateBps)/1e6, rcv.SmoothedRTT)
			if rtts > 2 {
				t.Errorf("seed %d, %s: the new stream took %.2f RTTs to reach 80%% of the link, want <= 2", seed, tc.name, rtts)
			}
		})
	}
}

// TestNewStreamColdKeepsInitialWindow: before any stream data was
// received, a new stream gets the initial window only (no estimate, no
// credit granted on speculation).
func TestNewStreamColdKeepsInitialWindow(t *testing.T) {
	n := newTestNet(t, 62, path250ms, nil)
	establish(t, n)
	id, err := n.client.c.OpenStream(n.sim.Now(), testSrc, testDst)
	if err != nil {
		t.Fatal(err)
	}
	if w, limit := n.client.c.streams[id].recv.RecvWindow(); w != DefaultInitialStreamWindowBytes || limit != DefaultInitialStreamWindowBytes {
		t.Errorf("cold open: window %d, credit %d; want the initial %d", w, limit, DefaultInitialStreamWindowBytes)
	}
	if st := n.client.c.Stats(); st.RecvRateBps != 0 || st.BudgetUsedBytes != DefaultInitialStreamWindowBytes {
		t.Errorf("cold open: receive rate %d bit/s, budget used %d; want 0 and one initial window", st.RecvRateBps, st.BudgetUsedBytes)
	}
}

// TestOpenWindowsShareBudget opens 64 streams at once on a warm 250 ms
// connection: each would like 2 BDPs (about 16 MB), 1 GB in all, but the
// credit granted at open is shared from the memory budget and the total
// stays within it; then every stream still delivers its bytes.
func TestOpenWindowsShareBudget(t *testing.T) {
	const seed, streams, perStream = 63, 64, 1 << 20
	const initWin = 256 << 10
	n := newTestNet(t, seed, path250ms, func(cli, srv *Config) {
		for _, c := range []*Config{cli, srv} {
			c.Stream.InitialStreamWindow = initWin // the floors: 16 MiB for 64 streams
		}
	})
	warmUp(t, n, seed, path250ms)
	n.sim.RunFor(500 * time.Millisecond)

	cli, srv := newBulkApp(n.client.c, perStream, true, 0x64), newBulkApp(n.server.c, 0, true, 0x65)
	n.client.onEvent, n.server.onEvent = cli.onEvent, srv.onEvent
	ids := cli.open(n.sim.Now(), streams)
	n.sim.Wake(n.flow)
	// Until every stream is accepted and its window granted.
	n.runUntil(t, 10*time.Second, func() bool { return len(srv.readers) == streams })
	st := n.server.c.Stats()
	var granted, largest uint64
	for _, id := range ids {
		_, limit := n.server.c.streams[id].recv.RecvWindow()
		granted += limit
		largest = max(largest, limit)
	}
	t.Logf("seed %d: %d streams: credit granted %.1f MiB (largest %.1f MiB), budget used %.1f of %.1f MiB; receive rate %.1f Mbit/s",
		seed, streams, float64(granted)/(1<<20), float64(largest)/(1<<20),
		float64(st.BudgetUsedBytes)/(1<<20), float64(st.BudgetBytes)/(1<<20), float64(st.RecvRateBps)/1e6)
	if st.BudgetUsedBytes > st.BudgetBytes {
		t.Errorf("budget used %d > its limit %d after %d opens", st.BudgetUsedBytes, st.BudgetBytes, streams)
	}
	if granted > st.BudgetBytes {
		t.Errorf("credit granted %d > the budget %d", granted, st.BudgetBytes)
	}
	if largest < 4*initWin {
		t.Errorf("largest window %d: the warm connection granted no more than the initial %d", largest, initWin)
	}

	// The transfer: memory stays bounded (floors aside) and every byte
	// arrives.
	maxUsed := st.BudgetUsedBytes
	n.runUntil(t, 60*time.Second, func() bool {
		maxUsed = max(maxUsed, n.server.c.Stats().BudgetUsedBytes)
		b, f := srv.received()
		return f && b == streams*perStream
	})
	if limit := st.BudgetBytes + streams*initWin; maxUsed > limit {
		t.Errorf("budget used up to %d, want <= %d (budget + floors)", maxUsed, limit)
	}
	checkHashes(t, seed, cli, srv)
}

// TestOpenWindowsLossy opens streams both ways on a connection warmed up
// both ways, over loss, reordering and duplication: STREAM_OPEN and the
// credit that goes with it are lost and retransmitted together, and
// OPEN_RESULT and its credit apart, without a protocol error or a byte
// lost.
func TestOpenWindowsLossy(t *testing.T) {
	const streams, perStream = 8, 2 << 20
	path := pathConfig{rateBps: 100_000_000, rtt: 100 * time.Millisecond, lossPct: 1, reorderPct: 0.3, dupPct: 0.5}
	seeds := []uint64{1, 2}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, seed := range seeds {
		n := newTestNet(t, seed, path, nil)
		for round := range 2 { // the first round warms up, the second opens on warm estimates
			cli, srv := newBulkApp(n.client.c, perStream, true, seed+uint64(round)), newBulkApp(n.server.c, perStream, true, ^seed)
			n.client.onEvent, n.server.onEvent = cli.onEvent, srv.onEvent
			if round == 0 {
				establish(t, n)
			}
			ids := cli.open(n.sim.Now(), streams)
			srv.open(n.sim.Now(), streams)
			if round == 1 {
				// The client has received at about the path's rate: its new
				// streams were granted more than the initial window.
				if _, limit := n.client.c.streams[ids[0]].recv.RecvWindow(); limit <= DefaultInitialStreamWindowBytes {
					t.Errorf("seed %d: stream %d opened with credit %d on a warm connection", seed, ids[0], limit)
				}
			}
			n.sim.Wake(n.flow)
			n.runUntil(t, 120*time.Second, func() bool {
				a, fa := cli.received()
				b, fb := srv.received()
				return fa && fb && a == 2*streams*perStream && b == 2*streams*perStream
			})
			checkHashes(t, seed, cli, srv)
			checkHashes(t, seed, srv, cli)
			if err := n.client.closedErr(); err != nil {
				t.Fatalf("seed %d: client closed: %v", seed, err)
			}
			if err := n.server.closedErr(); err != nil {
				t.Fatalf("seed %d: server closed: %v", seed, err)
			}
		}
		cs, ss := n.client.c.Stats(), n.server.c.Stats()
		t.Logf("seed %d: receive rates: client %.1f, server %.1f Mbit/s; lost %d and %d packets",
			seed, float64(cs.RecvRateBps)/1e6, float64(ss.RecvRateBps)/1e6, cs.PacketsLost, ss.PacketsLost)
		if cs.RecvRateBps == 0 || ss.RecvRateBps == 0 {
			t.Errorf("seed %d: no receive-rate estimate after the warm-up", seed)
		}
	}
}

// TestThroughputWarmLongPath is bar 1 at 250 ms: 4 streams x 100 MB on a
// warm 250 Mbit/s connection reach a link ratio of 0.92. With -short the
// streams carry 25 MB and the floor is 0.90, as the first round trip's
// ramp weighs four times more.
func TestThroughputWarmLongPath(t *testing.T) {
	perStream, floor := 100<<20, 0.92
	if testing.Short() {
		perStream, floor = 25<<20, 0.90
	}
	f := measureBars(t, 11, path250ms, 4, perStream)
	t.Logf("250 Mbit/s, 250 ms, no loss, 4 x %d MB: %v", perStream>>20, f)
	if f.ratio < floor {
		t.Errorf("link ratio %.3f, want >= %.2f", f.ratio, floor)
	}
}
