package tunnel

import (
	"errors"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/netsim"
)

// TestPausedStreamsDoNotStallOthers: streams whose application stops
// reading (clients that asked for more than they read) must leave the
// connection's other streams their credit. The client opens three
// streams on a 1 Gbit/s, 2 ms path and the server sends 48 MiB on each;
// the client reads 8 MiB of the first two and stops, and reads the third
// to its end. On so short a path the connection window stays near its
// floor (1.5 times the largest stream window), and when bytes counted
// against it until read, the two paused streams took all of it: the
// third stalled for good at 10 of its 48 MiB. It must now end within
// twice the time the link needs for its bytes alone.
func TestPausedStreamsDoNotStallOthers(t *testing.T) {
	const (
		seed      = 1
		perStream = 48 << 20
		rateBps   = 1_000_000_000
	)
	n := newTestNet(t, seed, pathConfig{rateBps: rateBps, rtt: 2 * time.Millisecond}, nil)
	cli, _ := bulkNet(n, 0, false, 3)
	srv := newBulkApp(n.server.c, perStream, false, 0xb0b)
	n.server.onEvent = srv.onEvent
	n.runUntil(t, 10*time.Second, func() bool { return len(cli.readers) == 3 })
	var live *reader
	paused := 0
	for _, r := range cli.readers {
		if paused < 2 {
			r.stopAt = 8 << 20
			paused++
		} else {
			live = r
		}
	}
	start := n.sim.Now()
	alone := time.Duration(perStream*8) * time.Second / rateBps
	err := n.sim.RunUntil(func() bool { return live.fin }, start.Add(2*alone+5*time.Second))
	if err != nil && !errors.Is(err, netsim.ErrDeadline) {
		t.Fatal(err)
	}
	if !live.fin {
		t.Fatalf("the live stream read %d of %d bytes in %v beside two paused ones (%d bytes unread at the client, send credit at the server %d)",
			live.n, perStream, n.sim.Now().Sub(start), n.client.c.Stats().ConnRecvUnreadBytes, n.server.c.Stats().ConnSendCreditBytes)
	}
	took := live.finAt.Sub(start)
	t.Logf("the live stream read %d bytes in %v beside two paused ones (%v alone on the link); %d bytes wait unread",
		live.n, took, alone, n.client.c.Stats().ConnRecvUnreadBytes)
	if took > 2*alone {
		t.Errorf("the live stream took %v, more than twice the %v the link needs for it", took, alone)
	}
}
