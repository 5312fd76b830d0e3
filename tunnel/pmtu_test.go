package tunnel

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
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

// TestPMTUDSearchSteps drives the search alone: the ceiling first, then
// halving; PMTUMaxProbes losses make a size too big, and an ACK that
// comes after its size was given up on still confirms it.
func TestPMTUDSearchSteps(t *testing.T) {
	now := monotime.Time(1)
	m := newPMTUD(1472)
	if m.size != BasePLPMTUBytes || m.probeDue() {
		t.Fatalf("before start: size %d, probe due %v; want %d, none", m.size, m.probeDue(), BasePLPMTUBytes)
	}
	m.start()
	lose := func(size int) {
		t.Helper()
		for i := range PMTUMaxProbes {
			if got := m.nextProbe(); got != size {
				t.Fatalf("probe %d: size %d, want %d (confirmed %d, hi %d)", i, got, size, m.size, m.hi)
			}
			id := m.onProbeSent(now, size, time.Second)
			now = now.Add(time.Second)
			m.onTimeout(now)
			if m.probeSize != 0 || m.stats.PMTUProbesLost == 0 {
				t.Fatalf("probe %d of %d not lost at its timeout", id, size)
			}
		}
	}
	ack := func(size int) {
		t.Helper()
		if got := m.nextProbe(); got != size {
			t.Fatalf("probe size %d, want %d (confirmed %d, hi %d)", got, size, m.size, m.hi)
		}
		id := m.onProbeSent(now, size, time.Second)
		if !m.onProbeAcked(id, size, now) || m.size != size {
			t.Fatalf("ack of %d: size %d", size, m.size)
		}
	}
	lose(1472)
	lose(1352) // (1232+1472)/2
	ack(1292)
	if m.size != 1292 || !m.searching {
		t.Fatalf("size %d searching %v", m.size, m.searching)
	}
	// 1322: its probes time out, then the last one's ACK arrives late.
	var last uint64
	for range PMTUMaxProbes {
		last = m.onProbeSent(now, m.nextProbe(), time.Second)
		now = now.Add(time.Second)
		m.onTimeout(now)
	}
	if m.hi != 1322 {
		t.Fatalf("hi %d after three losses of 1322, want 1322", m.hi)
	}
	if !m.onProbeAcked(last, 1322, now) || m.size != 1322 || m.hi != 1323 {
		t.Fatalf("late ACK of 1322: size %d, hi %d; want 1322, 1323", m.size, m.hi)
	}
	if m.searching || m.raiseAt != now.Add(PMTURaiseInterval) {
		t.Fatalf("searching %v, raise at %v; want done, a new search in %v", m.searching, m.raiseAt, PMTURaiseInterval)
	}
	// A stale ACK of a smaller size changes nothing.
	if m.onProbeAcked(1, 1292, now) || m.size != 1322 {
		t.Fatalf("stale ACK changed the size to %d", m.size)
	}
	// The raise timer starts a new search at the ceiling.
	m.onTimeout(now.Add(PMTURaiseInterval))
	if !m.searching || m.nextProbe() != 1472 {
		t.Fatalf("after the raise timer: searching %v, next probe %d; want a search from 1472", m.searching, m.nextProbe())
	}
}

// TestPMTUDBlackHole: eight large packets lost with no large one acked,
// while a small one was, fall back to the base; a large ACK in between
// clears the count.
func TestPMTUDBlackHole(t *testing.T) {
	m := newPMTUD(1472)
	m.start()
	m.onProbeAcked(m.onProbeSent(1, 1472, time.Second), 1472, 2)
	if m.size != 1472 || m.searching {
		t.Fatalf("size %d searching %v after the ceiling's ACK", m.size, m.searching)
	}
	for range pmtuBlackHoleLosses - 1 {
		m.onPacketLost(true)
	}
	m.onPacketAcked(false)
	m.onPacketAcked(true) // a large packet got through: congestion, not a hole
	m.onPacketLost(true)
	if m.checkBlackHole() {
		t.Fatal("black hole declared although a large packet was acked")
	}
	for range pmtuBlackHoleLosses {
		m.onPacketLost(true)
	}
	if m.checkBlackHole() {
		t.Fatal("black hole declared with no small packet acked (an outage)")
	}
	m.onPacketAcked(false)
	if !m.checkBlackHole() || m.size != BasePLPMTUBytes || !m.searching || m.stats.PMTUBlackHoles != 1 {
		t.Fatalf("after the hole: size %d, searching %v, %d holes", m.size, m.searching, m.stats.PMTUBlackHoles)
	}
}
