package analyze

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// v4Frame and v6Frame build a data segment with SACK and timestamps in the
// given link type through the test capture writer.
func testFrame(t *testing.T, link uint32, v6 bool) []byte {
	t.Helper()
	cs := capSpec{link: link, v6: v6, client: cli4, server: srv4}
	if v6 {
		cs.client, cs.server = cli6, srv6
	}
	fr, _, err := cs.frame(simPkt{fromCli: false, seq: 7, ack: 99, flags: flagACK, win: 1234, n: 100,
		sack: [][2]uint32{{200, 300}, {400, 500}}})
	if err != nil {
		t.Fatal(err)
	}
	return fr
}

func TestDecodeLinkTypes(t *testing.T) {
	for _, tc := range []struct {
		name string
		link uint32
		v6   bool
	}{
		{"ethernet-v4", linkEthernet, false},
		{"ethernet-v6", linkEthernet, true},
		{"raw-v4", linkRaw, false},
		{"raw-v6", linkRaw, true},
		{"ipv4", linkIPv4, false},
		{"ipv6", linkIPv6, true},
		{"sll-v4", linkSLL, false},
		{"sll2-v6", linkSLL2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := testFrame(t, tc.link, tc.v6)
			var seg segment
			if r := decode(tc.link, fr, &seg); r != decOK {
				t.Fatalf("decode = %d", r)
			}
			wantSrc := srv4
			if tc.v6 {
				wantSrc = srv6
			}
			if seg.src != wantSrc || seg.seq != 7 || seg.ack != 99 || seg.window != 1234 || seg.payloadLen != 100 {
				t.Errorf("got %+v", seg)
			}
			if seg.nSACK != 2 || seg.sack[1] != [2]uint32{400, 500} {
				t.Errorf("sack %v (%d)", seg.sack, seg.nSACK)
			}
			// Every truncation of the frame decodes to something without panicking.
			for i := range fr {
				decode(tc.link, fr[:i], &seg)
			}
		})
	}
}

func TestDecodeVLANAndLoopback(t *testing.T) {
	ip := testFrame(t, linkRaw, false)
	eth := make([]byte, 12, 64)
	eth = binary.BigEndian.AppendUint16(eth, 0x8100)
	eth = append(eth, 0, 5)
	eth = binary.BigEndian.AppendUint16(eth, 0x0800)
	eth = append(eth, ip...)
	var seg segment
	if r := decode(linkEthernet, eth, &seg); r != decOK || seg.payloadLen != 100 {
		t.Errorf("VLAN: %d %+v", r, seg)
	}
	null := append([]byte{2, 0, 0, 0}, ip...)
	if r := decode(linkNull, null, &seg); r != decOK {
		t.Errorf("null: %d", r)
	}
	if r := decode(9999, ip, &seg); r != decUnsupportedLink {
		t.Errorf("unknown link: %d", r)
	}
}

func TestDecodeRejects(t *testing.T) {
	ip := testFrame(t, linkRaw, false)
	var seg segment
	frag := append([]byte(nil), ip...)
	frag[6] = 0x20 // more fragments
	if r := decode(linkRaw, frag, &seg); r != decFragment {
		t.Errorf("fragment: %d", r)
	}
	udp := append([]byte(nil), ip...)
	udp[9] = 17
	if r := decode(linkRaw, udp, &seg); r != decNotTCP {
		t.Errorf("udp: %d", r)
	}
	bad := append([]byte(nil), ip...)
	bad[20+12] = 0x10 // TCP data offset 4 bytes
	if r := decode(linkRaw, bad, &seg); r != decMalformed {
		t.Errorf("bad offset: %d", r)
	}
	if r := decode(linkRaw, []byte{0x45}, &seg); r != decTruncated {
		t.Errorf("short: %d", r)
	}
	if r := decode(linkRaw, []byte{0x15, 0, 0}, &seg); r != decNotIP {
		t.Errorf("version 1: %d", r)
	}
}

func TestParseOptions(t *testing.T) {
	var seg segment
	// MSS, NOP, wscale, SACK-permitted, timestamps, then a bad length.
	o := []byte{2, 4, 5, 0xb4, 1, 3, 3, 7, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 5, 1}
	parseOptions(o, &seg)
	if !seg.hasMSS || seg.mss != 1460 || !seg.hasWScale || seg.wscale != 7 || !seg.sackPerm || !seg.hasTS || seg.tsVal != 1 || seg.tsEcr != 2 {
		t.Errorf("got %+v", seg)
	}
	if !seg.badOpts {
		t.Error("bad option length not flagged")
	}
}

func TestDecodeIPv6Extensions(t *testing.T) {
	ip := testFrame(t, linkRaw, true)
	// Insert an 8-byte hop-by-hop header between IPv6 and TCP.
	ext := []byte{6, 0, 1, 4, 0, 0, 0, 0}
	b := append(append(append([]byte(nil), ip[:40]...), ext...), ip[40:]...)
	b[6] = 0
	binary.BigEndian.PutUint16(b[4:6], binary.BigEndian.Uint16(ip[4:6])+8)
	var seg segment
	if r := decode(linkRaw, b, &seg); r != decOK || seg.payloadLen != 100 || seg.dst != netip.MustParseAddrPort("[2001:db8::1]:40000") {
		t.Errorf("hop-by-hop: %d %+v", r, seg)
	}
}

// ethernetTransfer simulates a 100 Mbit/s, 40 ms transfer of total bytes
// and returns its packets and their IPv4 Ethernet frames.
func ethernetTransfer(total int64) ([]simPkt, [][]byte) {
	pk := simulate(simParams{total: total, mss: 1448, rtt: 40 * ms1, rateBps: 100e6, rcvBuf: 1 << 20, wscale: 5, cwnd: 64 << 10})
	cs := capSpec{link: linkEthernet, client: cli4, server: srv4}
	frames := make([][]byte, 0, len(pk))
	for _, p := range pk {
		fr, _, _ := cs.frame(p)
		frames = append(frames, fr)
	}
	return pk, frames
}

// TestDecodeNoAlloc checks that the per-packet path allocates nothing in
// steady state.
func TestDecodeNoAlloc(t *testing.T) {
	pk, frames := ethernetTransfer(1 << 20)
	tr := newTracker(nil)
	var seg segment
	i := 0
	feed := func() {
		fr := frames[i%len(frames)]
		if decode(linkEthernet, fr, &seg) == decOK {
			tr.packet(&seg, pk[i%len(pk)].t, i+1)
		}
		i++
	}
	for range 2000 { // warm up: flow created, series grown
		feed()
	}
	if a := testing.AllocsPerRun(500, feed); a > 0.05 {
		t.Errorf("%.2f allocations per packet, want 0", a)
	}
}

func BenchmarkDecodeTrack(b *testing.B) {
	pk, frames := ethernetTransfer(4 << 20)
	tr := newTracker(nil)
	var seg segment
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if decode(linkEthernet, frames[i%len(frames)], &seg) == decOK {
			tr.packet(&seg, pk[i%len(pk)].t, i+1)
		}
	}
}
