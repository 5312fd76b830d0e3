package dgram

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanopt/wanopt/dgram/internal/pkttest"
	"github.com/wanopt/wanopt/dgram/packet"
)

// TestTooBig: a packet longer than the tunnel's datagram is answered
// toward its client as a router answers: ICMP fragmentation needed with
// the next-hop MTU (IPv4, DF set), ICMPv6 packet too big (IPv6), checked
// byte by byte, checksums by onesSum; an IPv4 packet without DF is only
// dropped.
func TestTooBig(t *testing.T) {
	const max = 1400 // the tunnel's datagram: the IP packet may have 1399 bytes
	s := &fakeSender{max: max}
	var written [][]byte
	n := NewNear(NearConfig{Route: func(netip.Addr) packet.Sender { return s },
		Write: func(p []byte) error { written = append(written, bytes.Clone(p)); return nil }})
	client, server := netip.MustParseAddrPort("198.18.1.2:5000"), netip.MustParseAddrPort("198.18.2.2:4433")
	client6, server6 := netip.MustParseAddrPort("[2001:db8:1::2]:5000"), netip.MustParseAddrPort("[2001:db8:2::2]:4433")

	// IPv4 with DF (PutUDP sets it): 1,428 bytes, 29 too many.
	big := pkttest.UDP(t, client.String(), server.String(), make([]byte, 1400))
	for i := range big[28:] {
		big[28+i] = byte(i)
	}
	packet.PutUDP(big, client, server)
	if !n.Divert(big) || len(s.sent) != 0 || len(written) != 1 {
		t.Fatalf("IPv4 too big: %d sent, %d written", len(s.sent), len(written))
	}
	a := written[0]
	if len(a) != 576 || a[0] != 0x45 || binary.BigEndian.Uint16(a[2:]) != 576 || a[9] != packet.ProtoICMP || pkttest.OnesSum(a[:20]) != 0xffff {
		t.Fatalf("IPv4 answer header: % x", a[:20])
	}
	if !bytes.Equal(a[12:16], server.Addr().AsSlice()) || !bytes.Equal(a[16:20], client.Addr().AsSlice()) {
		t.Errorf("IPv4 answer from %v to %v; want from the server to the client", a[12:16], a[16:20])
	}
	icmp := a[20:]
	if icmp[0] != 3 || icmp[1] != 4 || icmp[4] != 0 || icmp[5] != 0 || binary.BigEndian.Uint16(icmp[6:]) != max-1 || pkttest.OnesSum(icmp) != 0xffff {
		t.Errorf("ICMP header % x (checksum sum %#x): want type 3 code 4, MTU %d", icmp[:8], pkttest.OnesSum(icmp), max-1)
	}
	if !bytes.Equal(icmp[8:], big[:576-28]) {
		t.Error("the ICMP error does not quote the packet's first 548 bytes")
	}

	// IPv4 without DF: dropped, not answered.
	noDF := bytes.Clone(big)
	noDF[6] = 0
	pkttest.FixIPv4Checksum(noDF)
	if !n.Divert(noDF) || len(written) != 1 {
		t.Errorf("IPv4 without DF: %d written; want no answer", len(written))
	}

	// IPv6: packet too big, quoting up to 1,280 bytes in all.
	big6 := pkttest.UDP(t, client6.String(), server6.String(), make([]byte, 1400))
	if !n.Divert(big6) || len(written) != 2 {
		t.Fatalf("IPv6 too big: %d written", len(written))
	}
	a = written[1]
	if len(a) != 1280 || a[0]>>4 != 6 || binary.BigEndian.Uint16(a[4:]) != 1240 || a[6] != packet.ProtoICMPv6 || a[7] == 0 {
		t.Fatalf("IPv6 answer header: % x", a[:40])
	}
	if !bytes.Equal(a[8:24], server6.Addr().AsSlice()) || !bytes.Equal(a[24:40], client6.Addr().AsSlice()) {
		t.Error("IPv6 answer not from the server to the client")
	}
	icmp = a[40:]
	if icmp[0] != 2 || icmp[1] != 0 || binary.BigEndian.Uint32(icmp[4:]) != max-1 ||
		pkttest.OnesSum(pkttest.Pseudo(server6.Addr(), client6.Addr(), packet.ProtoICMPv6, len(icmp)), icmp) != 0xffff {
		t.Errorf("ICMPv6 header % x: want type 2 code 0, MTU %d, checksum right", icmp[:8], max-1)
	}
	if !bytes.Equal(icmp[8:], big6[:1280-48]) {
		t.Error("the ICMPv6 error does not quote the packet's first 1,232 bytes")
	}

	// A short packet is quoted whole.
	small := &fakeSender{max: 100}
	n2 := NewNear(NearConfig{Route: func(netip.Addr) packet.Sender { return small },
		Write: func(p []byte) error { written = append(written, bytes.Clone(p)); return nil }})
	pkt := pkttest.UDP(t, client.String(), server.String(), make([]byte, 100))
	n2.Divert(pkt)
	if a := written[len(written)-1]; len(a) != 28+len(pkt) || !bytes.Equal(a[28:], pkt) || binary.BigEndian.Uint16(a[26:]) != 99 {
		t.Errorf("short packet's answer: %d bytes", len(a))
	}

	st := n.Stats()
	if st.Drops.TooBig != 3 || st.TooBigAnswered != 2 || st.TooBigLimited != 0 || st.UDP.PacketsUp != 0 {
		t.Errorf("stats %+v; want 3 too big, 2 answered", st)
	}
}

// TestTooBigRate: the answers come at most TooBigBurst at once and
// TooBigPerSecond a second; the rest are counted.
func TestTooBigRate(t *testing.T) {
	var clock atomic.Int64
	var answers int
	n := NewNear(NearConfig{Route: func(netip.Addr) packet.Sender { return &fakeSender{max: 1000} },
		Write: func([]byte) error { answers++; return nil },
		now:   func() time.Time { return time.Unix(0, clock.Load()) }})
	big := pkttest.UDP(t, "198.18.1.2:5000", "198.18.2.2:53", make([]byte, 1200))
	flood := func(k int) int {
		before := answers
		for range k {
			n.Divert(big)
		}
		return answers - before
	}
	if got := flood(1000); got != TooBigBurst {
		t.Errorf("a burst of 1000 at once: %d answered, want %d", got, TooBigBurst)
	}
	// One second of a packet every millisecond: the rate, plus at most
	// the burst.
	total := 0
	for range 1000 {
		clock.Add(int64(time.Millisecond))
		total += flood(1)
	}
	if total < TooBigPerSecond-1 || total > TooBigPerSecond+TooBigBurst {
		t.Errorf("one second of a packet a millisecond: %d answered, want about %d", total, TooBigPerSecond)
	}
	// Idle for an hour: still only the burst.
	clock.Add(int64(time.Hour))
	if got := flood(1000); got != TooBigBurst {
		t.Errorf("after an hour: %d answered, want %d", got, TooBigBurst)
	}
	st := n.Stats()
	if st.TooBigAnswered != uint64(answers) || st.TooBigLimited != st.Drops.TooBig-st.TooBigAnswered || st.Drops.TooBig != 3000 {
		t.Errorf("stats %+v, %d answers", st, answers)
	}
}
