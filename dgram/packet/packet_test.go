package packet_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/wanopt/wanopt/dgram/internal/pkttest"
	. "github.com/wanopt/wanopt/dgram/packet"
)

func TestBuildParseUDP(t *testing.T) {
	for _, c := range []struct{ src, dst string }{
		{"198.18.2.2:53", "198.18.1.2:40000"},
		{"[2001:db8::2]:443", "[2001:db8:1::2]:50000"},
	} {
		src, dst := netip.MustParseAddrPort(c.src), netip.MustParseAddrPort(c.dst)
		payload := []byte("a DNS answer, say, of odd length")
		hl := HeaderLen(src.Addr())
		pkt := append(make([]byte, hl), payload...)
		if err := PutUDP(pkt, src, dst); err != nil {
			t.Fatal(err)
		}
		p, err := Parse(pkt)
		if err != nil {
			t.Fatalf("%v: parse what PutUDP built: %v", c, err)
		}
		if p.SrcAddrPort() != src || p.DstAddrPort() != dst || !p.IsUDP() || !bytes.Equal(p.Payload, payload) || p.Len != len(pkt) {
			t.Fatalf("%v: parsed %+v", c, p)
		}
		if src.Addr().Is4() {
			if s := pkttest.OnesSum(pkt[:20]); s != 0xffff {
				t.Errorf("IPv4 header sums to %#x", s)
			}
			if pkt[0] != 0x45 || binary.BigEndian.Uint16(pkt[2:]) != uint16(len(pkt)) || pkt[9] != ProtoUDP {
				t.Errorf("IPv4 header % x", pkt[:20])
			}
		} else if pkt[0]>>4 != 6 || int(binary.BigEndian.Uint16(pkt[4:])) != len(pkt)-40 || pkt[6] != ProtoUDP {
			t.Errorf("IPv6 header % x", pkt[:40])
		}
		if s := pkttest.OnesSum(pkttest.Pseudo(src.Addr(), dst.Addr(), ProtoUDP, len(p.L4)), p.L4); s != 0xffff {
			t.Errorf("%v: UDP checksum: segment sums to %#x", c, s)
		}
	}
}

func TestBuildParseEcho(t *testing.T) {
	for _, c := range []struct {
		src, dst string
		typ      uint8
	}{
		{"198.18.2.2", "198.18.1.2", ICMPEchoReply},
		{"198.18.1.2", "198.18.2.2", ICMPEchoRequest},
		{"2001:db8::2", "2001:db8:1::2", ICMPv6EchoReply},
		{"2001:db8:1::2", "2001:db8::2", ICMPv6EchoRequest},
	} {
		src, dst := netip.MustParseAddr(c.src), netip.MustParseAddr(c.dst)
		data := bytes.Repeat([]byte{0xa5, 0x01, 0x02}, 19)
		pkt := append(make([]byte, HeaderLen(src)), data...)
		if err := PutEcho(pkt, src, dst, c.typ, 0x1234, 7); err != nil {
			t.Fatal(err)
		}
		p, err := Parse(pkt)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if p.Src != src || p.Dst != dst || p.Type != c.typ || p.ID != 0x1234 || p.Seq != 7 || !bytes.Equal(p.Payload, data) {
			t.Fatalf("%v: parsed %+v", c, p)
		}
		req := c.typ == ICMPEchoRequest || c.typ == ICMPv6EchoRequest
		if p.IsEchoRequest() != req || p.IsEchoReply() == req {
			t.Errorf("%v: request %v, reply %v", c, p.IsEchoRequest(), p.IsEchoReply())
		}
		var s uint16
		if src.Is4() {
			s = pkttest.OnesSum(p.L4)
		} else {
			s = pkttest.OnesSum(pkttest.Pseudo(src, dst, ProtoICMPv6, len(p.L4)), p.L4)
		}
		if s != 0xffff {
			t.Errorf("%v: ICMP checksum: message sums to %#x", c, s)
		}
	}
}

func TestPutErrors(t *testing.T) {
	v4, v6 := netip.MustParseAddrPort("198.18.2.2:53"), netip.MustParseAddrPort("[2001:db8::1]:53")
	if err := PutUDP(make([]byte, 40), v4, v6); err == nil {
		t.Error("PutUDP across families succeeded")
	}
	if err := PutUDP(make([]byte, 27), v4, v4); err == nil {
		t.Error("PutUDP into 27 bytes succeeded")
	}
	if err := PutUDP(make([]byte, 70000), v4, v4); err == nil {
		t.Error("PutUDP of a 70,000-byte IPv4 packet succeeded")
	}
}

// udp4 returns a valid IPv4 UDP packet to modify.
func udp4(t testing.TB) []byte {
	pkt := append(make([]byte, 28), "hello"...)
	if err := PutUDP(pkt, netip.MustParseAddrPort("198.18.1.2:1000"), netip.MustParseAddrPort("198.18.2.2:53")); err != nil {
		t.Fatal(err)
	}
	return pkt
}

func TestParseRefuses(t *testing.T) {
	v6 := append(make([]byte, 48), "x"...)
	PutUDP(v6, netip.MustParseAddrPort("[2001:db8::1]:1"), netip.MustParseAddrPort("[2001:db8::2]:2"))
	cases := []struct {
		name string
		mod  func([]byte) []byte
		want error
	}{
		{"empty", func(b []byte) []byte { return nil }, ErrMalformed},
		{"truncated header", func(b []byte) []byte { return b[:19] }, ErrMalformed},
		{"truncated packet", func(b []byte) []byte { return b[:len(b)-1] }, ErrMalformed},
		{"IHL 4", func(b []byte) []byte { b[0] = 0x44; pkttest.FixIPv4Checksum(b); return b }, ErrMalformed},
		{"bad header checksum", func(b []byte) []byte { b[10] ^= 1; return b }, ErrMalformed},
		{"version 5", func(b []byte) []byte { b[0] = 0x55; return b }, ErrMalformed},
		{"fragment", func(b []byte) []byte { b[6] = 0x20; pkttest.FixIPv4Checksum(b); return b }, ErrUnsupported},
		{"later fragment", func(b []byte) []byte { b[6], b[7] = 0, 8; pkttest.FixIPv4Checksum(b); return b }, ErrUnsupported},
		{"GRE", func(b []byte) []byte { b[9] = 47; pkttest.FixIPv4Checksum(b); return b }, ErrUnsupported},
		{"UDP length too long", func(b []byte) []byte { b[25] = 200; return b }, ErrMalformed},
		{"UDP length under 8", func(b []byte) []byte { b[24], b[25] = 0, 7; return b }, ErrMalformed},
		{"ICMP unreachable", func(b []byte) []byte { b[9] = ProtoICMP; pkttest.FixIPv4Checksum(b); b[20] = 3; return b }, ErrUnsupported},
		{"echo with code 1", func(b []byte) []byte { b[9] = ProtoICMP; pkttest.FixIPv4Checksum(b); b[20], b[21] = 8, 1; return b }, ErrMalformed},
		{"IPv6 extension header", func([]byte) []byte { b := bytes.Clone(v6); b[6] = 0; return b }, ErrUnsupported},
		{"IPv6 short payload", func([]byte) []byte { b := bytes.Clone(v6); b[5] = 200; return b }, ErrMalformed},
		{"IPv6 no transport", func([]byte) []byte { b := bytes.Clone(v6[:44]); b[4], b[5] = 0, 4; return b }, ErrMalformed},
	}
	for _, c := range cases {
		_, err := Parse(c.mod(udp4(t)))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// Bytes after the IP packet (a TUN's padding) are ignored.
	p, err := Parse(append(udp4(t), 0, 0, 0))
	if err != nil || p.Len != 33 || string(p.Payload) != "hello" {
		t.Errorf("packet with trailing bytes: %+v, %v", p, err)
	}
}

func TestAppendTooBigErrors(t *testing.T) {
	pkt := udp4(t)
	p, err := Parse(pkt)
	if err != nil {
		t.Fatal(err)
	}
	for _, mtu := range []int{0, 67, 70000} {
		if b, err := AppendTooBig(nil, pkt, &p, mtu); err == nil || len(b) != 0 {
			t.Errorf("MTU %d: %d bytes, %v; want an error", mtu, len(b), err)
		}
	}
	q := p
	q.Len = len(pkt) + 1
	if _, err := AppendTooBig(nil, pkt, &q, 1000); err == nil {
		t.Error("a length past the bytes: no error")
	}
	// Appends after what b holds, without allocating when b has room.
	b := make([]byte, 3, 2048)
	allocs := testing.AllocsPerRun(100, func() { b, _ = AppendTooBig(b[:3], pkt, &p, 1000) })
	if allocs != 0 || len(b) != 3+28+len(pkt) {
		t.Errorf("%v allocations, %d bytes", allocs, len(b))
	}
}
