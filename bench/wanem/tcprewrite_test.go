package wanem

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Packets for the middlebox tests are built with gopacket, not with the
// code under test, and checked with checksumOK, written apart from it.

var (
	src4, dst4 = net.IPv4(198, 18, 0, 1), net.IPv4(198, 18, 0, 2)
	src6, dst6 = net.ParseIP("2001:db8::1"), net.ParseIP("2001:db8::2")
)

// seg describes a TCP segment to build.
type seg struct {
	v6       bool
	syn, rst bool
	noACK    bool
	ack      uint32
	window   uint16
	opts     []layers.TCPOption
	payload  int
	sport    layers.TCPPort
}

func nop() layers.TCPOption {
	return layers.TCPOption{OptionType: layers.TCPOptionKindNop, OptionLength: 1}
}

func tsOpt() layers.TCPOption {
	return layers.TCPOption{OptionType: layers.TCPOptionKindTimestamps, OptionData: make([]byte, 8)}
}

func wsOpt(shift byte) layers.TCPOption {
	return layers.TCPOption{OptionType: layers.TCPOptionKindWindowScale, OptionData: []byte{shift}}
}

// sackOpt is a SACK option with the given blocks (left, right pairs).
func sackOpt(edges ...uint32) layers.TCPOption {
	d := make([]byte, 4*len(edges))
	for i, e := range edges {
		binary.BigEndian.PutUint32(d[4*i:], e)
	}
	return layers.TCPOption{OptionType: layers.TCPOptionKindSACK, OptionData: d}
}

// build serializes s with correct lengths and checksums.
func build(t testing.TB, s seg) []byte {
	t.Helper()
	sport := s.sport
	if sport == 0 {
		sport = 40000
	}
	tcp := &layers.TCP{SrcPort: sport, DstPort: 5001, Seq: 1000, Ack: s.ack, ACK: !s.noACK, SYN: s.syn, RST: s.rst,
		Window: s.window, Options: s.opts}
	var nl gopacket.SerializableLayer
	if s.v6 {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, SrcIP: src6, DstIP: dst6}
		_ = tcp.SetNetworkLayerForChecksum(ip)
		nl = ip
	} else {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src4, DstIP: dst4}
		_ = tcp.SetNetworkLayerForChecksum(ip)
		nl = ip
	}
	return serialize(t, nl, tcp, gopacket.Payload(bytes.Repeat([]byte{0xab}, s.payload)))
}

// udp serializes a UDP datagram with n bytes of payload.
func udp(t testing.TB, v6 bool, n int) []byte {
	t.Helper()
	u := &layers.UDP{SrcPort: 4500, DstPort: 4500}
	var nl gopacket.SerializableLayer
	if v6 {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: src6, DstIP: dst6}
		_ = u.SetNetworkLayerForChecksum(ip)
		nl = ip
	} else {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: src4, DstIP: dst4}
		_ = u.SetNetworkLayerForChecksum(ip)
		nl = ip
	}
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + 3)
	}
	return serialize(t, nl, u, gopacket.Payload(p))
}

func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true, FixLengths: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

// roomy copies b into a slice with room to grow.
func roomy(b []byte) []byte {
	return append(make([]byte, 0, len(b)+maxSACKGrowth), b...)
}

// rfc1071 is the one's-complement sum of b, folded, the plain RFC 1071
// way (kept apart from the code under test).
func rfc1071(b []byte) uint16 {
	var sum uint32
	for i := 0; i < len(b); i++ {
		if i%2 == 0 {
			sum += uint32(b[i]) << 8
		} else {
			sum += uint32(b[i])
		}
	}
	for sum > 0xffff {
		sum = (sum >> 16) + (sum & 0xffff)
	}
	return uint16(sum)
}

// split returns pkt's IPv4 header length (0 for IPv6), its transport
// protocol and segment, and the pseudo-header followed by the segment.
func split(pkt []byte) (ihl int, proto byte, l4b, withPseudo []byte) {
	if pkt[0]>>4 == 4 {
		ihl = int(pkt[0]&0xf) * 4
		proto, l4b = pkt[9], pkt[ihl:]
		withPseudo = append(append([]byte{}, pkt[12:20]...), 0, proto, byte(len(l4b)>>8), byte(len(l4b)))
	} else {
		proto, l4b = pkt[6], pkt[40:]
		withPseudo = append(append([]byte{}, pkt[8:40]...), 0, 0, byte(len(l4b)>>8), byte(len(l4b)), 0, 0, 0, proto)
	}
	return ihl, proto, l4b, append(withPseudo, l4b...)
}

// checksumOK verifies pkt's IPv4 header checksum and its TCP or UDP checksum.
func checksumOK(pkt []byte) bool {
	ihl, proto, l4b, all := split(pkt)
	if ihl > 0 && rfc1071(pkt[:ihl]) != 0xffff {
		return false
	}
	if proto == protoUDP && ihl > 0 && len(l4b) >= 8 && l4b[6] == 0 && l4b[7] == 0 {
		return true // sent without a checksum
	}
	return rfc1071(all) == 0xffff
}

// fixSums recomputes pkt's IPv4 header and TCP or UDP checksums, so that a
// test can break one thing only.
func fixSums(pkt []byte) {
	ihl, proto, l4b, _ := split(pkt)
	if ihl > 0 {
		pkt[10], pkt[11] = 0, 0
		binary.BigEndian.PutUint16(pkt[10:], ^rfc1071(pkt[:ihl]))
	}
	at := 16
	if proto == protoUDP {
		at = 6
	}
	l4b[at], l4b[at+1] = 0, 0
	_, _, _, all := split(pkt)
	c := ^rfc1071(all)
	if c == 0 && proto == protoUDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(l4b[at:], c)
}

// decodeTCP parses pkt with gopacket.
func decodeTCP(t *testing.T, pkt []byte) *layers.TCP {
	t.Helper()
	first := layers.LayerTypeIPv4
	if pkt[0]>>4 == 6 {
		first = layers.LayerTypeIPv6
	}
	p := gopacket.NewPacket(pkt, first, gopacket.Default)
	if el := p.ErrorLayer(); el != nil {
		t.Fatalf("rewritten packet does not decode: %v", el.Error())
	}
	tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if tcp == nil {
		t.Fatal("no TCP layer in the rewritten packet")
	}
	return tcp
}

// sackBlocks returns the blocks of the SACK option of tcp, or nil.
func sackBlocks(tcp *layers.TCP) [][2]uint32 {
	for _, o := range tcp.Options {
		if o.OptionType == layers.TCPOptionKindSACK {
			var bl [][2]uint32
			for d := o.OptionData; len(d) >= 8; d = d[8:] {
				bl = append(bl, [2]uint32{binary.BigEndian.Uint32(d), binary.BigEndian.Uint32(d[4:])})
			}
			return bl
		}
	}
	return nil
}

func hasTimestamps(tcp *layers.TCP) bool {
	for _, o := range tcp.Options {
		if o.OptionType == layers.TCPOptionKindTimestamps {
			return true
		}
	}
	return false
}

func TestForgeSACK(t *testing.T) {
	f := ForgedSACK{Offset: 65536, Length: 16384}
	var ack uint32 = 0xfffff000 // the block wraps the sequence space
	forged := [2]uint32{ack + 65536, ack + 65536 + 16384}
	tests := []struct {
		name   string
		s      seg
		grow   int
		blocks [][2]uint32 // want; nil: left alone
	}{
		{"IPv4 ACK with timestamps", seg{ack: ack, opts: []layers.TCPOption{nop(), nop(), tsOpt()}}, 12, [][2]uint32{forged}},
		{"IPv6 ACK without options", seg{v6: true, ack: ack}, 12, [][2]uint32{forged}},
		{"FIN-ACK", seg{ack: ack}, 12, [][2]uint32{forged}},
		{"ACK with a SACK block: forged one goes first", seg{ack: ack, opts: []layers.TCPOption{nop(), nop(), tsOpt(), nop(), nop(), sackOpt(ack+10, ack+20)}}, 8,
			[][2]uint32{forged, {ack + 10, ack + 20}}},
		{"options full: first block replaced", seg{ack: ack, opts: []layers.TCPOption{nop(), nop(), tsOpt(), nop(), nop(),
			sackOpt(ack+10, ack+20, ack+30, ack+40, ack+50, ack+60)}}, 0, [][2]uint32{forged, {ack + 30, ack + 40}, {ack + 50, ack + 60}}},
		{"no SACK and no room", seg{ack: ack, opts: []layers.TCPOption{tsOpt(), tsOpt(), tsOpt(), nop(), nop(), nop(), nop(), nop(), nop(), nop(), nop(), nop(), nop()}}, 0, nil},
		{"data segment", seg{ack: ack, payload: 100}, 0, nil},
		{"SYN-ACK", seg{ack: ack, syn: true}, 0, nil},
		{"RST", seg{ack: ack, rst: true}, 0, nil},
		{"no ACK flag", seg{noACK: true}, 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := build(t, tc.s)
			if !checksumOK(in) {
				t.Fatal("test packet has a bad checksum")
			}
			got, ok := forgeSACK(roomy(in), f)
			if tc.blocks == nil {
				if ok || !bytes.Equal(got, in) {
					t.Fatalf("rewrote a packet it must leave alone: ok %v\n in %x\nout %x", ok, in, got)
				}
				return
			}
			if !ok {
				t.Fatal("left the ACK alone")
			}
			if len(got) != len(in)+tc.grow {
				t.Errorf("grew by %d bytes, want %d", len(got)-len(in), tc.grow)
			}
			if !checksumOK(got) {
				t.Error("checksums wrong after the rewrite")
			}
			tcp := decodeTCP(t, got)
			if bl := sackBlocks(tcp); !equalBlocks(bl, tc.blocks) {
				t.Errorf("SACK blocks %v, want %v", bl, tc.blocks)
			}
			if hasTimestamps(decodeTCP(t, in)) && !hasTimestamps(tcp) {
				t.Error("the timestamps option was lost")
			}
			if tcp.Ack != ack || tcp.Seq != 1000 || len(tcp.Payload) != 0 {
				t.Errorf("header changed: seq %d ack %d payload %d", tcp.Seq, tcp.Ack, len(tcp.Payload))
			}
		})
	}
}

func equalBlocks(a, b [][2]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Bad packets pass untouched: a wrong checksum (never laundered), bad
// option lengths, fragments, every truncation, no room in the buffer.
func TestForgeSACKLeavesBadPacketsAlone(t *testing.T) {
	f := ForgedSACK{Offset: 1, Length: 1}
	good := build(t, seg{ack: 5, opts: []layers.TCPOption{nop(), nop(), tsOpt()}})
	// Each case breaks one thing; the checksums are fixed after the
	// others, so that they are not what stops the rewrite.
	fixed := func(f func([]byte)) func([]byte) []byte {
		return func(b []byte) []byte { f(b); fixSums(b); return b }
	}
	cases := map[string]func([]byte) []byte{
		"bad TCP checksum":    func(b []byte) []byte { b[len(b)-1] ^= 1; return b },
		"bad IPv4 checksum":   func(b []byte) []byte { b[8]--; return b }, // TTL: not in the TCP sum
		"option length 0":     fixed(func(b []byte) { b[20+20+2], b[20+20+3] = 8, 0 }),
		"option past header":  fixed(func(b []byte) { b[20+20+2], b[20+20+3] = 8, 11 }),
		"two SACK options":    fixed(func(b []byte) { b[20+20+2], b[20+20+3], b[20+20+4], b[20+20+5] = 5, 2, 5, 2 }),
		"SACK of odd length":  fixed(func(b []byte) { b[20+20+2], b[20+20+3] = 5, 10-1 }),
		"fragment":            fixed(func(b []byte) { b[6] |= 0x20 }),
		"fragment offset":     fixed(func(b []byte) { b[7] = 1 }),
		"IPv4 length too big": fixed(func(b []byte) { b[3]++ }),
		"data offset too big": fixed(func(b []byte) { b[20+12] = 0xf0 }),
		"not IP":              func(b []byte) []byte { b[0] = 0x55; return b },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			in := mutate(bytes.Clone(good))
			got, ok := forgeSACK(roomy(in), f)
			if ok || !bytes.Equal(got, in) {
				t.Fatalf("rewrote it: %x", got)
			}
		})
	}
	for n := 0; n < len(good); n++ {
		if got, ok := forgeSACK(roomy(good[:n]), f); ok || !bytes.Equal(got, good[:n]) {
			t.Fatalf("rewrote the first %d bytes of an ACK", n)
		}
	}
	tight := make([]byte, len(good)) // capacity exactly its length
	copy(tight, good)
	if _, ok := forgeSACK(tight, f); ok {
		t.Error("grew a packet with no room in its buffer")
	}
	// The cases above are left alone for their defect only.
	if _, ok := forgeSACK(roomy(good), f); !ok {
		t.Fatal("the unbroken ACK was left alone too")
	}
}

func TestClampWindow(t *testing.T) {
	const clamp = 16384
	var st scaleTable
	check := func(name string, pkt []byte, wantOK bool, wantWin uint16) {
		t.Helper()
		in := bytes.Clone(pkt)
		ok := clampWindow(pkt, clamp, &st)
		if ok != wantOK {
			t.Errorf("%s: clamped %v, want %v", name, ok, wantOK)
		}
		if !ok && !bytes.Equal(pkt, in) {
			t.Errorf("%s: changed bytes without saying so", name)
		}
		if w := decodeTCP(t, pkt).Window; w != wantWin {
			t.Errorf("%s: window field %d, want %d", name, w, wantWin)
		}
		if !checksumOK(pkt) {
			t.Errorf("%s: checksum wrong", name)
		}
	}
	// A connection unseen so far is clamped as if unscaled.
	check("unseen flow", build(t, seg{ack: 1, window: 60000, sport: 1}), true, clamp)
	// The SYN's own window is never scaled; it records scale 7.
	check("SYN", build(t, seg{syn: true, noACK: true, window: 64240, opts: []layers.TCPOption{wsOpt(7)}}), true, clamp)
	check("scaled ACK", build(t, seg{ack: 1, window: 1000, opts: []layers.TCPOption{nop(), nop(), tsOpt()}}), true, clamp>>7)
	check("small window left alone", build(t, seg{ack: 1, window: 100}), false, 100)
	check("data segment", build(t, seg{ack: 1, window: 5000, payload: 1400}), true, clamp>>7)
	check("RST left alone", build(t, seg{rst: true, window: 5000}), false, 5000)
	check("IPv6 unseen", build(t, seg{v6: true, ack: 1, window: 65535}), true, clamp)
	// A scale beyond the clamp's granularity gives a window of 1 unit,
	// not zero.
	check("SYN scale 14", build(t, seg{syn: true, noACK: true, window: 1000, sport: 2, opts: []layers.TCPOption{wsOpt(14)}}), false, 1000)
	check("scale 14", build(t, seg{ack: 1, window: 10, sport: 2}), true, 1)
	// A SYN without window scaling records scale 0.
	check("SYN no scale", build(t, seg{syn: true, noACK: true, window: 1000, sport: 3}), false, 1000)
	check("unscaled", build(t, seg{ack: 1, window: 20000, sport: 3}), true, clamp)
	// Offers above 14 count as 14 (RFC 7323).
	check("SYN scale 15", build(t, seg{syn: true, noACK: true, window: 1000, sport: 4, opts: []layers.TCPOption{wsOpt(15)}}), false, 1000)
	check("scale 15 as 14", build(t, seg{ack: 1, window: 2, sport: 4}), true, 1)
}

func TestTamperUDP(t *testing.T) {
	for _, tc := range []struct {
		name string
		pkt  []byte
	}{
		{"IPv4 even payload", udp(t, false, 100)},
		{"IPv4 odd payload", udp(t, false, 101)},
		{"IPv6 even payload", udp(t, true, 64)},
		{"IPv6 odd payload", udp(t, true, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := bytes.Clone(tc.pkt)
			if !tamperUDP(tc.pkt) {
				t.Fatal("left the datagram alone")
			}
			if !checksumOK(tc.pkt) {
				t.Error("checksum wrong after the rewrite")
			}
			n := len(in)
			if tc.pkt[n-1] != ^in[n-1] {
				t.Errorf("last byte %#x, want %#x", tc.pkt[n-1], ^in[n-1])
			}
			// Only the last byte and the checksum changed.
			var diff []int
			for i := range in {
				if in[i] != tc.pkt[i] {
					diff = append(diff, i)
				}
			}
			if diff[len(diff)-1] != n-1 || len(diff) > 3 {
				t.Errorf("bytes %v changed, want the checksum and the last byte", diff)
			}
		})
	}
	// No checksum (IPv4 may send none): the datagram keeps none.
	p := udp(t, false, 10)
	p[20+6], p[20+7] = 0, 0
	if !tamperUDP(p) || p[20+6] != 0 || p[20+7] != 0 {
		t.Error("a datagram without a checksum gained one")
	}
	// Left alone: no payload, a UDP length that does not match, TCP.
	for name, b := range map[string][]byte{
		"empty":      udp(t, false, 0),
		"bad length": func() []byte { b := udp(t, false, 10); b[20+5]++; return b }(),
		"TCP":        build(t, seg{ack: 1}),
	} {
		in := bytes.Clone(b)
		if tamperUDP(b) || !bytes.Equal(b, in) {
			t.Errorf("%s: rewritten", name)
		}
	}
}

// tamperUDP's checksum stays right whatever the payload (the incremental
// update has corner cases at 0x0000 and 0xffff).
func TestTamperUDPChecksumCornerCases(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for n := 3; n <= 4; n++ { // the last byte low, then high in its word
			for v := 0; v < 1<<16; v++ {
				p := udp(t, v6, n)
				binary.BigEndian.PutUint16(p[len(p)-2:], uint16(v))
				fixSums(p)
				if !tamperUDP(p) || !checksumOK(p) {
					t.Fatalf("IPv6 %v, %d-byte payload ending %#04x: checksum wrong after tampering", v6, n, v)
				}
			}
		}
	}
}

// The pipe applies the middlebox to the packets it admits and counts each
// rewrite; the queue and rate see the rewritten size.
func TestPipeMiddlebox(t *testing.T) {
	cfg := Config{Delay: time.Millisecond, RateBps: 8e6, ForgeSACK: &ForgedSACK{Offset: 65536, Length: 1448},
		WindowClamp: 16384, TamperUDPPct: 100}
	p := mustPipe(t, cfg)
	ack := build(t, seg{ack: 7, window: 30000, opts: []layers.TCPOption{nop(), nop(), tsOpt()}})
	data := build(t, seg{ack: 7, window: 100, payload: 1000})
	dgram := udp(t, false, 200)
	now := t0
	for _, pkt := range [][]byte{ack, data, dgram} {
		p.Enqueue(now, pkt)
	}
	got := drainAll(t, p)
	if len(got) != 3 {
		t.Fatalf("%d packets out, want 3", len(got))
	}
	if len(got[0].data) != len(ack)+12 || !checksumOK(got[0].data) {
		t.Errorf("ACK out: %d bytes (want %d), checksum ok %v", len(got[0].data), len(ack)+12, checksumOK(got[0].data))
	}
	if bl := sackBlocks(decodeTCP(t, got[0].data)); len(bl) != 1 || bl[0] != [2]uint32{7 + 65536, 7 + 65536 + 1448} {
		t.Errorf("forged blocks %v", bl)
	}
	if w := decodeTCP(t, got[0].data).Window; w != 16384 {
		t.Errorf("ACK window %d, want the clamp 16384 (no SYN seen: unscaled)", w)
	}
	if !bytes.Equal(got[1].data, data) {
		t.Error("the data segment with a small window was changed")
	}
	if got[2].data[len(dgram)-1] != ^dgram[len(dgram)-1] || !checksumOK(got[2].data) {
		t.Error("the UDP datagram was not tampered with, or its checksum is wrong")
	}
	// At 8 Mbit/s the 1 ms departure gap after the ACK is its grown size.
	if gap, want := got[1].at.Sub(got[0].at), time.Duration(len(data))*time.Microsecond; gap != want {
		t.Errorf("data left %v after the ACK, want %v (its own transmit time)", gap, want)
	}
	if first, want := got[0].at.Sub(t0), time.Millisecond+time.Duration(len(ack)+12)*time.Microsecond; first != want {
		t.Errorf("ACK released after %v, want %v: the rate limiter must charge the rewritten size", first, want)
	}
	// The largest packets get no room to grow and pass.
	for _, n := range []int{MaxPacketBytes, MaxPacketBytes - maxSACKGrowth + 1} {
		p.Enqueue(t0, packet(n, 1))
		if got := drainAll(t, p); len(got) != 1 || got[0].size != n {
			t.Errorf("a %d-byte packet came out as %+v", n, got)
		}
	}
	c := p.Counters()
	if c.SACKForged != 1 || c.WindowsClamped != 1 || c.UDPTampered != 1 {
		t.Errorf("counters forged %d clamped %d tampered %d, want 1 each", c.SACKForged, c.WindowsClamped, c.UDPTampered)
	}
	if want := uint64(len(ack) + 12 + len(data) + len(dgram) + 2*MaxPacketBytes - maxSACKGrowth + 1); c.Bytes != want {
		t.Errorf("released %d bytes, want %d", c.Bytes, want)
	}
}

// A rewritten packet the queue drops is not counted as rewritten: the
// counters are of what the link carried.
func TestRewriteCountsOnlyCarriedPackets(t *testing.T) {
	p := mustPipe(t, Config{RateBps: 1e6, QueueBytes: MinQueueBytes, TamperUDPPct: 100})
	d := udp(t, false, 1000)
	p.Enqueue(t0, d)
	p.Enqueue(t0, d) // the queue holds one
	c := p.Counters()
	if c.QueueDrops != 1 || c.UDPTampered != 1 {
		t.Errorf("queue drops %d, tampered %d: want 1 and 1", c.QueueDrops, c.UDPTampered)
	}
}

// TamperUDPPct draws only for UDP datagrams, from its own generator, so
// the losses are those of a pipe without tampering.
func TestTamperUDPPctDraws(t *testing.T) {
	run := func(cfg Config) (tampered []int, lost uint64) {
		p := mustPipe(t, cfg)
		for i := range 2000 {
			pkt := udp(t, false, 50)
			if i%3 == 0 {
				pkt = build(t, seg{ack: uint32(i)})
			}
			p.Enqueue(t0, pkt)
			if b, ok := p.Dequeue(t0); ok {
				if b[9] == protoUDP && b[len(b)-1] != pkt[len(pkt)-1] {
					tampered = append(tampered, i)
				}
				p.Release(b)
			}
		}
		return tampered, p.Counters().Lost
	}
	a, lostA := run(Config{TamperUDPPct: 10, LossPct: 5, Seed: 3})
	b, _ := run(Config{TamperUDPPct: 10, LossPct: 5, Seed: 3})
	_, lostNone := run(Config{LossPct: 5, Seed: 3})
	if len(a) < 80 || len(a) > 180 {
		t.Errorf("tampered with %d of about 1267 UDP datagrams, want about 10 %%", len(a))
	}
	if len(a) != len(b) || lostA != lostNone {
		t.Errorf("same seed: %d then %d tampered; lost %d with tampering, %d without", len(a), len(b), lostA, lostNone)
	}
}

// With the middlebox on, the warm pipe still allocates nothing per packet.
func TestMiddleboxAllocatesNothing(t *testing.T) {
	p := mustPipe(t, Config{Delay: time.Millisecond, RateBps: 1e9, ForgeSACK: &ForgedSACK{Offset: 1 << 16, Length: 1448},
		WindowClamp: 16384, TamperUDPPct: 50, DupPct: 10, Seed: 1})
	pkts := [][]byte{
		build(t, seg{syn: true, noACK: true, window: 64240, opts: []layers.TCPOption{wsOpt(7)}}),
		build(t, seg{ack: 9, window: 3000, opts: []layers.TCPOption{nop(), nop(), tsOpt()}}),
		build(t, seg{v6: true, ack: 9, window: 3000}),
		build(t, seg{ack: 9, window: 3000, payload: 1448}),
		udp(t, false, 1400),
	}
	now := t0
	step := func() {
		for _, pkt := range pkts {
			p.Enqueue(now, pkt)
		}
		now = now.Add(time.Millisecond)
		for {
			b, ok := p.Dequeue(now)
			if !ok {
				break
			}
			p.Release(b)
		}
	}
	for range 1000 {
		step()
	}
	if n := testing.AllocsPerRun(1000, step); n != 0 {
		t.Errorf("%v allocations per round of %d packets, want 0", n, len(pkts))
	}
	if c := p.Counters(); c.SACKForged == 0 || c.WindowsClamped == 0 || c.UDPTampered == 0 {
		t.Errorf("the middlebox did nothing: %+v", c)
	}
}

func TestMiddleboxConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"the field device", Config{ForgeSACK: &ForgedSACK{Offset: 65536, Length: 16384}, WindowClamp: 16384, TamperUDPPct: 1}, ""},
		{"largest clamp", Config{WindowClamp: MaxWindowClamp}, ""},
		{"zero offset", Config{ForgeSACK: &ForgedSACK{Length: 1}}, "ForgeSACK"},
		{"zero length", Config{ForgeSACK: &ForgedSACK{Offset: 1}}, "ForgeSACK"},
		{"block past half the sequence space", Config{ForgeSACK: &ForgedSACK{Offset: 1 << 30, Length: 1 << 30}}, "2^31"},
		{"negative clamp", Config{WindowClamp: -1}, "WindowClamp"},
		{"clamp above any window", Config{WindowClamp: MaxWindowClamp + 1}, "WindowClamp"},
		{"tamper above 100", Config{TamperUDPPct: 101}, "TamperUDPPct"},
	} {
		err := tc.cfg.Validate()
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%s: rejected: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v, want ErrInvalidConfig mentioning %q", tc.name, err, tc.wantErr)
		}
	}
	// The pipe keeps its own copy of the forged block.
	f := &ForgedSACK{Offset: 10, Length: 10}
	p := mustPipe(t, Config{ForgeSACK: f})
	f.Offset = 0
	if p.cfg.ForgeSACK.Offset != 10 {
		t.Error("the pipe shares the caller's ForgedSACK")
	}
	// The link helper gets its Config as JSON.
	in := Config{ForgeSACK: &ForgedSACK{Offset: 65536, Length: 16384}, WindowClamp: 16384, TamperUDPPct: 1}
	js, _ := json.Marshal(in)
	var back Config
	if err := json.Unmarshal(js, &back); err != nil || back.ForgeSACK == nil || *back.ForgeSACK != *in.ForgeSACK ||
		back.WindowClamp != in.WindowClamp || back.TamperUDPPct != in.TamperUDPPct {
		t.Errorf("JSON round trip %s gave %+v (%v)", js, back, err)
	}
}

// fuzzSeeds are FuzzRewrite's seeds besides testdata/fuzz/FuzzRewrite.
func fuzzSeeds(t testing.TB) [][]byte {
	return [][]byte{
		build(t, seg{ack: 1, opts: []layers.TCPOption{nop(), nop(), tsOpt()}}),
		build(t, seg{v6: true, ack: 1}),
		build(t, seg{ack: 1, opts: []layers.TCPOption{nop(), nop(), tsOpt(), nop(), nop(), sackOpt(2, 3, 4, 5, 6, 7)}}),
		build(t, seg{syn: true, noACK: true, window: 64240, opts: []layers.TCPOption{wsOpt(7)}}),
		build(t, seg{ack: 1, window: 9000, payload: 10}),
		udp(t, false, 33),
		udp(t, true, 8),
	}
}

// FuzzRewrite runs the three rewrites over arbitrary bytes: none may panic or
// write past the packet, and a rewrite keeps IP lengths and right checksums.
func FuzzRewrite(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var st scaleTable
		// A SYN's window scale reaches the clamp of later segments: run
		// the input twice through the same table.
		for range 2 {
			wasOK := len(data) >= 20 && (data[0]>>4 == 4 || data[0]>>4 == 6) && validLengths(data) && checksumOK(data)
			buf := append(make([]byte, 0, len(data)+maxSACKGrowth), data...)
			// Guard bytes after the packet must survive.
			guard := buf[len(buf) : len(buf)+maxSACKGrowth]
			for i := range guard {
				guard[i] = 0xee
			}
			out, forged := forgeSACK(buf, ForgedSACK{Offset: 1 << 16, Length: 1 << 14})
			if !forged && !bytes.Equal(out, data) {
				t.Fatal("forgeSACK changed a packet it reports as left alone")
			}
			if forged {
				if len(out) > len(data)+maxSACKGrowth || len(out) < len(data) || !validLengths(out) {
					t.Fatalf("forgeSACK: %d bytes from %d, lengths consistent %v", len(out), len(data), validLengths(out))
				}
				if !checksumOK(out) {
					t.Fatal("forgeSACK rewrote a packet into a bad checksum")
				}
			}
			for _, g := range buf[len(out):cap(buf)] {
				if g != 0xee {
					t.Fatal("forgeSACK wrote past the packet")
				}
			}
			clamped := clampWindow(out, 16384, &st)
			tampered := tamperUDP(out)
			if (clamped || tampered) && wasOK && !checksumOK(out) {
				t.Fatalf("clamp %v tamper %v broke a good checksum", clamped, tampered)
			}
		}
	})
}

// validLengths reports whether pkt's IP length fields match its size.
func validLengths(pkt []byte) bool {
	switch {
	case len(pkt) >= 20 && pkt[0]>>4 == 4:
		ihl := int(pkt[0]&0xf) * 4
		return ihl >= 20 && ihl <= len(pkt) && int(binary.BigEndian.Uint16(pkt[2:4])) == len(pkt)
	case len(pkt) >= 40 && pkt[0]>>4 == 6:
		return int(binary.BigEndian.Uint16(pkt[4:6]))+40 == len(pkt)
	}
	return false
}
