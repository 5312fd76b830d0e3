package dgram

import (
	"bytes"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/dgram/internal/pkttest"
	"github.com/wanopt/wanopt/dgram/packet"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// tunWriter records what a Far writes out of its TUN.
type tunWriter struct {
	mu  sync.Mutex
	out [][]byte
	err error
}

func (w *tunWriter) write(p []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.out = append(w.out, bytes.Clone(p))
	return nil
}

func (w *tunWriter) packets() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]byte(nil), w.out...)
}

// TestFarTransparent runs the transparent far side on a fake TUN: the
// clients' UDP and echo requests go out of it as they came, after the
// policy; the answers injected as the kernel would route them into the
// TUN (UDP, echo replies, ICMP errors about a flow, IPv4 and IPv6) go
// back to the near edge whole, and answers of no flow are dropped and
// counted; the table is bounded, and idle flows are forgotten.
func TestFarTransparent(t *testing.T) {
	const (
		client  = "198.18.1.2:40000"
		server  = "198.18.2.2:53"
		client6 = "[2001:2:0:1::2]:40000"
		server6 = "[2001:2:0:2::2]:53"
	)
	refused := netip.MustParseAddrPort("198.18.2.2:9")
	clk := &fakeClock{}
	clk.ns.Store(time.Hour.Nanoseconds())
	w := &tunWriter{}
	f := NewFar(FarConfig{
		Check: func(dst netip.AddrPort) string {
			if dst == refused {
				return "not allowed by policy"
			}
			return ""
		},
		WritePacket: w.write, MaxFlows: 3, IdleTimeout: 40 * time.Millisecond, now: clk.now})
	defer f.Close()
	s := &lockedSender{fakeSender: fakeSender{max: 1400}}
	f.SetTunnel(s)

	// Up: three flows (UDP over IPv4 and IPv6, ping), and one the policy
	// refuses.
	udp := pkttest.UDP(t, client, server, []byte("query"))
	udp6 := pkttest.UDP(t, client6, server6, []byte("query6"))
	ping := pkttest.Echo(t, "198.18.1.2", "198.18.2.2", packet.ICMPEchoRequest, 0xbeef, "ping")
	for _, p := range [][]byte{udp, udp6, ping, pkttest.UDP(t, client, refused.String(), []byte("x"))} {
		f.Deliver(p)
	}
	waitFor(t, "three packets out and one refused", func() bool {
		st := f.Stats()
		return st.UDP.PacketsUp == 2 && st.ICMP.PacketsUp == 1 && st.Drops.NotAllowed == 1
	})
	out := w.packets()
	if len(out) != 3 || !bytes.Equal(out[0], udp) || !bytes.Equal(out[1], udp6) || !bytes.Equal(out[2], ping) {
		t.Fatalf("wrote %d packets out of the TUN, want the three allowed as they came", len(out))
	}
	for i, p := range out {
		// The client's own address, TTL and (valid) checksums.
		if pp, err := packet.Parse(p); err != nil || pp.HopLimit != 64 /* as the client built it */ || !l4ChecksumOK(&pp) {
			t.Errorf("packet %d out: %+v, %v", i, pp, err)
		}
	}
	if st := f.Stats(); st.Flows != 3 || st.FlowsOpened != 3 {
		t.Errorf("after three flows: %+v", st)
	}
	// A fourth flow is beyond the table's bound; a packet of a flow in
	// the table still goes out.
	f.Deliver(pkttest.UDP(t, "198.18.1.3:1", server, []byte("x")))
	f.Deliver(udp)
	waitFor(t, "the flow limit", func() bool { return f.Stats().Drops.FlowLimit == 1 && f.Stats().UDP.PacketsUp == 3 })

	// Down: answers to the flows are taken and sent whole.
	reply := pkttest.UDP(t, server, client, []byte("answer"))
	reply6 := pkttest.UDP(t, server6, client6, []byte("answer6"))
	pong := pkttest.Echo(t, "198.18.2.2", "198.18.1.2", packet.ICMPEchoReply, 0xbeef, "ping")
	unreach := pkttest.ICMPError(t, "198.18.2.2", udp, packet.ICMPDestUnreachable, 3)     // port unreachable
	unreach6 := pkttest.ICMPError(t, "2001:2:0:2::1", udp6, pkttest.ICMPv6DestUnreach, 4) // port unreachable, from a router
	hop := pkttest.ICMPError(t, "198.18.2.1", ping, pkttest.ICMPTimeExceeded, 0)          // traceroute's answer
	want := [][]byte{reply, reply6, pong, unreach, unreach6, hop}
	for i, p := range want {
		if !f.Divert(p) {
			t.Fatalf("answer %d was left to the stack", i)
		}
	}
	if s.count() != len(want) {
		t.Fatalf("sent %d datagrams, want the %d answers", s.count(), len(want))
	}
	for i, d := range s.sent {
		if d[0] != packet.KindDown || !bytes.Equal(d[1:], want[i]) {
			t.Errorf("datagram %d: kind %d, % x; want the answer as it came", i, d[0], d[1:])
		}
	}
	st := f.Stats()
	if st.UDP.PacketsDown != 2 || st.ICMP.PacketsDown != 4 || st.Drops.Unmatched != 0 {
		t.Errorf("after the answers: %+v", st)
	}

	// Answers to no flow seen here are dropped and counted: another
	// port, another echo identifier, an error about another flow.
	for _, p := range [][]byte{
		pkttest.UDP(t, server, "198.18.1.2:40001", []byte("stray")),
		pkttest.Echo(t, "198.18.2.2", "198.18.1.2", packet.ICMPEchoReply, 0xbef0, "ping"),
		pkttest.ICMPError(t, "198.18.2.2", pkttest.UDP(t, "198.18.1.2:40001", server, nil), packet.ICMPDestUnreachable, 3),
	} {
		if !f.Divert(p) {
			t.Error("an answer of no flow was left to the stack")
		}
	}
	// The stack's own: an echo request to a client's address, an ICMP
	// error about a TCP segment of no passed flow (the stack's own
	// connection), other ICMP, not IP.
	for _, p := range [][]byte{
		pkttest.Echo(t, "198.18.2.2", "198.18.1.2", packet.ICMPEchoRequest, 1, "ping"),
		pkttest.ICMPError(t, "198.18.2.2", pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:80", header.TCPFlagSyn, nil, ""), packet.ICMPDestUnreachable, 3),
		pkttest.Echo(t, "198.18.2.2", "198.18.1.2", 13, 1, "timestamp"),
		{0x45, 0, 0},
	} {
		if f.Divert(p) {
			t.Errorf("the stack's packet % x was taken", p[:min(len(p), 24)])
		}
	}
	if st := f.Stats(); st.Drops.Unmatched != 3 || s.count() != len(want) {
		t.Errorf("after answers of no flow: sent %d, stats %+v", s.count(), st)
	}

	// A write error is counted; without a tunnel, answers are dropped
	// and counted.
	w.mu.Lock()
	w.err = errors.New("TUN queue full")
	w.mu.Unlock()
	f.Deliver(udp)
	waitFor(t, "the write error", func() bool { return f.Stats().Drops.SocketErrors == 1 })
	f.SetTunnel(nil)
	if !f.Divert(reply) || f.Stats().Drops.NoTunnel != 1 {
		t.Errorf("an answer without a tunnel: %+v", f.Stats())
	}
	f.SetTunnel(s)
	w.mu.Lock()
	w.err = nil
	w.mu.Unlock()

	// Idle: the flows are forgotten, their answers unmatched, and the
	// table has room for new ones.
	clk.add(time.Second)
	waitFor(t, "idle flows to expire", func() bool { return f.Stats().Flows == 0 })
	if st := f.Stats(); st.FlowsExpired != 3 {
		t.Errorf("%d flows expired, want 3", st.FlowsExpired)
	}
	if !f.Divert(reply) || f.Stats().Drops.Unmatched != 4 {
		t.Errorf("the answer of an expired flow: %+v", f.Stats())
	}
	before := len(w.packets())
	f.Deliver(pkttest.UDP(t, "198.18.1.3:1", server, []byte("x")))
	waitFor(t, "a new flow", func() bool { return f.Stats().Flows == 1 && len(w.packets()) == before+1 })
	if st := f.Stats(); st.FlowsOpened != 4 || st.Drops.FlowLimit != 1 {
		t.Errorf("after the new flow: %+v", st)
	}
}

// l4ChecksumOK verifies a parsed packet's UDP or ICMP checksum.
func l4ChecksumOK(p *packet.Packet) bool {
	var initial uint16
	if p.Proto != packet.ProtoICMP {
		initial = packet.PseudoHeaderSum(p.Src, p.Dst, p.Proto, len(p.L4))
	}
	return checksum.Checksum(p.L4, initial) == 0xffff
}

// TestFarTransparentPassedTCPError: an ICMP error about a passed TCP
// flow's segment goes back to the near edge, whose Near writes it to the
// client; one about a flow not passed is not written.
func TestFarTransparentPassedTCPError(t *testing.T) {
	w := &tunWriter{}
	f := NewFar(FarConfig{Check: func(netip.AddrPort) string { return "" }, WritePacket: w.write})
	defer f.Close()
	s := &lockedSender{fakeSender: fakeSender{max: 1400}}
	f.SetTunnel(s)
	syn := pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagSyn, pkttest.SynOpts, "")
	f.Deliver(syn)
	waitFor(t, "the SYN out", func() bool { return len(w.packets()) == 1 })
	tooBig := pkttest.ICMPError(t, "198.18.2.1", syn, packet.ICMPDestUnreachable, packet.ICMPFragNeeded)
	if !f.Divert(tooBig) || s.count() != 1 {
		t.Fatalf("the error about a passed flow was not sent (sent %d)", s.count())
	}

	n, ns, written, _ := nearPass(t, 1430)
	if !n.DivertTCP(syn) || len(ns.sent) != 1 {
		t.Fatal("the near side did not pass the SYN")
	}
	Demux(s.sent[0], n, nil)
	other := pkttest.ICMPError(t, "198.18.2.1", pkttest.TCP(t, "198.18.1.2:40001", "198.18.2.2:80", header.TCPFlagSyn, nil, ""), packet.ICMPDestUnreachable, 1)
	Demux(append([]byte{packet.KindDown}, other...), n, nil)
	if len(*written) != 1 || !bytes.Equal((*written)[0], tooBig) {
		t.Fatalf("wrote %d packets to the TUN, want the error about the passed flow", len(*written))
	}
	if st := n.Stats(); st.ICMP.PacketsDown != 1 || st.Drops.NotAllowed != 1 {
		t.Errorf("near stats %+v", st)
	}
}

// TestNearDeliverICMPError: the near edge writes ICMP errors about its
// clients' datagrams to the TUN, and counts malformed ones.
func TestNearDeliverICMPError(t *testing.T) {
	var written [][]byte
	n := NewNear(NearConfig{Route: func(netip.Addr) packet.Sender { return nil },
		Write: func(p []byte) error { written = append(written, bytes.Clone(p)); return nil }})
	udp6 := pkttest.UDP(t, "[2001:2:0:1::2]:40000", "[2001:2:0:2::2]:53", []byte("q"))
	good := [][]byte{
		pkttest.ICMPError(t, "198.18.2.2", pkttest.UDP(t, "198.18.1.2:40000", "198.18.2.2:53", []byte("q")), packet.ICMPDestUnreachable, 3),
		pkttest.ICMPError(t, "2001:2:0:2::2", udp6, pkttest.ICMPv6DestUnreach, 4),
		pkttest.ICMPError(t, "2001:2:0:2::1", pkttest.Echo(t, "2001:2:0:1::2", "2001:2:0:2::2", packet.ICMPv6EchoRequest, 5, "x"), pkttest.ICMPv6TimeExceeded, 0),
	}
	for _, p := range good {
		n.Deliver(p)
	}
	bad := pkttest.ICMPError(t, "198.18.2.2", pkttest.UDP(t, "198.18.1.2:40000", "198.18.2.2:53", nil), packet.ICMPDestUnreachable, 3)
	n.Deliver(bad[:packet.IPv4HeaderLen+packet.L4HeaderLen+10]) // cut inside the quoted header (lengths no longer agree)
	if len(written) != len(good) {
		t.Fatalf("wrote %d of %d errors", len(written), len(good))
	}
	if st := n.Stats(); st.ICMP.PacketsDown != 3 || st.Drops.Malformed != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestDivertAmong: a hub's branches each see their own flows' answers;
// an answer of no branch's flow is counted once, by the first.
func TestDivertAmong(t *testing.T) {
	var fars []*Far
	var senders []*lockedSender
	for range 2 {
		w := &tunWriter{}
		f := NewFar(FarConfig{Check: func(netip.AddrPort) string { return "" }, WritePacket: w.write})
		defer f.Close()
		s := &lockedSender{fakeSender: fakeSender{max: 1400}}
		f.SetTunnel(s)
		fars, senders = append(fars, f), append(senders, s)
	}
	fars[1].Deliver(pkttest.UDP(t, "198.18.5.2:40000", "198.18.2.2:53", []byte("q")))
	waitFor(t, "branch 1's flow", func() bool { return fars[1].Stats().Flows == 1 })
	if !DivertAmong(pkttest.UDP(t, "198.18.2.2:53", "198.18.5.2:40000", []byte("a")), fars...) {
		t.Fatal("the answer was left to the stack")
	}
	if senders[0].count() != 0 || senders[1].count() != 1 {
		t.Errorf("sent %d by branch 0 and %d by branch 1, want the answer by branch 1", senders[0].count(), senders[1].count())
	}
	if !DivertAmong(pkttest.UDP(t, "198.18.2.2:53", "198.18.6.2:40000", []byte("a")), fars...) {
		t.Fatal("an answer of no flow was left to the stack")
	}
	if a, b := fars[0].Stats().Drops.Unmatched, fars[1].Stats().Drops.Unmatched; a != 1 || b != 0 {
		t.Errorf("unmatched %d and %d, want 1 and 0", a, b)
	}
	if DivertAmong(pkttest.UDP(t, "198.18.2.2:53", "198.18.6.2:40000", nil)) {
		t.Error("no far side took a packet")
	}
}

// TestFarDivertAllocs: an answer's path allocates nothing in steady
// state.
func TestFarDivertAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates; run without -race")
	}
	f := NewFar(FarConfig{Check: func(netip.AddrPort) string { return "" }, WritePacket: func([]byte) error { return nil }})
	defer f.Close()
	f.SetTunnel(discardSender{})
	f.Deliver(pkttest.UDP(t, "198.18.1.2:40000", "198.18.2.2:53", []byte("q")))
	waitFor(t, "the flow", func() bool { return f.Stats().Flows == 1 })
	reply := pkttest.UDP(t, "198.18.2.2:53", "198.18.1.2:40000", []byte("answer"))
	unreach := pkttest.ICMPError(t, "198.18.2.2", pkttest.UDP(t, "198.18.1.2:40000", "198.18.2.2:53", []byte("q")), packet.ICMPDestUnreachable, 3)
	if n := testing.AllocsPerRun(100, func() { f.Divert(reply); f.Divert(unreach) }); n != 0 {
		t.Errorf("%.1f allocations per two answers", n)
	}
}

type discardSender struct{}

func (discardSender) SendDatagram([]byte) error { return nil }
func (discardSender) MaxDatagramBytes() int     { return 1400 }
