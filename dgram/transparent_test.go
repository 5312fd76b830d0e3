package dgram

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// echoPkt is an ICMP (ICMPv6 between IPv6 addresses) echo message of
// type typ with identifier id.
func echoPkt(t testing.TB, src, dst string, typ uint8, id uint16, data string) []byte {
	t.Helper()
	s := netip.MustParseAddr(src)
	pkt := append(make([]byte, HeaderLen(s)), data...)
	if err := PutEcho(pkt, s, netip.MustParseAddr(dst), typ, id, 7); err != nil {
		t.Fatal(err)
	}
	return pkt
}

// icmpErrPkt is the ICMP (ICMPv6) error of type typ and code that from
// sends to orig's source about orig, quoting as much of it as a router
// does (576 bytes in all for IPv4, 1280 for IPv6), checksums included.
func icmpErrPkt(t testing.TB, from string, orig []byte, typ, code uint8) []byte {
	t.Helper()
	src := netip.MustParseAddr(from)
	var dst netip.Addr
	proto, hl, limit := uint8(ProtoICMP), ipv4HeaderLen, maxErrorV4
	if src.Is4() {
		dst = netip.AddrFrom4([4]byte(orig[12:16]))
	} else {
		dst = netip.AddrFrom16([16]byte(orig[8:24]))
		proto, hl, limit = ProtoICMPv6, ipv6HeaderLen, maxErrorV6
	}
	quote := orig[:min(len(orig), limit-hl-l4HeaderLen)]
	pkt := make([]byte, hl+l4HeaderLen+len(quote))
	copy(pkt[hl+l4HeaderLen:], quote)
	l4, err := putIP(pkt, src, dst, proto)
	if err != nil {
		t.Fatal(err)
	}
	l4[0], l4[1] = typ, code
	var initial uint16
	if proto == ProtoICMPv6 {
		initial = pseudoHeaderSum(src, dst, proto, len(l4))
	}
	binary.BigEndian.PutUint16(l4[2:], ^checksum.Checksum(l4, initial))
	return pkt
}

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
	udp := udpPkt(t, client, server, []byte("query"))
	udp6 := udpPkt(t, client6, server6, []byte("query6"))
	ping := echoPkt(t, "198.18.1.2", "198.18.2.2", ICMPEchoRequest, 0xbeef, "ping")
	for _, p := range [][]byte{udp, udp6, ping, udpPkt(t, client, refused.String(), []byte("x"))} {
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
		if pp, err := Parse(p); err != nil || pp.HopLimit != defaultHopLimit || !l4ChecksumOK(&pp) {
			t.Errorf("packet %d out: %+v, %v", i, pp, err)
		}
	}
	if st := f.Stats(); st.Flows != 3 || st.FlowsOpened != 3 {
		t.Errorf("after three flows: %+v", st)
	}
	// A fourth flow is beyond the table's bound; a packet of a flow in
	// the table still goes out.
	f.Deliver(udpPkt(t, "198.18.1.3:1", server, []byte("x")))
	f.Deliver(udp)
	waitFor(t, "the flow limit", func() bool { return f.Stats().Drops.FlowLimit == 1 && f.Stats().UDP.PacketsUp == 3 })

	// Down: answers to the flows are taken and sent whole.
	reply := udpPkt(t, server, client, []byte("answer"))
	reply6 := udpPkt(t, server6, client6, []byte("answer6"))
	pong := echoPkt(t, "198.18.2.2", "198.18.1.2", ICMPEchoReply, 0xbeef, "ping")
	unreach := icmpErrPkt(t, "198.18.2.2", udp, ICMPDestUnreachable, 3)    // port unreachable
	unreach6 := icmpErrPkt(t, "2001:2:0:2::1", udp6, icmpv6DestUnreach, 4) // port unreachable, from a router
	hop := icmpErrPkt(t, "198.18.2.1", ping, icmpTimeExceeded, 0)          // traceroute's answer
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
		if d[0] != KindDown || !bytes.Equal(d[1:], want[i]) {
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
		udpPkt(t, server, "198.18.1.2:40001", []byte("stray")),
		echoPkt(t, "198.18.2.2", "198.18.1.2", ICMPEchoReply, 0xbef0, "ping"),
		icmpErrPkt(t, "198.18.2.2", udpPkt(t, "198.18.1.2:40001", server, nil), ICMPDestUnreachable, 3),
	} {
		if !f.Divert(p) {
			t.Error("an answer of no flow was left to the stack")
		}
	}
	// The stack's own: an echo request to a client's address, an ICMP
	// error about a TCP segment of no passed flow (the stack's own
	// connection), other ICMP, not IP.
	for _, p := range [][]byte{
		echoPkt(t, "198.18.2.2", "198.18.1.2", ICMPEchoRequest, 1, "ping"),
		icmpErrPkt(t, "198.18.2.2", tcpPkt(t, "198.18.1.2:40000", "198.18.2.2:80", header.TCPFlagSyn, nil, ""), ICMPDestUnreachable, 3),
		echoPkt(t, "198.18.2.2", "198.18.1.2", 13, 1, "timestamp"),
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
	f.Deliver(udpPkt(t, "198.18.1.3:1", server, []byte("x")))
	waitFor(t, "a new flow", func() bool { return f.Stats().Flows == 1 && len(w.packets()) == before+1 })
	if st := f.Stats(); st.FlowsOpened != 4 || st.Drops.FlowLimit != 1 {
		t.Errorf("after the new flow: %+v", st)
	}
}

// l4ChecksumOK verifies a parsed packet's UDP or ICMP checksum.
func l4ChecksumOK(p *Packet) bool {
	var initial uint16
	if p.Proto != ProtoICMP {
		initial = pseudoHeaderSum(p.Src, p.Dst, p.Proto, len(p.L4))
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
	syn := tcpPkt(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagSyn, synOpts, "")
	f.Deliver(syn)
	waitFor(t, "the SYN out", func() bool { return len(w.packets()) == 1 })
	tooBig := icmpErrPkt(t, "198.18.2.1", syn, ICMPDestUnreachable, ICMPFragNeeded)
	if !f.Divert(tooBig) || s.count() != 1 {
		t.Fatalf("the error about a passed flow was not sent (sent %d)", s.count())
	}

	n, ns, written, _ := nearPass(t, 1430)
	if !n.DivertTCP(syn) || len(ns.sent) != 1 {
		t.Fatal("the near side did not pass the SYN")
	}
	Demux(s.sent[0], n, nil)
	other := icmpErrPkt(t, "198.18.2.1", tcpPkt(t, "198.18.1.2:40001", "198.18.2.2:80", header.TCPFlagSyn, nil, ""), ICMPDestUnreachable, 1)
	Demux(append([]byte{KindDown}, other...), n, nil)
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
	n := NewNear(NearConfig{Route: func(netip.Addr) Sender { return nil },
		Write: func(p []byte) error { written = append(written, bytes.Clone(p)); return nil }})
	udp6 := udpPkt(t, "[2001:2:0:1::2]:40000", "[2001:2:0:2::2]:53", []byte("q"))
	good := [][]byte{
		icmpErrPkt(t, "198.18.2.2", udpPkt(t, "198.18.1.2:40000", "198.18.2.2:53", []byte("q")), ICMPDestUnreachable, 3),
		icmpErrPkt(t, "2001:2:0:2::2", udp6, icmpv6DestUnreach, 4),
		icmpErrPkt(t, "2001:2:0:2::1", echoPkt(t, "2001:2:0:1::2", "2001:2:0:2::2", ICMPv6EchoRequest, 5, "x"), icmpv6TimeExceeded, 0),
	}
	for _, p := range good {
		n.Deliver(p)
	}
	bad := icmpErrPkt(t, "198.18.2.2", udpPkt(t, "198.18.1.2:40000", "198.18.2.2:53", nil), ICMPDestUnreachable, 3)
	n.Deliver(bad[:ipv4HeaderLen+l4HeaderLen+10]) // cut inside the quoted header (lengths no longer agree)
	if len(written) != len(good) {
		t.Fatalf("wrote %d of %d errors", len(written), len(good))
	}
	if st := n.Stats(); st.ICMP.PacketsDown != 3 || st.Drops.Malformed != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestParseICMPError(t *testing.T) {
	udp := udpPkt(t, "198.18.1.2:40000", "198.18.2.2:53", []byte("query"))
	ping6 := echoPkt(t, "2001:2:0:1::2", "2001:2:0:2::2", ICMPv6EchoRequest, 0x1234, "x")
	e, err := parseICMPError(icmpErrPkt(t, "198.18.2.2", udp, ICMPDestUnreachable, 3))
	if err != nil || e.proto != ProtoUDP || e.from != netip.MustParseAddrPort("198.18.1.2:40000") || e.to != netip.MustParseAddrPort("198.18.2.2:53") || e.typ != 3 || e.code != 3 {
		t.Errorf("port unreachable: %+v, %v", e, err)
	}
	e, err = parseICMPError(icmpErrPkt(t, "2001:2::1", ping6, ICMPv6PacketTooBig, 0))
	if err != nil || e.proto != ProtoICMPv6 || e.from != netip.MustParseAddrPort("[2001:2:0:1::2]:4660") || e.to != netip.MustParseAddrPort("[2001:2:0:2::2]:0") {
		t.Errorf("packet too big about an echo: %+v, %v", e, err)
	}
	// A quote cut after the transport's first 8 bytes is enough.
	short := icmpErrPkt(t, "198.18.2.2", udp[:ipv4HeaderLen+8], icmpTimeExceeded, 0)
	if _, err := parseICMPError(short); err != nil {
		t.Errorf("a quote of 28 bytes: %v", err)
	}
	frag := bytes.Clone(udp)
	binary.BigEndian.PutUint16(frag[6:], 100) // a fragment at offset 800
	for _, c := range []struct {
		name string
		pkt  []byte
		want error
	}{
		{"quote too short", icmpErrPkt(t, "198.18.2.2", udp[:ipv4HeaderLen+4], ICMPDestUnreachable, 3), ErrMalformed},
		{"about a later fragment", icmpErrPkt(t, "198.18.2.2", frag, ICMPDestUnreachable, 3), ErrUnsupported},
		{"about an echo reply", icmpErrPkt(t, "198.18.2.2", echoPkt(t, "198.18.1.2", "198.18.2.2", ICMPEchoReply, 1, "x"), ICMPDestUnreachable, 3), ErrUnsupported},
		{"not an error", echoPkt(t, "198.18.1.2", "198.18.2.2", ICMPEchoReply, 1, "x"), ErrUnsupported},
		{"UDP", udp, ErrUnsupported},
	} {
		if _, err := parseICMPError(c.pkt); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// An error whose destination is not the quoted packet's source.
	mis := icmpErrPkt(t, "198.18.2.2", udp, ICMPDestUnreachable, 3)
	copy(mis[16:20], []byte{198, 18, 1, 3})
	fixIPv4Checksum(mis)
	if _, err := parseICMPError(mis); !errors.Is(err, ErrMalformed) {
		t.Errorf("an error to another address than the quoted sender's: %v", err)
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
	fars[1].Deliver(udpPkt(t, "198.18.5.2:40000", "198.18.2.2:53", []byte("q")))
	waitFor(t, "branch 1's flow", func() bool { return fars[1].Stats().Flows == 1 })
	if !DivertAmong(udpPkt(t, "198.18.2.2:53", "198.18.5.2:40000", []byte("a")), fars...) {
		t.Fatal("the answer was left to the stack")
	}
	if senders[0].count() != 0 || senders[1].count() != 1 {
		t.Errorf("sent %d by branch 0 and %d by branch 1, want the answer by branch 1", senders[0].count(), senders[1].count())
	}
	if !DivertAmong(udpPkt(t, "198.18.2.2:53", "198.18.6.2:40000", []byte("a")), fars...) {
		t.Fatal("an answer of no flow was left to the stack")
	}
	if a, b := fars[0].Stats().Drops.Unmatched, fars[1].Stats().Drops.Unmatched; a != 1 || b != 0 {
		t.Errorf("unmatched %d and %d, want 1 and 0", a, b)
	}
	if DivertAmong(udpPkt(t, "198.18.2.2:53", "198.18.6.2:40000", nil)) {
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
	f.Deliver(udpPkt(t, "198.18.1.2:40000", "198.18.2.2:53", []byte("q")))
	waitFor(t, "the flow", func() bool { return f.Stats().Flows == 1 })
	reply := udpPkt(t, "198.18.2.2:53", "198.18.1.2:40000", []byte("answer"))
	unreach := icmpErrPkt(t, "198.18.2.2", udpPkt(t, "198.18.1.2:40000", "198.18.2.2:53", []byte("q")), ICMPDestUnreachable, 3)
	if n := testing.AllocsPerRun(100, func() { f.Divert(reply); f.Divert(unreach) }); n != 0 {
		t.Errorf("%.1f allocations per two answers", n)
	}
}

type discardSender struct{}

func (discardSender) SendDatagram([]byte) error { return nil }
func (discardSender) MaxDatagramBytes() int     { return 1400 }

// FuzzICMPError: parseICMPError never panics, and what it accepts is
// consistent: an error to the quoted packet's sender, within the bytes.
func FuzzICMPError(f *testing.F) {
	udp := udpPkt(f, "198.18.1.2:40000", "198.18.2.2:53", []byte("query"))
	f.Add(icmpErrPkt(f, "198.18.2.2", udp, ICMPDestUnreachable, 3))
	f.Add(icmpErrPkt(f, "2001:2::1", echoPkt(f, "2001:2:0:1::2", "2001:2:0:2::2", ICMPv6EchoRequest, 1, "x"), ICMPv6PacketTooBig, 0))
	f.Add(icmpErrPkt(f, "198.18.2.1", tcpPkt(f, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagSyn, synOpts, ""), icmpTimeExceeded, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := parseICMPError(b)
		if err != nil {
			return
		}
		if e.len > len(b) || e.from.Addr() != e.dst || e.from.Addr().Is4() != e.to.Addr().Is4() {
			t.Fatalf("inconsistent error from % x: %+v", b, e)
		}
		if e.proto != ProtoUDP && e.proto != ProtoTCP && e.proto != ProtoICMP && e.proto != ProtoICMPv6 {
			t.Fatalf("about protocol %d", e.proto)
		}
		if p, ok := Protocol(b); !ok || !maybeICMPError(b, p) {
			t.Fatal("parsed what the quick check refuses")
		}
	})
}
