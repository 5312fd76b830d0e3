package tunnel

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// TestRekeyDuringTransfer moves 1 GB each way (hash-checked; 128 MB under
// -race or -short) at 250 Mbit/s and 50 ms in virtual time, over a queue
// deep enough that nothing is lost, while the client rekeys every 500 ms:
// at least five rekeys happen, both sides agree on them, every byte
// arrives, and around each rekey (from one RTT before to two after) the
// longest gap between two deliveries stays under one RTT.
func TestRekeyDuringTransfer(t *testing.T) {
	total := 1 << 30
	if testing.Short() || raceEnabled {
		total = 128 << 20
	}
	const streams = 4
	path := pathConfig{rateBps: 250_000_000, rtt: 50 * time.Millisecond, queueBDPs: 8}
	n := newTestNet(t, 7, path, func(cli, srv *Config) {
		cli.RekeyAfter = 500 * time.Millisecond
	})
	cli, srv := bulkNet(n, total/streams, true, streams)
	type gap struct{ from, to monotime.Time }
	var gaps []gap
	var rekeys []monotime.Time
	var last monotime.Time
	var lastBytes int
	var lastRekeys uint64
	n.runUntil(t, 10*time.Minute, func() bool {
		a, fa := cli.received()
		b, fb := srv.received()
		now := n.sim.Now()
		if a+b != lastBytes {
			if last != 0 && now.Sub(last) > path.rtt/5 {
				gaps = append(gaps, gap{last, now})
			}
			last, lastBytes = now, a+b
		}
		if r := n.client.c.Stats().Rekeys; r != lastRekeys {
			rekeys, lastRekeys = append(rekeys, now), r
		}
		return fa && fb && a == total && b == total
	})
	checkHashes(t, 7, cli, srv)
	checkHashes(t, 7, srv, cli)
	var worst time.Duration
	for _, g := range gaps {
		for _, r := range rekeys {
			if g.to > r.Add(-path.rtt) && g.from < r.Add(2*path.rtt) {
				worst = max(worst, g.to.Sub(g.from))
			}
		}
	}
	cs, ss := n.client.c.Stats(), n.server.c.Stats()
	t.Logf("%d MB each way in %v; rekeys: client %d, server %d; longest gap in deliveries around a rekey %v; packets lost %d",
		total>>20, n.sim.Elapsed().Round(time.Millisecond), cs.Rekeys, ss.Rekeys, worst, cs.PacketsLost+ss.PacketsLost)
	// The server switches at the client's first packet under the new
	// keys: a rekey in the last round trip may not have reached it.
	if cs.Rekeys < 5 || ss.Rekeys+1 < cs.Rekeys || ss.Rekeys > cs.Rekeys {
		t.Errorf("rekeys: client %d, server %d; want at least 5, the server at most one behind", cs.Rekeys, ss.Rekeys)
	}
	if worst >= path.rtt {
		t.Errorf("a rekey stalled deliveries for %v; want less than one RTT (%v)", worst, path.rtt)
	}
	if cs.DroppedUnauthenticated != 0 || ss.DroppedUnauthenticated != 0 {
		t.Errorf("unauthenticated drops: client %d, server %d; want none", cs.DroppedUnauthenticated, ss.DroppedUnauthenticated)
	}
}
