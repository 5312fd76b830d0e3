package lab

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// gsoFrame builds a UDP GSO frame as the kernel hands it to an offloading
// TUN: one IP and UDP header covering the whole payload, partial checksum.
func gsoFrame(v6 bool, payload []byte, gsoSize int) []byte {
	l4 := 20
	if v6 {
		l4 = 40
	}
	f := make([]byte, vnetHdrLen+l4+8+len(payload))
	f[0], f[1] = vnetFNeedsCsum, vnetGSOUDPL4
	binary.LittleEndian.PutUint16(f[2:], uint16(l4+8))
	binary.LittleEndian.PutUint16(f[4:], uint16(gsoSize))
	binary.LittleEndian.PutUint16(f[6:], uint16(l4))
	binary.LittleEndian.PutUint16(f[8:], 6)
	p := f[vnetHdrLen:]
	if v6 {
		p[0] = 0x60
		binary.BigEndian.PutUint16(p[4:], uint16(8+len(payload)))
		p[6], p[7] = 17, 64
		copy(p[8:], []byte{0x20, 0x01, 0, 2, 15: 1})
		copy(p[24:], []byte{0x20, 0x01, 0, 2, 15: 2})
	} else {
		p[0] = 0x45
		binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
		binary.BigEndian.PutUint16(p[4:], 0xfffe) // wraps after two datagrams
		p[6] = 0x40                               // DF
		p[8], p[9] = 64, 17
		copy(p[12:], []byte{198, 18, 0, 2, 198, 18, 0, 1})
	}
	u := p[l4:]
	binary.BigEndian.PutUint16(u[0:], 51820)
	binary.BigEndian.PutUint16(u[2:], 51821)
	binary.BigEndian.PutUint16(u[4:], uint16(8+len(payload)))
	binary.BigEndian.PutUint16(u[6:], 0x1234) // a partial sum; the splitter must not trust it
	copy(u[8:], payload)
	return f
}

// pseudoSum is the UDP or TCP pseudo-header sum of packet p, built byte by
// byte as RFC 768, RFC 9293 and RFC 8200 describe.
func pseudoSum(p []byte, l4 int) uint16 {
	var ph []byte
	l4Len := len(p) - l4
	if p[0]>>4 == 4 {
		ph = append(ph, p[12:20]...)
		ph = append(ph, 0, p[9], byte(l4Len>>8), byte(l4Len))
	} else {
		ph = append(ph, p[8:40]...)
		ph = append(ph, 0, 0, byte(l4Len>>8), byte(l4Len), 0, 0, 0, p[6])
	}
	return checksum.Checksum(ph, 0)
}

func TestGSOSplitterUDP(t *testing.T) {
	payload := make([]byte, 2500)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	for _, v6 := range []bool{false, true} {
		l4 := 20
		if v6 {
			l4 = 40
		}
		var s gsoSplitter
		if err := s.load(gsoFrame(v6, payload, 1000)); err != nil {
			t.Fatalf("v6=%v: load: %v", v6, err)
		}
		var got []byte
		var sizes []int
		dst := make([]byte, 1<<16)
		for i := 0; ; i++ {
			n, ok := s.next(dst)
			if !ok {
				break
			}
			p := dst[:n]
			sizes = append(sizes, n-l4-8)
			if v6 {
				if pl := int(binary.BigEndian.Uint16(p[4:])); pl != n-40 {
					t.Errorf("v6 datagram %d: payload length %d, want %d", i, pl, n-40)
				}
			} else {
				if tl := int(binary.BigEndian.Uint16(p[2:])); tl != n {
					t.Errorf("v4 datagram %d: total length %d, want %d", i, tl, n)
				}
				if id, want := binary.BigEndian.Uint16(p[4:]), uint16(0xfffe+i); id != want {
					t.Errorf("v4 datagram %d: ID %#x, want %#x", i, id, want)
				}
				if c := checksum.Checksum(p[:20], 0); c != 0xffff {
					t.Errorf("v4 datagram %d: header checksum does not verify (sum %#x)", i, c)
				}
			}
			u := p[l4:]
			if ul := int(binary.BigEndian.Uint16(u[4:])); ul != len(u) {
				t.Errorf("v6=%v datagram %d: UDP length %d, want %d", v6, i, ul, len(u))
			}
			if c := checksum.Checksum(u, pseudoSum(p, l4)); c != 0xffff {
				t.Errorf("v6=%v datagram %d: UDP checksum does not verify (sum %#x)", v6, i, c)
			}
			got = append(got, u[8:]...)
		}
		if want := []int{1000, 1000, 500}; len(sizes) != 3 || sizes[0] != want[0] || sizes[1] != want[1] || sizes[2] != want[2] {
			t.Errorf("v6=%v: payload sizes %v, want %v", v6, sizes, want)
		}
		if !bytes.Equal(got, payload) {
			t.Errorf("v6=%v: the datagrams' payloads do not add up to the frame's", v6)
		}
	}
}

// A frame without GSO passes as one packet; a partial checksum is completed.
func TestGSOSplitterSingle(t *testing.T) {
	// A TCP segment with a partial checksum, as a TUN with TUN_F_CSUM
	// hands it over: the field holds the pseudo-header sum.
	p := make([]byte, 20+20+5)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	p[8], p[9] = 64, 6
	copy(p[12:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
	binary.BigEndian.PutUint16(p[10:], ^checksum.Checksum(p[:20], 0))
	tcp := p[20:]
	tcp[12] = 5 << 4
	copy(tcp[20:], "hello")
	ph := append(append([]byte{}, p[12:20]...), 0, 6, 0, byte(len(tcp)))
	binary.BigEndian.PutUint16(tcp[16:], checksum.Checksum(ph, 0))
	frame := make([]byte, vnetHdrLen, vnetHdrLen+len(p))
	frame[0] = vnetFNeedsCsum
	binary.LittleEndian.PutUint16(frame[6:], 20)
	binary.LittleEndian.PutUint16(frame[8:], 16)
	frame = append(frame, p...)

	var s gsoSplitter
	if err := s.load(frame); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 100)
	n, ok := s.next(dst)
	if !ok || n != len(p) {
		t.Fatalf("next = %d, %v; want %d, true", n, ok, len(p))
	}
	if c := checksum.Checksum(dst[20:n], checksum.Checksum(ph, 0)); c != 0xffff {
		t.Errorf("TCP checksum not completed (sum %#x)", c)
	}
	if _, ok := s.next(dst); ok {
		t.Error("a second packet from a frame without GSO")
	}
}

func TestGSOSplitterRefuses(t *testing.T) {
	good := gsoFrame(false, make([]byte, 3000), 1400)
	tcpGSO := append([]byte{}, good...)
	tcpGSO[1] = 1 // VIRTIO_NET_HDR_GSO_TCPV4
	fragment := append([]byte{}, good...)
	fragment[vnetHdrLen+6] = 0x20 // MF
	notUDP := append([]byte{}, good...)
	notUDP[vnetHdrLen+9] = 6
	zeroSize := append([]byte{}, good...)
	zeroSize[4], zeroSize[5] = 0, 0
	for _, tc := range []struct {
		name  string
		frame []byte
		want  error
	}{
		{"short", good[:5], errVnetShort},
		{"TCP GSO", tcpGSO, errVnetUnsupported},
		{"fragment", fragment, errVnetMalformed},
		{"not UDP", notUDP, errVnetMalformed},
		{"gso_size 0", zeroSize, errVnetMalformed},
		{"headers cut", good[:vnetHdrLen+24], errVnetMalformed},
	} {
		var s gsoSplitter
		if err := s.load(tc.frame); !errors.Is(err, tc.want) {
			t.Errorf("%s: load = %v, want %v", tc.name, err, tc.want)
		}
		if _, ok := s.next(make([]byte, 1<<16)); ok {
			t.Errorf("%s: a refused frame yielded a packet", tc.name)
		}
	}
}

// A split allocates nothing: the link helper splits every frame.
func TestGSOSplitterAllocs(t *testing.T) {
	frame := gsoFrame(false, make([]byte, 64*1400), 1400)
	orig := append([]byte{}, frame...)
	dst := make([]byte, 1<<16)
	var s gsoSplitter
	allocs := testing.AllocsPerRun(100, func() {
		copy(frame, orig)
		if s.load(frame) != nil {
			t.Fatal("load failed")
		}
		for {
			if _, ok := s.next(dst); !ok {
				break
			}
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per frame, want 0", allocs)
	}
}

func BenchmarkGSOSplitter(b *testing.B) {
	frame := gsoFrame(false, make([]byte, 44*1400), 1400)
	orig := append([]byte{}, frame...)
	dst := make([]byte, 1<<16)
	var s gsoSplitter
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		copy(frame, orig)
		_ = s.load(frame)
		for {
			if _, ok := s.next(dst); !ok {
				break
			}
		}
	}
}

// The frames come from the local kernel, but the splitter must still never
// panic or yield more than the frame held, whatever the bytes.
func FuzzGSOSplitter(f *testing.F) {
	f.Add(gsoFrame(false, make([]byte, 3000), 1400))
	f.Add(gsoFrame(true, make([]byte, 100), 1400))
	f.Add(gsoFrame(true, nil, 1400))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 40, 0, 6, 0, 0x45})
	f.Fuzz(func(t *testing.T, frame []byte) {
		var s gsoSplitter
		if s.load(frame) != nil {
			return
		}
		dst := make([]byte, 1<<16)
		for i := 0; ; i++ {
			n, ok := s.next(dst)
			if !ok {
				break
			}
			if n < 0 || n > 1<<16 {
				t.Fatalf("packet of %d bytes", n)
			}
			if i > len(frame) {
				t.Fatalf("more packets (%d) than the frame has bytes", i)
			}
		}
	})
}

// l4Packet builds an IP packet (v4 or v6) carrying a TCP or UDP segment
// with payload and a correct checksum.
func l4Packet(v6 bool, proto byte, payload []byte) []byte {
	l4, hl := 20, 8
	if v6 {
		l4 = 40
	}
	if proto == 6 {
		hl = 20
	}
	p := make([]byte, l4+hl+len(payload))
	if v6 {
		p[0] = 0x60
		binary.BigEndian.PutUint16(p[4:], uint16(hl+len(payload)))
		p[6], p[7] = proto, 64
		copy(p[8:], []byte{0x20, 0x01, 0, 2, 15: 1})
		copy(p[24:], []byte{0x20, 0x01, 0, 2, 15: 2})
	} else {
		p[0] = 0x45
		binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
		p[8], p[9] = 64, proto
		copy(p[12:], []byte{198, 18, 0, 2, 198, 18, 0, 1})
		binary.BigEndian.PutUint16(p[10:], ^checksum.Checksum(p[:20], 0))
	}
	seg := p[l4:]
	binary.BigEndian.PutUint16(seg[0:], 4500)
	binary.BigEndian.PutUint16(seg[2:], 4501)
	csumOff := 6
	if proto == 6 {
		seg[12] = 5 << 4
		csumOff = 16
	} else {
		binary.BigEndian.PutUint16(seg[4:], uint16(len(seg)))
	}
	copy(seg[hl:], payload)
	sum := ^checksum.Checksum(seg, pseudoSum(p, l4))
	if sum == 0 && proto == 17 {
		sum = 0xffff
	}
	binary.BigEndian.PutUint16(seg[csumOff:], sum)
	return p
}

// TestMarkChecksumOffloaded checks the header a written packet gets, and that
// completing its partial checksum gives back the packet's own checksum.
func TestMarkChecksumOffloaded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		v6    bool
		proto byte
		size  int
	}{
		{"udp4", false, 17, 1350}, {"tcp4", false, 6, 1448}, {"udp6", true, 17, 1330}, {"tcp6", true, 6, 0}, {"udp4 odd", false, 17, 77},
	} {
		payload := make([]byte, tc.size)
		for i := range payload {
			payload[i] = byte(i*7 + 3)
		}
		orig := l4Packet(tc.v6, tc.proto, payload)
		p := bytes.Clone(orig)
		hdr := bytes.Repeat([]byte{0xee}, vnetHdrLen)
		markChecksumOffloaded(hdr, p)
		start, off := int(binary.LittleEndian.Uint16(hdr[6:])), int(binary.LittleEndian.Uint16(hdr[8:]))
		if hdr[0] != vnetFNeedsCsum || hdr[1] != vnetGSONone || start != map[bool]int{false: 20, true: 40}[tc.v6] || off != map[byte]int{17: 6, 6: 16}[tc.proto] {
			t.Errorf("%s: header % x", tc.name, hdr)
			continue
		}
		if !bytes.Equal(p[:start+off], orig[:start+off]) || !bytes.Equal(p[start+off+2:], orig[start+off+2:]) {
			t.Errorf("%s: bytes other than the checksum field changed", tc.name)
		}
		done := bytes.Clone(p)
		sum := ^checksum.Checksum(done[start:], 0)
		if sum == 0 && tc.proto == 17 {
			sum = 0xffff
		}
		binary.BigEndian.PutUint16(done[start+off:], sum)
		if !bytes.Equal(done, orig) {
			t.Errorf("%s: completed checksum %#04x, want %#04x", tc.name, sum, binary.BigEndian.Uint16(orig[start+off:]))
		}
	}
	// Left to the receiving kernel's own check: an empty header and the
	// packet as it was.
	frag := l4Packet(false, 17, make([]byte, 100))
	frag[6] = 0x20 // MF
	noSum := l4Packet(false, 17, make([]byte, 100))
	noSum[26], noSum[27] = 0, 0
	icmp := l4Packet(false, 1, make([]byte, 56))
	short := l4Packet(false, 6, make([]byte, 10))
	for name, p := range map[string][]byte{
		"fragment": frag, "udp4 without checksum": noSum, "icmp": icmp, "truncated": short[:30], "empty": nil, "v6 truncated": l4Packet(true, 17, nil)[:39],
	} {
		orig := bytes.Clone(p)
		hdr := bytes.Repeat([]byte{0xee}, vnetHdrLen)
		markChecksumOffloaded(hdr, p)
		if !bytes.Equal(hdr, make([]byte, vnetHdrLen)) || !bytes.Equal(p, orig) {
			t.Errorf("%s: header % x, packet changed %v", name, hdr, !bytes.Equal(p, orig))
		}
	}
}
