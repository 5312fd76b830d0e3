package tunnel

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/netsim"
	"github.com/wanopt/wanopt/internal/seed"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/wire"
)

var path100ms = pathConfig{rateBps: 100_000_000, rtt: 100 * time.Millisecond}

func TestHandshakeCompletes(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		n := newTestNet(t, seed, path100ms, nil)
		n.runUntil(t, 5*time.Second, func() bool {
			return n.client.saw(EventEstablished) && n.server.saw(EventEstablished)
		})
		// Client: one RTT (message 1 out, message 2 back). Server: key
		// confirmation by the client's first data packet, 1.5 RTT.
		if el := n.sim.Elapsed(); el < 150*time.Millisecond || el > 200*time.Millisecond {
			t.Errorf("seed %d: established after %v, want about 1.5 RTT", seed, el)
		}
		if n.client.c.PeerPublicKey() != n.srvCfg.PrivateKey.PublicKey() ||
			n.server.c.PeerPublicKey() != n.cliCfg.PrivateKey.PublicKey() {
			t.Errorf("seed %d: peers authenticated the wrong keys", seed)
		}
		cs, ss := n.client.c.Stats(), n.server.c.Stats()
		if cs.DroppedPackets+ss.DroppedPackets != 0 {
			t.Errorf("seed %d: dropped packets: client %d server %d", seed, cs.DroppedPackets, ss.DroppedPackets)
		}
	}
}

func TestHandshakeRetransmitsLostInitiation(t *testing.T) {
	p := path100ms
	// The first initiation (sent at 0) is lost.
	p.outages = []netsim.Outage{{Start: 0, End: 10 * time.Millisecond}}
	n := newTestNet(t, 7, p, nil)
	n.runUntil(t, 5*time.Second, func() bool { return n.server.saw(EventEstablished) })
	if el := n.sim.Elapsed(); el < time.Second {
		t.Errorf("established after %v, before the first retransmission", el)
	}
	if hs := n.client.c.Stats().HandshakesSent; hs != 2 {
		t.Errorf("HandshakesSent = %d, want 2", hs)
	}
}

func TestHandshakeUnknownKeyGetsNothing(t *testing.T) {
	n := newTestNet(t, 11, path100ms, func(cli, srv *Config) {
		other, _ := testKeys(t, 999)
		srv.PeerPublicKey = other.PublicKey() // the client's key is not allowed
		cli.IdleTimeout = 5 * time.Second
	})
	n.runUntil(t, 10*time.Second, func() bool { return n.client.c.Closed() })
	fs := n.sim.FlowStats(n.flow)
	if fs.ReversePackets != 0 {
		t.Errorf("server sent %d packets to a client it does not allow", fs.ReversePackets)
	}
	if fs.ForwardPackets < 3 {
		t.Errorf("client sent %d initiations, want retransmissions", fs.ForwardPackets)
	}
	if ss := n.server.c.Stats(); ss.HandshakesRejected != fs.ForwardPackets {
		t.Errorf("server rejected %d handshakes, want %d", ss.HandshakesRejected, fs.ForwardPackets)
	}
	if err := n.client.closedErr(); !errors.Is(err, ErrHandshakeTimeout) {
		t.Errorf("client closed with %v, want ErrHandshakeTimeout", err)
	}
	if n.server.c.Established() {
		t.Error("server established with a client it does not allow")
	}
	// Each refusal is an event naming the initiator's key, so the edge
	// can tell the operator which edge knocks.
	var refused uint64
	for _, ev := range n.server.events {
		if ev.Kind != EventHandshakeRefused {
			continue
		}
		refused++
		if !errors.Is(ev.Err, crypt.ErrUnknownPeer) || ev.PeerKey != n.cliCfg.PrivateKey.PublicKey() {
			t.Errorf("refusal event: err %v, key %v; want ErrUnknownPeer and the client's key", ev.Err, ev.PeerKey)
		}
	}
	if refused != fs.ForwardPackets {
		t.Errorf("%d refusal events for %d initiations", refused, fs.ForwardPackets)
	}
}

// garbage is an endpoint that sends junk datagrams and counts replies.
type garbage struct {
	seed    uint64
	sent    int
	max     int
	replies int
	next    monotime.Time
}

func (g *garbage) HandleDatagram(monotime.Time, []byte) { g.replies++ }
func (g *garbage) HandleTimeout(monotime.Time)          {}
func (g *garbage) NextTimeout() monotime.Time {
	if g.sent >= g.max {
		return 0
	}
	return g.next
}

func (g *garbage) PollTransmit(now monotime.Time, buf []byte) int {
	if g.sent >= g.max || now.Before(g.next) {
		return 0
	}
	g.next = now.Add(time.Millisecond)
	r := seed.ChaCha8(g.seed + uint64(g.sent))
	n := 1 + int(r.Uint64()%uint64(len(buf)-1))
	r.Read(buf[:n])
	// Cycle through plausible packet types so the header parses.
	switch g.sent % 4 {
	case 0:
		buf[0] = byte(wire.PacketHandshakeInit)
	case 1:
		buf[0] = byte(wire.PacketData) | byte(g.sent%4)
	case 2:
		buf[0] = byte(wire.PacketHandshakeResp)
	}
	if g.sent%8 == 1 && n >= 1+crypt.Message1Size+4 {
		n = 1 + 4 + crypt.Message1Size // right length for message 1
		buf[0] = byte(wire.PacketHandshakeInit)
	}
	g.sent++
	return n
}

func TestGarbageDroppedWithoutReply(t *testing.T) {
	sim := netsim.New(5)
	_, sc := pairConfigs(t, 5)
	srv, err := NewServerConn(sc, sim.Now())
	if err != nil {
		t.Fatal(err)
	}
	g := &garbage{seed: 5, max: 2000}
	l1, l2 := path100ms.link(sim), path100ms.link(sim)
	f := sim.AddFlow(g, &simEnd{c: srv}, l1, l2, netsim.FlowOptions{})
	if err := sim.RunFor(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if g.replies != 0 || sim.FlowStats(f).ReversePackets != 0 {
		t.Errorf("server answered garbage: %d replies", g.replies)
	}
	st := srv.Stats()
	if st.DroppedPackets != uint64(g.max) {
		t.Errorf("DroppedPackets = %d, want %d", st.DroppedPackets, g.max)
	}
	if srv.Established() || srv.Closed() {
		t.Errorf("server state changed: established %v closed %v", srv.Established(), srv.Closed())
	}
	t.Logf("dropped %d: malformed %d unauthenticated %d unknown index %d",
		st.DroppedPackets, st.DroppedMalformed, st.DroppedUnauthenticated, st.DroppedUnknownIndex)
}

// TestServerSendsNoMoreThanItReceivesBeforeConfirmation: until the
// client's first data packet authenticates, the server answers each
// initiation with one shorter response and sends nothing else.
func TestServerSendsNoMoreThanItReceivesBeforeConfirmation(t *testing.T) {
	p := path100ms
	n := newTestNet(t, 8, p, nil)
	// Let the first initiation through, then cut the client-to-server
	// direction so that the key confirmation never arrives.
	cfg := n.fwd.Config()
	cfg.Outages = []netsim.Outage{{Start: 10 * time.Millisecond, End: time.Hour}}
	n.fwd.SetConfig(cfg)
	n.sim.RunFor(20 * time.Second)
	ss := n.server.c.Stats()
	if n.server.c.Established() {
		t.Fatal("server established without key confirmation")
	}
	if ss.PacketsSent != 1 || ss.BytesSent > ss.BytesReceived {
		t.Errorf("server sent %d packets, %d bytes, having received %d bytes", ss.PacketsSent, ss.BytesSent, ss.BytesReceived)
	}
	t.Logf("server: received %d B, sent %d B", ss.BytesReceived, ss.BytesSent)
}

// TestMaxUDPPayloadBytesFor checks that a full-size tunnel packet is
// exactly 1,500 bytes on the wire for either family.
func TestMaxUDPPayloadBytesFor(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		header int // IP and UDP
	}{
		{"198.18.0.2", 28},
		{"::ffff:198.18.0.2", 28}, // IPv4 on a dual-stack socket
		{"2001:2::2", 48},
		{"::", 48}, // every address: either family's packets fit
	} {
		if got := MaxUDPPayloadBytesFor(netip.MustParseAddr(tc.addr)); got+tc.header != 1500 {
			t.Errorf("MaxUDPPayloadBytesFor(%s) = %d: with %d header bytes a %d-byte packet, want 1500", tc.addr, got, tc.header, got+tc.header)
		}
	}
}
