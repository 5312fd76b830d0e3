package tunnel

import (
	"testing"
	"time"
)

// ipv4MTU returns the UDP payload an IPv4 link of mtu bytes carries.
func ipv4MTU(mtu int) int { return mtu - ipv4UDPHeaderBytes }

// TestPathMTUSearch: on a 100 ms path whose directions carry 1280- and
// 1400-byte IPv4 packets (black holes beyond, no ICMP), each end finds its
// own direction's size within seconds, sends data at the base size until
// then, and a hash-checked transfer each way loses no data to the MTU:
// no stream byte is retransmitted, the controller sees no loss and no PTO
// fires, although probes were lost.
func TestPathMTUSearch(t *testing.T) {
	const perStream = 32 << 20
	path := pathConfig{rateBps: 50_000_000, rtt: 100 * time.Millisecond, queueBDPs: 4}
	n := newTestNet(t, 1, path, nil)
	up, down := ipv4MTU(1280), ipv4MTU(1400)
	n.client.mtu, n.server.mtu = up, down
	cli, srv := bulkNet(n, perStream, true, 1)
	var converged time.Duration
	settled := func(c *Conn) bool {
		s := c.Stats()
		return c.Established() && !s.PathMTUSearching && s.PMTUProbesSent > 0
	}
	n.runUntil(t, 120*time.Second, func() bool {
		if converged == 0 && settled(n.client.c) && settled(n.server.c) {
			converged = n.sim.Elapsed()
		}
		a, fa := cli.received()
		b, fb := srv.received()
		return converged != 0 && fa && fb && a == perStream && b == perStream
	})
	checkHashes(t, 1, cli, srv)
	checkHashes(t, 1, srv, cli)
	cs, ss := n.client.c.Stats(), n.server.c.Stats()
	t.Logf("converged at %v, done at %v; client %+v; server %+v; drops %d/%d", converged, n.sim.Elapsed(),
		cs.PathMTUStats, ss.PathMTUStats, n.client.mtuDrops, n.server.mtuDrops)
	if cs.PathMTUBytes != up || ss.PathMTUBytes != down {
		t.Errorf("path MTU client %d, server %d; want %d, %d", cs.PathMTUBytes, ss.PathMTUBytes, up, down)
	}
	if converged == 0 || converged > 10*time.Second {
		t.Errorf("search converged at %v, want within 10 s at 100 ms RTT", converged)
	}
	if n.client.maxSent != up || n.server.maxSent != down {
		t.Errorf("largest datagram through: client %d, server %d; want %d, %d", n.client.maxSent, n.server.maxSent, up, down)
	}
	if n.client.mtuDrops == 0 || cs.PMTUProbesLost == 0 {
		t.Errorf("no probe was lost (%d drops, %d probes lost): the test did not test", n.client.mtuDrops, cs.PMTUProbesLost)
	}
	if uint64(n.client.mtuDrops) != cs.PMTUProbesSent-cs.PMTUProbesAcked {
		// Every datagram the MTU dropped was a probe: sent and never acked.
		t.Errorf("client: %d datagrams over the MTU, but %d probes sent and %d acked: data was sent too big",
			n.client.mtuDrops, cs.PMTUProbesSent, cs.PMTUProbesAcked)
	}
	for name, s := range map[string]Stats{"client": cs, "server": ss} {
		if s.StreamBytesRetransmitted != 0 || s.PTOs != 0 || s.BBR.LostBytes != 0 {
			t.Errorf("%s: %d stream bytes retransmitted, %d PTOs, BBR saw %d bytes lost; want none (probe losses are not congestion)",
				name, s.StreamBytesRetransmitted, s.PTOs, s.BBR.LostBytes)
		}
	}
}

// TestPathMTURaise: once the search has settled below the ceiling, it
// searches again every PMTURaiseInterval, so a path whose MTU grew is
// found within that; and a path that carries the ceiling is found by the
// first probe.
func TestPathMTURaise(t *testing.T) {
	path := pathConfig{rateBps: 50_000_000, rtt: 100 * time.Millisecond}
	n := newTestNet(t, 2, path, nil)
	n.client.mtu = ipv4MTU(1280)
	n.runUntil(t, 30*time.Second, func() bool {
		s := n.client.c.Stats()
		return n.client.c.Established() && !s.PathMTUSearching && s.PMTUProbesSent > 0
	})
	if got := n.client.c.PathMTU(); got != ipv4MTU(1280) {
		t.Fatalf("path MTU %d, want %d", got, ipv4MTU(1280))
	}
	if got := n.server.c.PathMTU(); got != DefaultMaxUDPPayloadBytes {
		t.Errorf("server path MTU %d, want the ceiling %d", got, DefaultMaxUDPPayloadBytes)
	}
	raised := n.sim.Elapsed()
	n.client.mtu = 0
	n.runUntil(t, PMTURaiseInterval+10*time.Second, func() bool {
		return n.client.c.PathMTU() == DefaultMaxUDPPayloadBytes
	})
	d := n.sim.Elapsed() - raised
	t.Logf("settled at %v below the ceiling; the raised MTU found %v later: %+v", raised, d, n.client.c.Stats().PathMTUStats)
	if d > PMTURaiseInterval+5*time.Second {
		t.Errorf("raised MTU found %v after the raise, want within %v", d, PMTURaiseInterval+5*time.Second)
	}
	if n.client.c.Stats().PathMTUSearching {
		t.Error("still searching at the ceiling")
	}
}

// TestPathMTUBlackHole: a path that stops carrying the size in use during
// a transfer (a route change onto a link of smaller MTU that sends no
// ICMP) is detected from full-size packets lost while smaller ones get
// through; the size falls back, the search finds the new one, and every
// byte arrives.
func TestPathMTUBlackHole(t *testing.T) {
	const perStream = 16 << 20
	path := pathConfig{rateBps: 50_000_000, rtt: 100 * time.Millisecond}
	n := newTestNet(t, 3, path, nil)
	cli, srv := bulkNet(n, perStream, true, 1)
	n.runUntil(t, 20*time.Second, func() bool {
		b, _ := srv.received()
		return n.client.c.PathMTU() == DefaultMaxUDPPayloadBytes && b > 1<<20
	})
	small := ipv4MTU(1300)
	n.client.mtu = small
	n.runUntil(t, 120*time.Second, func() bool { b, f := srv.received(); return f && b == perStream })
	checkHashes(t, 3, cli, srv)
	cs := n.client.c.Stats()
	t.Logf("done at %v: %+v", n.sim.Elapsed(), cs.PathMTUStats)
	if cs.PMTUBlackHoles == 0 {
		t.Error("no black hole detected")
	}
	if cs.PathMTUBytes != small {
		t.Errorf("path MTU %d after the black hole, want %d", cs.PathMTUBytes, small)
	}
}
