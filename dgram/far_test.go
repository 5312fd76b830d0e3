package dgram

import (
	"bytes"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanopt/wanopt/dgram/internal/pkttest"
	"github.com/wanopt/wanopt/dgram/packet"
	"golang.org/x/net/icmp"
)

// chanSender hands each datagram (copied) to a channel.
type chanSender chan []byte

func (c chanSender) SendDatagram(p []byte) error { c <- bytes.Clone(p); return nil }
func (c chanSender) MaxDatagramBytes() int       { return 1400 }

// udpEcho serves a UDP echo on 127.0.0.1 until the test ends.
func udpEcho(t *testing.T) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		b := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(b)
			if err != nil {
				return
			}
			c.WriteToUDPAddrPort(b[:n], from)
		}
	}()
	t.Cleanup(func() { c.Close(); wg.Wait() })
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// fakeClock is a clock the test moves.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }

func recvReply(t *testing.T, out chanSender) packet.Packet {
	t.Helper()
	select {
	case b := <-out:
		if b[0] != packet.KindDown {
			t.Fatalf("datagram of kind %d", b[0])
		}
		p, err := packet.Parse(b[1:])
		if err != nil {
			t.Fatalf("reply: %v", err)
		}
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no reply within 5 s")
	}
	return packet.Packet{}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestFarUDP runs the NAT table against a UDP echo server: each client
// gets its own flow and its own answers, built as IP packets from the
// server to it; refused destinations, a full table and idle flows are
// handled and counted.
func TestFarUDP(t *testing.T) {
	srv := udpEcho(t)
	refused := netip.MustParseAddrPort("127.0.0.1:9")
	clk := &fakeClock{}
	clk.ns.Store(time.Hour.Nanoseconds())
	f := NewFar(FarConfig{
		Check: func(dst netip.AddrPort) string {
			if dst == refused {
				return "not allowed by policy"
			}
			return ""
		},
		MaxFlows: 2, IdleTimeout: 40 * time.Millisecond, now: clk.now})
	defer f.Close()
	out := make(chanSender, 16)
	f.SetTunnel(out)

	clients := []netip.AddrPort{netip.MustParseAddrPort("198.18.1.2:40000"), netip.MustParseAddrPort("198.18.1.3:40000")}
	for round := range 2 {
		for i, c := range clients {
			msg := []byte{byte('a' + i), byte('0' + round)}
			f.Deliver(pkttest.UDP(t, c.String(), srv.String(), msg))
			p := recvReply(t, out)
			if p.SrcAddrPort() != srv || p.DstAddrPort() != c || !bytes.Equal(p.Payload, msg) {
				t.Fatalf("client %v got %v -> %v %q", c, p.SrcAddrPort(), p.DstAddrPort(), p.Payload)
			}
		}
	}
	// The worker counts a packet after sending it, and a flow's reader an
	// answer after sending it: the answer may come before either count.
	waitFor(t, "the last packets' counts", func() bool { st := f.Stats(); return st.UDP.PacketsUp == 4 && st.UDP.PacketsDown == 4 })
	st := f.Stats()
	if st.Flows != 2 || st.FlowsOpened != 2 || st.UDP.PacketsUp != 4 || st.UDP.PacketsDown != 4 {
		t.Fatalf("after two rounds from two clients: %+v", st)
	}
	if want := uint64(4 * (28 + 2)); st.UDP.BytesUp != want || st.UDP.BytesDown != want {
		t.Errorf("bytes up %d, down %d; want %d", st.UDP.BytesUp, st.UDP.BytesDown, want)
	}

	f.Deliver(pkttest.UDP(t, "198.18.1.4:1", srv.String(), []byte("x")))
	waitFor(t, "the flow limit", func() bool { return f.Stats().Drops.FlowLimit == 1 })
	f.Deliver(pkttest.UDP(t, "198.18.1.2:40000", refused.String(), []byte("x")))
	waitFor(t, "the policy's refusal", func() bool { return f.Stats().Drops.NotAllowed == 1 })
	f.Deliver(append(pkttest.UDP(t, "198.18.1.2:1", srv.String(), nil)[:20:20], 1, 2))
	waitFor(t, "a malformed packet", func() bool { return f.Stats().Drops.Malformed == 1 })

	// A minute later both flows are idle: the next tick expires them.
	clk.add(DefaultIdleTimeout)
	waitFor(t, "idle flows to expire", func() bool { return f.Stats().Flows == 0 })
	if st := f.Stats(); st.FlowsExpired != 2 {
		t.Errorf("expired %d flows", st.FlowsExpired)
	}
	// A new packet opens a new flow.
	f.Deliver(pkttest.UDP(t, clients[0].String(), srv.String(), []byte("again")))
	if p := recvReply(t, out); string(p.Payload) != "again" {
		t.Errorf("after expiry: %q", p.Payload)
	}

	// Without a tunnel, answers are dropped and counted.
	f.SetTunnel(nil)
	f.Deliver(pkttest.UDP(t, clients[0].String(), srv.String(), []byte("lost")))
	waitFor(t, "an answer without a tunnel", func() bool { return f.Stats().Drops.NoTunnel == 1 })
	f.Close()
	if st := f.Stats(); st.Flows != 0 {
		t.Errorf("%d flows after Close", st.Flows)
	}
}

// TestFarPing sends an echo request through a ping socket to 127.0.0.1:
// the reply carries the client's identifier and sequence number. It needs
// ping sockets (net.ipv4.ping_group_range); the lab test sets that up.
func TestFarPing(t *testing.T) {
	if c, err := icmp.ListenPacket("udp4", "127.0.0.1"); err != nil {
		t.Skipf("ping sockets are not allowed here (net.ipv4.ping_group_range): %v", err)
	} else {
		c.Close()
	}
	f := NewFar(FarConfig{Check: func(netip.AddrPort) string { return "" }})
	defer f.Close()
	out := make(chanSender, 4)
	f.SetTunnel(out)
	pkt := append(make([]byte, 28), "ping data"...)
	client, server := netip.MustParseAddr("198.18.1.2"), netip.MustParseAddr("127.0.0.1")
	if err := packet.PutEcho(pkt, client, server, packet.ICMPEchoRequest, 0xbeef, 3); err != nil {
		t.Fatal(err)
	}
	f.Deliver(pkt)
	p := recvReply(t, out)
	if !p.IsEchoReply() || p.Src != server || p.Dst != client || p.ID != 0xbeef || p.Seq != 3 || string(p.Payload) != "ping data" {
		t.Fatalf("reply %+v", p)
	}
	if s := pkttest.OnesSum(p.L4); s != 0xffff {
		t.Errorf("reply's ICMP checksum sums to %#x", s)
	}
	// The reply is counted after the tunnel took it: it can be read first.
	waitFor(t, "the reply's count", func() bool { st := f.Stats(); return st.ICMP.PacketsUp == 1 && st.ICMP.PacketsDown == 1 })
}

// TestFarQueueFull: Deliver never blocks; with the worker stopped the
// queue fills and the rest are counted.
func TestFarQueueFull(t *testing.T) {
	f := NewFar(FarConfig{Check: func(netip.AddrPort) string { return "refused" }, QueueLen: 2})
	f.Close() // the worker is gone: nothing drains the queue
	for range 5 {
		f.Deliver([]byte{0x45})
	}
	if got := f.Stats().Drops.QueueFull; got != 3 {
		t.Errorf("queue full drops %d, want 3", got)
	}
}
