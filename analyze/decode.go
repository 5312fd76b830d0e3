package analyze

import (
	"encoding/binary"
	"net/netip"
)

// Link types the decoder understands. Values are the LINKTYPE_ numbers of
// the pcap and pcapng file formats (tcpdump.org/linktypes.html).
const (
	linkNull     = 0   // BSD loopback: 4-byte address family, host order
	linkEthernet = 1   // Ethernet II, optionally 802.1Q / 802.1ad tagged
	linkRawOld   = 12  // DLT_RAW on some BSDs
	linkRawOld2  = 14  // DLT_RAW on OpenBSD
	linkRaw      = 101 // raw IPv4 or IPv6 (TUN captures)
	linkLoop     = 108 // OpenBSD loopback: 4-byte address family, network order
	linkSLL      = 113 // Linux cooked capture v1
	linkIPv4     = 228 // raw IPv4 only
	linkIPv6     = 229 // raw IPv6 only
	linkSLL2     = 276 // Linux cooked capture v2
)

// TCP header flags as they appear in byte 13 of the header.
const (
	flagFIN = 0x01
	flagSYN = 0x02
	flagRST = 0x04
	flagPSH = 0x08
	flagACK = 0x10
)

// maxSACK is the number of SACK blocks a TCP option can carry (40 bytes of
// options: 2 + 4×8 = 34).
const maxSACK = 4

// decodeResult says what the decoder made of a frame. Everything except
// decOK is counted in Stats and the frame is skipped.
type decodeResult uint8

const (
	decOK              decodeResult = iota
	decNotIP                        // link layer carries something other than IP
	decNotTCP                       // IP carries something other than TCP
	decFragment                     // an IP fragment (not the first, or first of a split TCP header)
	decTruncated                    // the frame ends inside a header
	decMalformed                    // header fields contradict each other
	decUnsupportedLink              // link type we cannot decode
)

// segment is one decoded TCP segment. It holds no references into the frame
// buffer, so the buffer may be reused as soon as decode returns.
type segment struct {
	src, dst   netip.AddrPort
	seq, ack   uint32
	flags      uint8
	window     uint16
	payloadLen int // TCP payload length per the IP header (not what was captured)

	hasMSS    bool
	mss       uint16
	hasWScale bool
	wscale    uint8
	sackPerm  bool
	hasTS     bool
	tsVal     uint32
	tsEcr     uint32
	nSACK     int
	sack      [maxSACK][2]uint32 // left, right edges as on the wire
	badOpts   bool               // option list was malformed (length runs past the header, …)
}

// decode parses one captured frame of the given link type into seg. It never
// allocates and never panics, whatever the bytes.
func decode(link uint32, b []byte, seg *segment) decodeResult {
	switch link {
	case linkEthernet:
		if len(b) < 14 {
			return decTruncated
		}
		et := binary.BigEndian.Uint16(b[12:14])
		b = b[14:]
		for i := 0; i < 2 && (et == 0x8100 || et == 0x88a8 || et == 0x9100); i++ {
			if len(b) < 4 {
				return decTruncated
			}
			et = binary.BigEndian.Uint16(b[2:4])
			b = b[4:]
		}
		return decodeEtherType(et, b, seg)
	case linkRaw, linkRawOld, linkRawOld2:
		return decodeIP(b, seg)
	case linkIPv4, linkIPv6:
		return decodeIP(b, seg)
	case linkNull, linkLoop:
		if len(b) < 4 {
			return decTruncated
		}
		return decodeIP(b[4:], seg)
	case linkSLL:
		if len(b) < 16 {
			return decTruncated
		}
		return decodeEtherType(binary.BigEndian.Uint16(b[14:16]), b[16:], seg)
	case linkSLL2:
		if len(b) < 20 {
			return decTruncated
		}
		return decodeEtherType(binary.BigEndian.Uint16(b[0:2]), b[20:], seg)
	}
	return decUnsupportedLink
}

func decodeEtherType(et uint16, b []byte, seg *segment) decodeResult {
	switch et {
	case 0x0800, 0x86dd:
		return decodeIP(b, seg)
	}
	return decNotIP
}

// decodeIP dispatches on the IP version nibble.
func decodeIP(b []byte, seg *segment) decodeResult {
	if len(b) < 1 {
		return decTruncated
	}
	switch b[0] >> 4 {
	case 4:
		return decodeIPv4(b, seg)
	case 6:
		return decodeIPv6(b, seg)
	}
	return decNotIP
}

func decodeIPv4(b []byte, seg *segment) decodeResult {
	if len(b) < 20 {
		return decTruncated
	}
	ihl := int(b[0]&0x0f) * 4
	if ihl < 20 {
		return decMalformed
	}
	if len(b) < ihl {
		return decTruncated
	}
	if b[9] != 6 {
		return decNotTCP
	}
	frag := binary.BigEndian.Uint16(b[6:8])
	if frag&0x1fff != 0 || frag&0x2000 != 0 {
		return decFragment
	}
	total := int(binary.BigEndian.Uint16(b[2:4]))
	if total == 0 { // TSO/GSO captures leave it zero: use what was captured
		total = len(b)
	}
	if total < ihl {
		return decMalformed
	}
	src := netip.AddrFrom4([4]byte(b[12:16]))
	dst := netip.AddrFrom4([4]byte(b[16:20]))
	return decodeTCP(b[ihl:], total-ihl, src, dst, seg)
}

func decodeIPv6(b []byte, seg *segment) decodeResult {
	if len(b) < 40 {
		return decTruncated
	}
	plen := int(binary.BigEndian.Uint16(b[4:6]))
	if plen == 0 { // jumbogram or TSO: use what was captured
		plen = len(b) - 40
	}
	src := netip.AddrFrom16([16]byte(b[8:24]))
	dst := netip.AddrFrom16([16]byte(b[24:40]))
	next := b[6]
	b = b[40:]
	// Walk the extension headers that may precede TCP (at most a few).
	for i := 0; i < 8; i++ {
		switch next {
		case 6:
			return decodeTCP(b, plen, src, dst, seg)
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if len(b) < 8 {
				return decTruncated
			}
			n := (int(b[1]) + 1) * 8
			if len(b) < n || plen < n {
				return decTruncated
			}
			next, b, plen = b[0], b[n:], plen-n
		case 44: // fragment
			if len(b) < 8 {
				return decTruncated
			}
			off := binary.BigEndian.Uint16(b[2:4])
			if off&0xfff9 != 0 { // offset ≠ 0 or more fragments follow
				return decFragment
			}
			if plen < 8 {
				return decMalformed
			}
			next, b, plen = b[0], b[8:], plen-8
		default:
			return decNotTCP
		}
	}
	return decMalformed
}

// decodeTCP parses the TCP header in b. ipPayload is the TCP segment length
// according to the IP header; the capture may hold less of it (snap length).
func decodeTCP(b []byte, ipPayload int, src, dst netip.Addr, seg *segment) decodeResult {
	if len(b) < 20 {
		return decTruncated
	}
	off := int(b[12]>>4) * 4
	if off < 20 || off > ipPayload {
		return decMalformed
	}
	if len(b) < off {
		return decTruncated
	}
	*seg = segment{
		src:        netip.AddrPortFrom(src, binary.BigEndian.Uint16(b[0:2])),
		dst:        netip.AddrPortFrom(dst, binary.BigEndian.Uint16(b[2:4])),
		seq:        binary.BigEndian.Uint32(b[4:8]),
		ack:        binary.BigEndian.Uint32(b[8:12]),
		flags:      b[13],
		window:     binary.BigEndian.Uint16(b[14:16]),
		payloadLen: ipPayload - off,
	}
	parseOptions(b[20:off], seg)
	return decOK
}

// parseOptions fills the option fields of seg from the TCP option bytes.
// A malformed list sets seg.badOpts and keeps what was parsed before it.
func parseOptions(o []byte, seg *segment) {
	for len(o) > 0 {
		kind := o[0]
		if kind == 0 { // end of option list
			return
		}
		if kind == 1 { // no-op
			o = o[1:]
			continue
		}
		if len(o) < 2 || int(o[1]) < 2 || int(o[1]) > len(o) {
			seg.badOpts = true
			return
		}
		n := int(o[1])
		v := o[2:n]
		switch kind {
		case 2:
			if len(v) == 2 {
				seg.hasMSS, seg.mss = true, binary.BigEndian.Uint16(v)
			} else {
				seg.badOpts = true
			}
		case 3:
			if len(v) == 1 {
				seg.hasWScale, seg.wscale = true, v[0]
			} else {
				seg.badOpts = true
			}
		case 4:
			seg.sackPerm = true
		case 5:
			if len(v)%8 != 0 || len(v) == 0 {
				seg.badOpts = true
			}
			for i := 0; i+8 <= len(v) && seg.nSACK < maxSACK; i += 8 {
				seg.sack[seg.nSACK] = [2]uint32{binary.BigEndian.Uint32(v[i:]), binary.BigEndian.Uint32(v[i+4:])}
				seg.nSACK++
			}
		case 8:
			if len(v) == 8 {
				seg.hasTS = true
				seg.tsVal = binary.BigEndian.Uint32(v[0:4])
				seg.tsEcr = binary.BigEndian.Uint32(v[4:8])
			} else {
				seg.badOpts = true
			}
		}
		o = o[n:]
	}
}
