package tunnel

import (
	"errors"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/netsim"
)

func TestOutageShorterThanIdleTimeoutLosesNothing(t *testing.T) {
	const streams, perStream = 2, 8 << 20
	path := pathConfig{rateBps: 50_000_000, rtt: 100 * time.Millisecond,
		outages: []netsim.Outage{{Start: 1 * time.Second, End: 11 * time.Second}}}
	n := newTestNet(t, 21, path, nil)
	cli, srv := bulkNet(n, perStream, true, streams)
	// Find when packets flow again after the outage.
	var resumed time.Duration
	var last netsim.FlowStats
	var probe func()
	probe = func() {
		fs := n.sim.FlowStats(n.flow)
		if resumed == 0 && n.sim.Elapsed() > 11*time.Second && fs.ForwardPackets > last.ForwardPackets && fs.ReversePackets > last.ReversePackets {
			resumed = n.sim.Elapsed()
		}
		last = fs
		n.sim.At(n.sim.Now().Add(10*time.Millisecond), probe)
	}
	n.sim.At(n.sim.Now().Add(10*time.Second), probe)
	n.runUntil(t, 60*time.Second, func() bool {
		a, fa := cli.received()
		b, fb := srv.received()
		return fa && fb && a == streams*perStream && b == streams*perStream
	})
	checkHashes(t, 21, cli, srv)
	checkHashes(t, 21, srv, cli)
	if n.sim.Elapsed() < 11*time.Second {
		t.Fatalf("finished at %v, before the outage ended: the outage did not hit the transfer", n.sim.Elapsed())
	}
	if err := n.client.closedErr(); err != nil {
		t.Errorf("client closed: %v", err)
	}
	if err := n.server.closedErr(); err != nil {
		t.Errorf("server closed: %v", err)
	}
	cs := n.client.c.Stats()
	t.Logf("10 s outage (1 s to 11 s): traffic resumed at %v, done at %v; client PTOs %d, lost %d, retransmitted %d B; BBR bw after %.1f Mbit/s",
		resumed, n.sim.Elapsed(), cs.PTOs, cs.PacketsLost, cs.StreamBytesRetransmitted, float64(cs.BandwidthBps)/1e6)
}

func TestOutageLongerThanIdleTimeoutClosesBothEnds(t *testing.T) {
	path := pathConfig{rateBps: 50_000_000, rtt: 100 * time.Millisecond,
		outages: []netsim.Outage{{Start: 1 * time.Second, End: 41 * time.Second}}}
	n := newTestNet(t, 22, path, nil)
	bulkNet(n, 64<<20, false, 2)
	n.runUntil(t, 60*time.Second, func() bool { return n.client.c.Closed() && n.server.c.Closed() })
	for _, e := range []*simEnd{n.client, n.server} {
		if err := e.closedErr(); !errors.Is(err, ErrIdleTimeout) {
			t.Errorf("closed with %v, want ErrIdleTimeout", err)
		}
	}
	// Both ends last heard from the peer just after 1 s.
	if el := n.sim.Elapsed(); el < 31*time.Second || el > 32*time.Second {
		t.Errorf("closed at %v, want about 1 s + 30 s idle timeout", el)
	}
	// Nothing is sent after the close.
	before := n.sim.FlowStats(n.flow)
	n.sim.RunFor(20 * time.Second)
	if after := n.sim.FlowStats(n.flow); after != before {
		t.Errorf("packets after close: %+v -> %+v", before, after)
	}
}

func TestIdleConnectionStaysUpWithKeepalive(t *testing.T) {
	n := newTestNet(t, 23, path100ms, nil)
	n.runUntil(t, 5*time.Second, func() bool { return n.server.c.Established() })
	n.sim.RunFor(120 * time.Second)
	if n.client.c.Closed() || n.server.c.Closed() {
		t.Fatalf("idle connection closed: client %v, server %v", n.client.c.Err(), n.server.c.Err())
	}
	// Keepalives every 10 s each way: a few dozen packets, not a flood.
	fs := n.sim.FlowStats(n.flow)
	if fs.ForwardPackets > 60 || fs.ReversePackets > 60 {
		t.Errorf("idle traffic: %d / %d packets in 2 minutes", fs.ForwardPackets, fs.ReversePackets)
	}
}
