package tunnel

import (
	"errors"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/netsim"
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
	n := newTestNet(t, 22, path, func(cli, srv *Config) { cli.IdleTimeout, srv.IdleTimeout = 30*time.Second, 30*time.Second })
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

// outageRecovery runs a warm bulk transfer from client to server over path,
// takes the link down both ways for outage starting 1 s into the
// transfer, and returns how long after the link's return the goodput
// (over 200 ms windows) is back at 80 % of the link rate. The transfer
// must finish with every byte intact and neither end closed.
func outageRecovery(t *testing.T, seed uint64, path pathConfig, outage time.Duration, mod func(cli, srv *Config)) time.Duration {
	t.Helper()
	n := newTestNet(t, seed, path, mod)
	warmUp(t, n, seed, path)
	at := n.sim.Elapsed() + time.Second
	back := at + outage
	for _, l := range []*netsim.Link{n.fwd, n.rev} {
		cfg := l.Config()
		cfg.Outages = []netsim.Outage{{Start: at, End: back}}
		l.SetConfig(cfg)
	}
	// Enough data for 1 s before and 4 s after the outage.
	const streams = 4
	perStream := int(float64(path.rateBps) / 8 * 5 / streams)
	cli, srv := newBulkApp(n.client.c, perStream, true, 0xa11ce), newBulkApp(n.server.c, 0, true, 0xb0b)
	n.client.onEvent, n.server.onEvent = cli.onEvent, srv.onEvent
	cli.open(n.sim.Now(), streams)
	n.sim.Wake(n.flow)

	const window = 200 * time.Millisecond
	var recovered time.Duration
	var lastBytes int
	var sample func()
	sample = func() {
		b, _ := srv.received()
		rate := float64(b-lastBytes) * 8 / window.Seconds()
		lastBytes = b
		if el := n.sim.Elapsed(); recovered == 0 && el > back && rate >= 0.8*float64(path.rateBps) {
			recovered = el - back
		}
		n.sim.At(n.sim.Now().Add(window), sample)
	}
	n.sim.At(n.sim.Now().Add(window), sample)
	n.runUntil(t, outage+time.Minute, func() bool { b, f := srv.received(); return f && b == streams*perStream })
	checkHashes(t, seed, cli, srv)
	if n.sim.Elapsed() < back {
		t.Fatalf("finished at %v, before the outage ended at %v", n.sim.Elapsed(), back)
	}
	for _, e := range []*simEnd{n.client, n.server} {
		if err := e.closedErr(); err != nil {
			t.Errorf("closed: %v", err)
		}
	}
	cs := n.client.c.Stats()
	t.Logf("%v outage: back to 80%% of the link %v after the link returned (done %v after); client PTOs %d, lost %d, BBR %v bw %.1f Mbit/s",
		outage, recovered, n.sim.Elapsed()-back, cs.PTOs, cs.PacketsLost, cs.BBR.Mode, float64(cs.BandwidthBps)/1e6)
	return recovered
}

func TestOutageRecoveryTime(t *testing.T) {
	path := pathConfig{rateBps: 100_000_000, rtt: 100 * time.Millisecond}
	long := func(cli, srv *Config) { cli.IdleTimeout, srv.IdleTimeout = 10*time.Minute, 10*time.Minute }
	// 6 minutes: longer than the 5 a flow must survive (Linux TCP gives
	// up after about 15).
	for _, outage := range []time.Duration{5 * time.Second, 60 * time.Second, 6 * time.Minute} {
		if r := outageRecovery(t, 31, path, outage, long); r == 0 || r > 2*time.Second {
			t.Errorf("%v outage: back to 80%% of the link %v after it returned, want within 2 s", outage, r)
		}
	}
}

// TestIsHandshakeInitiation: a client's real initiation is recognised;
// truncated, padded or other packets are not.
func TestIsHandshakeInitiation(t *testing.T) {
	cc, _ := pairConfigs(t, 51)
	cli, err := NewClientConn(cc, 1)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, DefaultMaxUDPPayloadBytes)
	n := cli.PollTransmit(1, buf)
	init := buf[:n]
	if !IsHandshakeInitiation(init) {
		t.Fatalf("the client's initiation (%d bytes) not recognised", n)
	}
	for name, b := range map[string][]byte{
		"empty": nil, "truncated": init[:n-1], "padded": append(append([]byte(nil), init...), 0),
		"data type": append([]byte{0x40}, init[1:]...),
	} {
		if IsHandshakeInitiation(b) {
			t.Errorf("%s: taken for an initiation", name)
		}
	}
}
