package tunnel

import (
	"errors"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/netsim"
)

// pausedRun opens paused+1 streams from the client on a path of rateBps
// and rtt; the server sends perStream bytes on each. The client reads
// stopAt bytes of paused of them and stops (clients that asked for more
// than they read), then reads the last one to its end. It returns how long
// that stream took from the moment the others had stopped, and how long
// the link needs for the same bytes alone; it fails the test if the stream
// did not end within limit.
func pausedRun(t *testing.T, rateBps int64, rtt time.Duration, paused, stopAt, perStream int, limit time.Duration) (took, alone time.Duration) {
	t.Helper()
	n := newTestNet(t, 1, pathConfig{rateBps: rateBps, rtt: rtt}, nil)
	cli, _ := bulkNet(n, 0, false, paused+1)
	srv := newBulkApp(n.server.c, perStream, false, 0xb0b)
	n.server.onEvent = srv.onEvent
	n.runUntil(t, 10*time.Second, func() bool { return len(cli.readers) == paused+1 })
	var live *reader
	for _, r := range cli.readers {
		if paused > 0 {
			r.stopAt = stopAt
			paused--
		} else {
			live = r
		}
	}
	n.runUntil(t, 120*time.Second, func() bool {
		for _, r := range cli.readers {
			if r != live && r.n < r.stopAt {
				return false
			}
		}
		return true
	})
	start, from := n.sim.Now(), live.n
	alone = time.Duration(perStream-from) * 8 * time.Second / time.Duration(rateBps)
	err := n.sim.RunUntil(func() bool { return live.fin }, start.Add(limit))
	if err != nil && !errors.Is(err, netsim.ErrDeadline) {
		t.Fatal(err)
	}
	if !live.fin {
		t.Fatalf("the live stream read %d of %d bytes in %v beside %d paused ones (%d bytes unread at the client, connection credit at the server %d)",
			live.n, perStream, n.sim.Now().Sub(start), len(cli.readers)-1, n.client.c.Stats().ConnRecvUnreadBytes, n.server.c.Stats().ConnSendCreditBytes)
	}
	return live.finAt.Sub(start), alone
}

// TestPausedStreamsDoNotStallOthers: streams whose application stops
// reading must leave the connection's other streams their credit. Three
// streams on a 1 Gbit/s, 2 ms path, where the connection window stays
// near its floor; the server sends 48 MiB on each; the client reads
// 8 MiB of two and stops, and reads the third to its end, which must end
// within twice the time the link needs for its bytes alone.
func TestPausedStreamsDoNotStallOthers(t *testing.T) {
	took, alone := pausedRun(t, 1_000_000_000, 2*time.Millisecond, 2, 8<<20, 48<<20, 30*time.Second)
	t.Logf("the live stream's last bytes took %v beside two paused streams (%v alone on the link)", took, alone)
	if took > 2*alone {
		t.Errorf("the live stream took %v, more than twice the %v the link needs for it", took, alone)
	}
}

// TestPausedStreamsTakeNoSendShare: the sender's streams that the peer's
// credit blocks must not take shares of the send cap. Sixteen streams on
// a 250 Mbit/s, 100 ms path are read to 8 MiB and stop; the seventeenth
// is read to its end (48 MiB) and must take at most 2.5 times the
// link's time.
func TestPausedStreamsTakeNoSendShare(t *testing.T) {
	took, alone := pausedRun(t, 250_000_000, 100*time.Millisecond, 16, 8<<20, 48<<20, 60*time.Second)
	t.Logf("the live stream's last bytes took %v beside sixteen paused streams (%v alone on the link)", took, alone)
	if took > 5*alone/2 {
		t.Errorf("the live stream took %v, more than 2.5 times the %v the link needs for it", took, alone)
	}
}
