package tunnel

import (
	"net/netip"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/seed"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// exchange passes every datagram each side sends to the other until
// neither has anything to send.
func exchange(now monotime.Time, a, b *Conn) {
	buf := make([]byte, 1500)
	for moved := true; moved; {
		moved = false
		for _, p := range [][2]*Conn{{a, b}, {b, a}} {
			for n := p[0].PollTransmit(now, buf); n > 0; n = p[0].PollTransmit(now, buf) {
				p[1].HandleDatagram(now, buf[:n])
				moved = true
			}
		}
	}
}

func sawEvent(c *Conn, k EventKind) bool {
	found := false
	for ev, ok := c.PollEvent(); ok; ev, ok = c.PollEvent() {
		found = found || ev.Kind == k
	}
	return found
}

// TestRejectUnknownIndex: a server that restarted answers a data packet of
// the old session with a REJECT naming its receiver index, no larger than
// the packet; the client reports it (EventRejected) only when it names its
// current session, and its session goes on.
func TestRejectUnknownIndex(t *testing.T) {
	cc, sc := pairConfigs(t, 41)
	now := monotime.Now()
	cli, err := NewClientConn(cc, now)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServerConn(sc, now)
	if err != nil {
		t.Fatal(err)
	}
	exchange(now, cli, srv)
	exchange(now, cli, srv)
	if !cli.Established() || !srv.Established() {
		t.Fatal("handshake did not complete")
	}
	sawEvent(cli, EventRejected)

	sc.Rand = seed.ChaCha8(42)
	srv2, err := NewServerConn(sc, now) // the restarted server
	if err != nil {
		t.Fatal(err)
	}
	src, dst := netip.MustParseAddrPort("198.18.0.1:1"), netip.MustParseAddrPort("198.18.0.2:2")
	if _, err := cli.OpenStream(now, src, dst); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Millisecond)
	buf := make([]byte, 1500)
	n := cli.PollTransmit(now, buf)
	if n == 0 {
		t.Fatal("client sent nothing")
	}
	pkt := buf[:n]
	if r := srv.AppendReject(nil, pkt); len(r) != 0 {
		t.Errorf("the live server would reject its own session's packet: %x", r)
	}
	srv2.HandleDatagram(now, pkt)
	rej := srv2.AppendReject(nil, pkt)
	h, _, err := wire.ParseHeader(rej)
	if err != nil || h.Type != wire.PacketReject || len(rej) > len(pkt) {
		t.Fatalf("REJECT %x (%v), header %+v; want a REJECT no larger than %d bytes", rej, err, h, len(pkt))
	}
	wrong := wire.AppendHeader(nil, &wire.Header{Type: wire.PacketReject, SenderIndex: h.SenderIndex + 1})
	cli.HandleDatagram(now, wrong)
	if sawEvent(cli, EventRejected) {
		t.Error("EventRejected for a REJECT naming another index")
	}
	cli.HandleDatagram(now, rej)
	if !sawEvent(cli, EventRejected) {
		t.Error("no EventRejected for a REJECT naming the session")
	}
	if !cli.Established() || cli.Stats().RejectsReceived != 1 {
		t.Errorf("after the REJECT: established %v, RejectsReceived %d; want true, 1", cli.Established(), cli.Stats().RejectsReceived)
	}
}
