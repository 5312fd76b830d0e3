package dgram

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/wanopt/wanopt/dgram/internal/pkttest"
	"github.com/wanopt/wanopt/dgram/packet"
	"github.com/wanopt/wanopt/dgram/passthru"
	"github.com/wanopt/wanopt/ingress"
	"github.com/wanopt/wanopt/tunnel"
)

// fakeSender records datagrams (copies) or fails with err.
type fakeSender struct {
	max  int
	err  error
	sent [][]byte
}

func (s *fakeSender) SendDatagram(p []byte) error {
	if s.err != nil {
		return s.err
	}
	s.sent = append(s.sent, bytes.Clone(p))
	return nil
}
func (s *fakeSender) MaxDatagramBytes() int { return s.max }

func echo4(t testing.TB, src, dst string, typ uint8, data string) []byte {
	pkt := append(make([]byte, 28), data...)
	if err := packet.PutEcho(pkt, netip.MustParseAddr(src), netip.MustParseAddr(dst), typ, 99, 1); err != nil {
		t.Fatal(err)
	}
	return pkt
}

func TestNearDivert(t *testing.T) {
	s := &fakeSender{max: 1400}
	var route packet.Sender = s
	var written [][]byte
	var writeErr error
	n := NewNear(NearConfig{
		Route: func(netip.Addr) packet.Sender { return route },
		Write: func(p []byte) error { written = append(written, bytes.Clone(p)); return writeErr },
	})
	udp := pkttest.UDP(t, "198.18.1.2:5000", "198.18.2.2:53", []byte("query"))
	ping := echo4(t, "198.18.1.2", "198.18.2.2", packet.ICMPEchoRequest, "abcdefgh")
	tcp := bytes.Clone(udp)
	tcp[9] = packet.ProtoTCP
	unreach := echo4(t, "198.18.1.2", "198.18.2.2", 3, "x")

	for _, c := range []struct {
		name string
		pkt  []byte
		take bool
	}{{"UDP", udp, true}, {"echo request", ping, true}, {"TCP", tcp, false}, {"ICMP unreachable", unreach, false}, {"garbage", []byte{0x45, 1, 2}, false}} {
		if got := n.Divert(c.pkt); got != c.take {
			t.Errorf("Divert(%s) = %v, want %v", c.name, got, c.take)
		}
	}
	if len(s.sent) != 2 || s.sent[0][0] != packet.KindUp || !bytes.Equal(s.sent[0][1:], udp) || !bytes.Equal(s.sent[1][1:], ping) {
		t.Fatalf("sent %d datagrams: % x", len(s.sent), s.sent)
	}
	st := n.Stats()
	if st.UDP.PacketsUp != 1 || st.UDP.BytesUp != uint64(len(udp)) || st.ICMP.PacketsUp != 1 || st.Drops.Total() != 0 {
		t.Errorf("stats %+v", st)
	}

	// Drops, each counted under its reason.
	drop := func(name string, pkt []byte, field func(Drops) uint64) {
		t.Helper()
		before := field(n.Stats().Drops)
		if !n.Divert(pkt) {
			t.Errorf("%s: not taken", name)
		}
		if field(n.Stats().Drops) != before+1 {
			t.Errorf("%s: drops %+v", name, n.Stats().Drops)
		}
	}
	drop("multicast", pkttest.UDP(t, "198.18.1.2:5353", "224.0.0.251:5353", nil), func(d Drops) uint64 { return d.NotAllowed })
	drop("too big", pkttest.UDP(t, "198.18.1.2:5000", "198.18.2.2:53", make([]byte, 1400)), func(d Drops) uint64 { return d.TooBig })
	bad := bytes.Clone(udp)
	bad[25] = 0xff
	drop("bad UDP length", bad, func(d Drops) uint64 { return d.Malformed })
	s.err = fmt.Errorf("wrapped: %w", tunnel.ErrDatagramQueueFull)
	drop("queue full", udp, func(d Drops) uint64 { return d.QueueFull })
	s.err = errors.New("tunnel closed")
	drop("closed", udp, func(d Drops) uint64 { return d.NoTunnel })
	route = nil
	drop("no tunnel", udp, func(d Drops) uint64 { return d.NoTunnel })

	if len(written) != 1 || written[0][9] != packet.ProtoICMP || n.Stats().TooBigAnswered != 1 {
		t.Errorf("the packet too big: %d packets written, stats %+v; want one ICMP answer", len(written), n.Stats())
	}
	written = nil

	// The way back: replies are written, anything else is not.
	reply := echo4(t, "198.18.2.2", "198.18.1.2", packet.ICMPEchoReply, "abcdefgh")
	n.Deliver(reply)
	n.Deliver(pkttest.UDP(t, "198.18.2.2:53", "198.18.1.2:5000", []byte("answer")))
	n.Deliver(ping) // a request has no business coming down
	n.Deliver([]byte{0x60})
	writeErr = errors.New("queue full")
	n.Deliver(reply)
	st = n.Stats()
	if len(written) != 3 || !bytes.Equal(written[0], reply) {
		t.Errorf("written %d packets", len(written))
	}
	if st.ICMP.PacketsDown != 1 || st.UDP.PacketsDown != 1 || st.Drops.Unsupported != 1 || st.Drops.SocketErrors != 1 || st.Drops.Malformed != 2 {
		t.Errorf("after delivering: %+v", st)
	}
}

func TestDemux(t *testing.T) {
	var written int
	n := NewNear(NearConfig{Route: func(netip.Addr) packet.Sender { return nil }, Write: func([]byte) error { written++; return nil }})
	reply := append([]byte{packet.KindDown}, pkttest.UDP(t, "198.18.2.2:53", "198.18.1.2:5000", []byte("a"))...)
	Demux(reply, n, nil)
	Demux([]byte{7, 1, 2}, n, nil)
	Demux(nil, n, nil)
	Demux(append([]byte{packet.KindUp}, reply[1:]...), n, nil)
	st := n.Stats()
	if written != 1 || st.Drops.Malformed != 2 || st.Drops.Unsupported != 1 {
		t.Errorf("written %d, stats %+v", written, st)
	}
}

// TestNearDropRules: a drop rule's UDP and pings are dropped and counted
// (Drops.Policy); the rest passes as before, and SetRules applies to the
// next packets.
func TestNearDropRules(t *testing.T) {
	s := &fakeSender{max: 1400}
	rs, err := ingress.ParseRules([]string{"drop:udp:0.0.0.0/0:137-139", "drop:icmp:198.18.3.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	n := NewNear(NearConfig{Route: func(netip.Addr) packet.Sender { return s }, Write: func([]byte) error { return nil }, Rules: rs})
	netbios := pkttest.UDP(t, "198.18.1.2:137", "198.18.2.255:138", []byte("x"))
	dns := pkttest.UDP(t, "198.18.1.2:5000", "198.18.2.2:53", []byte("q"))
	ping := echo4(t, "198.18.1.2", "198.18.3.3", packet.ICMPEchoRequest, "abcd")
	for _, p := range [][]byte{netbios, dns, ping} {
		if !n.Divert(p) {
			t.Fatal("Divert left a UDP or ping packet to the stack")
		}
	}
	if len(s.sent) != 1 || !bytes.Equal(s.sent[0][1:], dns) {
		t.Fatalf("sent %d datagrams, want the DNS query alone", len(s.sent))
	}
	if st := n.Stats(); st.Drops.Policy != 2 || st.Drops.Total() != 2 || st.UDP.PacketsUp != 1 {
		t.Errorf("stats %+v", st)
	}
	n.SetRules(nil)
	n.Divert(ping)
	if len(s.sent) != 2 || n.Stats().Drops.Policy != 2 {
		t.Errorf("after SetRules(nil): sent %d, %+v", len(s.sent), n.Stats().Drops)
	}
	if got := n.Rules().Match(packet.ProtoUDP, netip.MustParseAddrPort("198.18.2.255:138")); got != passthru.Pass {
		t.Errorf("the default rules: %v for UDP", got)
	}
}
