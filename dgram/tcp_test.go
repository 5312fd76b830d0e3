package dgram

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/dgram/internal/pkttest"
	"github.com/wanopt/wanopt/dgram/packet"
	"github.com/wanopt/wanopt/dgram/passthru"
	"github.com/wanopt/wanopt/ingress"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// nearPass is a Near with a pass rule for port 22 and a drop rule for
// port 23, on a fake tunnel and TUN, on a clock the test moves.
func nearPass(t *testing.T, max int) (*Near, *fakeSender, *[][]byte, *time.Time) {
	s := &fakeSender{max: max}
	var written [][]byte
	now := time.Unix(1000, 0)
	rs, err := ingress.ParseRules([]string{"pass:tcp:198.18.2.0/24:22", "drop:tcp:198.18.2.0/24:23"})
	if err != nil {
		t.Fatal(err)
	}
	n := NewNear(NearConfig{Route: func(netip.Addr) packet.Sender { return s },
		Write: func(p []byte) error { written = append(written, bytes.Clone(p)); return nil },
		Rules: rs, MaxPassFlows: 2, now: func() time.Time { return now }})
	return n, s, &written, &now
}

func TestNearPassTCP(t *testing.T) {
	n, s, written, now := nearPass(t, 1430)
	syn := pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagSyn, pkttest.SynOpts, "")
	data := pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagAck|header.TCPFlagPsh, nil, "hello")
	other := pkttest.TCP(t, "198.18.1.2:40001", "198.18.2.2:80", header.TCPFlagSyn, pkttest.SynOpts, "")
	telnet := pkttest.TCP(t, "198.18.1.2:40002", "198.18.2.2:23", header.TCPFlagSyn, pkttest.SynOpts, "")
	stray := pkttest.TCP(t, "198.18.1.2:40003", "198.18.2.2:22", header.TCPFlagAck, nil, "x")

	for _, c := range []struct {
		name string
		pkt  []byte
		take bool
	}{{"passed SYN", syn, true}, {"passed data", data, true}, {"optimised SYN", other, false}, {"dropped SYN", telnet, true},
		{"ACK of no passed flow", stray, false}, {"garbage", []byte{0x45, 0, 0, 1}, false}} {
		if got := n.DivertTCP(c.pkt); got != c.take {
			t.Errorf("DivertTCP(%s) = %v, want %v", c.name, got, c.take)
		}
	}
	if len(s.sent) != 2 || s.sent[0][0] != packet.KindUp || s.sent[1][0] != packet.KindUp {
		t.Fatalf("sent %d datagrams, want the SYN and the data", len(s.sent))
	}
	if got := pkttest.MSSOf(s.sent[0][1:]); got != 1430-41 {
		t.Errorf("the passed SYN's MSS is %d, want it clamped to %d", got, 1430-41)
	}
	if !pkttest.TCPChecksumOK(s.sent[0][1:]) || !bytes.Equal(s.sent[1][1:], data) {
		t.Error("the passed packets were damaged")
	}
	st := n.Stats()
	if st.TCP.PacketsUp != 2 || st.TCPFlows != 1 || st.Drops.Policy != 1 || st.Drops.Total() != 1 {
		t.Errorf("stats %+v", st)
	}

	// The answer comes back through Deliver; a TCP packet of a flow not
	// passed here is dropped.
	synAck := pkttest.TCP(t, "198.18.2.2:22", "198.18.1.2:40000", header.TCPFlagSyn|header.TCPFlagAck, pkttest.SynOpts, "")
	Demux(append([]byte{packet.KindDown}, synAck...), n, nil)
	Demux(append([]byte{packet.KindDown}, pkttest.TCP(t, "198.18.2.2:80", "198.18.1.2:40001", header.TCPFlagAck, nil, "x")...), n, nil)
	if len(*written) != 1 || !bytes.Equal((*written)[0], synAck) {
		t.Fatalf("wrote %d packets to the TUN, want the SYN-ACK", len(*written))
	}
	if st := n.Stats(); st.TCP.PacketsDown != 1 || st.Drops.NotAllowed != 1 {
		t.Errorf("stats after the answers %+v", st)
	}
	fl := n.PassedFlows()
	if len(fl) != 1 || fl[0].Client != netip.MustParseAddrPort("198.18.1.2:40000") || fl[0].PacketsUp != 2 || fl[0].PacketsDown != 1 {
		t.Errorf("passed flows %+v", fl)
	}

	// The bound: a second flow fits, a third SYN is dropped.
	if !n.DivertTCP(pkttest.TCP(t, "198.18.1.2:40010", "198.18.2.2:22", header.TCPFlagSyn, pkttest.SynOpts, "")) ||
		!n.DivertTCP(pkttest.TCP(t, "198.18.1.2:40011", "198.18.2.2:22", header.TCPFlagSyn, pkttest.SynOpts, "")) {
		t.Fatal("a passed SYN was left to the stack")
	}
	if st := n.Stats(); st.TCPFlows != 2 || st.Drops.FlowLimit != 1 {
		t.Errorf("at the bound: %+v", st)
	}
	// A RST ends a flow after PassClosingTimeout; the others idle out
	// after DefaultPassIdleTimeout; then the table is empty and TCP left
	// to the stack.
	n.DivertTCP(pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagRst|header.TCPFlagAck, nil, ""))
	*now = now.Add(passthru.PassClosingTimeout + time.Second)
	if !n.DivertTCP(pkttest.TCP(t, "198.18.1.2:40012", "198.18.2.2:22", header.TCPFlagSyn, pkttest.SynOpts, "")) {
		t.Fatal("a passed SYN was left to the stack")
	}
	if st := n.Stats(); st.TCPFlows != 2 || st.Drops.FlowLimit != 1 {
		t.Errorf("after the closed flow expired: %+v", st)
	}
	*now = now.Add(passthru.DefaultPassIdleTimeout + time.Second)
	if fl := n.PassedFlows(); len(fl) != 0 {
		t.Errorf("idle flows listed: %+v", fl)
	}
	n.DivertTCP(pkttest.TCP(t, "198.18.1.2:40013", "198.18.2.2:22", header.TCPFlagSyn, pkttest.SynOpts, ""))
	if fl := n.PassedFlows(); len(fl) != 1 {
		t.Errorf("after the sweep %d flows, want the new one", len(fl))
	}
	if n.DivertTCP(data) {
		t.Error("a packet of an expired flow was passed")
	}

	// Rules changed: new SYNs follow them, and with no TCP rule and an
	// empty table TCP is not even parsed.
	n.SetRules(nil)
	if n.DivertTCP(pkttest.TCP(t, "198.18.1.2:40014", "198.18.2.2:22", header.TCPFlagSyn, pkttest.SynOpts, "")) {
		t.Error("a SYN with no pass rule was passed")
	}
	// The flow passed before goes on; once idle, its next packet forgets
	// it, with no SYN to sweep the table.
	late := pkttest.TCP(t, "198.18.1.2:40013", "198.18.2.2:22", header.TCPFlagAck, nil, "late")
	if !n.DivertTCP(late) {
		t.Error("a passed flow's packet was left to the stack after the rules changed")
	}
	*now = now.Add(passthru.DefaultPassIdleTimeout + time.Second)
	if n.DivertTCP(late) || n.Stats().TCPFlows != 0 {
		t.Errorf("an idle flow's packet: still passed, or %d flows left", n.Stats().TCPFlows)
	}
}

// TestNearPassSegments: a passed packet too long for a datagram (an
// aggregate from the TUN's offload) crosses as the segments that fit,
// with contiguous sequence numbers, valid checksums, and FIN and PSH on
// the last; one whose headers alone do not fit is answered as a router
// would (fragmentation needed).
func TestNearPassSegments(t *testing.T) {
	n, s, written, _ := nearPass(t, 200)
	n.DivertTCP(pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagSyn, nil, ""))
	payload := make([]byte, 1000)
	for i := range payload {
		payload[i] = byte(i)
	}
	big := pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagAck|header.TCPFlagPsh|header.TCPFlagFin, []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}, string(payload))
	if !n.DivertTCP(big) {
		t.Fatal("a long passed packet was left to the stack")
	}
	var got []byte
	seq := uint32(1000)
	segs := s.sent[1:]
	for i, d := range segs {
		if len(d) > 200 || d[0] != packet.KindUp || !pkttest.TCPChecksumOK(d[1:]) || header.IPv4(d[1:]).IsChecksumValid() == false {
			t.Fatalf("segment %d: %d bytes, kind %d, checksums bad", i, len(d), d[0])
		}
		th := header.TCP(d[1+20:])
		if th.SequenceNumber() != seq {
			t.Fatalf("segment %d: seq %d, want %d", i, th.SequenceNumber(), seq)
		}
		last := i == len(segs)-1
		if fin := th.Flags()&header.TCPFlagFin != 0; fin != last || (th.Flags()&header.TCPFlagPsh != 0) != last {
			t.Errorf("segment %d of %d: flags %v", i, len(segs), th.Flags())
		}
		if len(th.Options()) != 12 {
			t.Errorf("segment %d: options %d bytes, want the timestamps' 12", i, len(th.Options()))
		}
		got = append(got, th.Payload()...)
		seq += uint32(len(th.Payload()))
	}
	if !bytes.Equal(got, payload) || len(segs) != 7 { // 199 - 20 - 32 = 147 bytes a segment
		t.Errorf("%d segments carried %d bytes, want 7 carrying the %d sent", len(segs), len(got), len(payload))
	}
	if st := n.Stats(); st.TCP.PacketsUp != 8 || st.Drops.Total() != 0 || len(*written) != 0 {
		t.Errorf("stats %+v, %d answers", st, len(*written))
	}

	// Headers too long for the datagram: answered.
	n2, s2, written2, _ := nearPass(t, 69)
	longOpts := append(bytes.Repeat([]byte{1}, 16), pkttest.SynOpts...) // 76 bytes in all
	if !n2.DivertTCP(pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagSyn, longOpts, "")) {
		t.Fatal("a passed SYN was left to the stack")
	}
	if len(s2.sent) != 0 || len(*written2) != 1 || (*written2)[0][20] != packet.ICMPDestUnreachable ||
		binary.BigEndian.Uint16((*written2)[0][26:]) != 68 {
		t.Fatalf("sent %d, answered %d", len(s2.sent), len(*written2))
	}
	if st := n2.Stats(); st.Drops.TooBig != 1 || st.TooBigAnswered != 1 {
		t.Errorf("stats %+v", st)
	}
}

// lockedSender is a fakeSender safe for the far side's goroutines.
type lockedSender struct {
	mu sync.Mutex
	fakeSender
}

func (s *lockedSender) SendDatagram(p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fakeSender.SendDatagram(p)
}

func (s *lockedSender) count() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.sent) }

func TestFarPassTCP(t *testing.T) {
	var (
		mu  sync.Mutex
		out [][]byte
	)
	check := func(d netip.AddrPort) string {
		if d.Port() == 22 {
			return ""
		}
		return "not allowed by policy"
	}
	far := NewFar(FarConfig{Check: check, WritePacket: func(p []byte) error {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, bytes.Clone(p))
		return nil
	}})
	defer far.Close()
	s := &lockedSender{fakeSender: fakeSender{max: 1430}}
	far.SetTunnel(s)
	synAck := pkttest.TCP(t, "198.18.2.2:22", "198.18.1.2:40000", header.TCPFlagSyn|header.TCPFlagAck, pkttest.SynOpts, "")
	if far.DivertTCP(synAck) {
		t.Fatal("an answer of no passed flow was taken")
	}
	syn := pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagSyn, pkttest.SynOpts, "")
	far.Deliver(syn)
	far.Deliver(pkttest.TCP(t, "198.18.1.2:40001", "198.18.2.2:80", header.TCPFlagSyn, pkttest.SynOpts, "")) // refused
	waitFor(t, "the SYN written and the other refused", func() bool { return far.Stats().TCP.PacketsUp == 1 && far.Stats().Drops.NotAllowed == 1 })
	mu.Lock()
	if len(out) != 1 || !bytes.Equal(out[0], syn) {
		t.Errorf("wrote %d packets out, want the SYN as it came", len(out))
	}
	mu.Unlock()
	if !far.DivertTCP(synAck) {
		t.Fatal("the passed flow's SYN-ACK was left to the stack")
	}
	if far.DivertTCP(pkttest.TCP(t, "198.18.2.2:80", "198.18.1.2:40001", header.TCPFlagRst, nil, "")) {
		t.Error("an answer of the refused flow was taken")
	}
	if s.count() != 1 || s.sent[0][0] != packet.KindDown || pkttest.MSSOf(s.sent[0][1:]) != 1389 || !pkttest.TCPChecksumOK(s.sent[0][1:]) {
		t.Fatalf("sent %d datagrams, want the SYN-ACK with its MSS clamped to 1389", s.count())
	}
	if st := far.Stats(); st.TCP.PacketsDown != 1 || st.TCPFlows != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestFarPassTCPNoTUN: a far edge without a TUN (kernel egress) cannot
// send passed TCP on: it counts it as unsupported.
func TestFarPassTCPNoTUN(t *testing.T) {
	far := NewFar(FarConfig{Check: func(netip.AddrPort) string { return "" }})
	defer far.Close()
	far.Deliver(pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagSyn, pkttest.SynOpts, ""))
	waitFor(t, "the SYN counted unsupported", func() bool { return far.Stats().Drops.Unsupported == 1 })
	if st := far.Stats(); st.TCPFlows != 0 || st.TCP.PacketsUp != 0 {
		t.Errorf("stats %+v", st)
	}
}
