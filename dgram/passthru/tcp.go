package passthru

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/wanopt/wanopt/dgram/packet"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// TCP flags this package reads.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10

	tcpHeaderLen = 20
	tcpOptMSS    = 2
)

// tcpPacket is a parsed IPv4 or IPv6 TCP packet; slices point into the
// parsed bytes.
type tcpPacket struct {
	src, dst netip.AddrPort
	flags    uint8
	l4       []byte // the TCP segment (header and payload)
	hdrLen   int    // the IP header's length
	len      int    // the IP packet's length
}

// parseTCP reads an IPv4 or IPv6 packet carrying TCP, with no fragment
// and no IPv6 extension header. It never panics, whatever b holds. The
// TCP checksum is not verified (the receiving end does).
func parseTCP(b []byte) (tcpPacket, error) {
	var p tcpPacket
	h, err := packet.ParseHeader(b)
	if err != nil {
		return p, err
	}
	if h.Proto != packet.ProtoTCP {
		return p, h.UnsupportedProto()
	}
	p.src, p.dst = netip.AddrPortFrom(h.Src, 0), netip.AddrPortFrom(h.Dst, 0)
	p.hdrLen, p.len = h.HdrLen, h.Len
	l4 := b[p.hdrLen:p.len]
	if len(l4) < tcpHeaderLen {
		return p, fmt.Errorf("%w: %d bytes of TCP header", packet.ErrMalformed, len(l4))
	}
	if off := int(l4[12]>>4) * 4; off < tcpHeaderLen || off > len(l4) {
		return p, fmt.Errorf("%w: TCP data offset %d in %d bytes", packet.ErrMalformed, off, len(l4))
	}
	p.src = netip.AddrPortFrom(p.src.Addr(), binary.BigEndian.Uint16(l4[0:]))
	p.dst = netip.AddrPortFrom(p.dst.Addr(), binary.BigEndian.Uint16(l4[2:]))
	p.flags = l4[13]
	p.l4 = l4
	return p, nil
}

// isSYN reports a connection request (SYN without ACK).
func (p *tcpPacket) isSYN() bool { return p.flags&(tcpSYN|tcpACK) == tcpSYN }

// clampMSS lowers the MSS option of a SYN or SYN-ACK segment (a TCP
// header and payload, as parseTCP checked it) to mss, as a router does
// for a tunnel (iptables TCPMSS --clamp-mss-to-pmtu), and updates the
// checksum; other options stay as they are. It reports whether it
// changed the segment. Malformed options end the walk untouched.
func clampMSS(seg []byte, mss uint16) bool {
	if len(seg) < tcpHeaderLen || seg[13]&tcpSYN == 0 {
		return false
	}
	off := int(seg[12]>>4) * 4
	if off > len(seg) {
		return false
	}
	opts := seg[tcpHeaderLen:off]
	for i := 0; i < len(opts); {
		switch kind := opts[i]; kind {
		case 0: // end of options
			return false
		case 1: // no-op
			i++
			continue
		}
		if i+1 >= len(opts) {
			return false
		}
		l := int(opts[i+1])
		if l < 2 || i+l > len(opts) {
			return false
		}
		if opts[i] == tcpOptMSS && l == 4 {
			old := binary.BigEndian.Uint16(opts[i+2:])
			if old <= mss {
				return false
			}
			binary.BigEndian.PutUint16(opts[i+2:], mss)
			// RFC 1624: HC' = ~(~HC + ~m + m'). A value at an odd offset
			// adds byte-swapped to the ones' complement sum (RFC 1071).
			if (tcpHeaderLen+i+2)%2 == 1 {
				old, mss = old<<8|old>>8, mss<<8|mss>>8
			}
			s := uint32(^binary.BigEndian.Uint16(seg[16:])) + uint32(^old) + uint32(mss)
			for s > 0xffff {
				s = s&0xffff + s>>16
			}
			binary.BigEndian.PutUint16(seg[16:], ^uint16(s))
			return true
		}
		i += l
	}
	return false
}

// mssFor is the largest MSS whose segments, in an IP packet of dst's
// family with a TCP header without options, fit one datagram of limit
// bytes (the kind byte included); 0 if none does.
func mssFor(dst netip.Addr, limit int) uint16 {
	ip := packet.IPv4HeaderLen
	if dst.Is6() && !dst.Is4In6() {
		ip = packet.IPv6HeaderLen
	}
	m := limit - 1 - ip - tcpHeaderLen
	if m <= 0 {
		return 0
	}
	return uint16(min(m, 0xffff))
}

// segmentTCP cuts the TCP packet pkt (parsed as p), too long for one
// datagram, into packets of at most maxLen bytes, as the kernel's GSO
// would: the TUN hands the stack aggregated segments of up to 64 KiB
// (GRO, TSO), which a passed flow must cross as the segments they were
// made of. Each piece gets the headers with its sequence number, lengths
// and checksums; FIN and PSH go with the last piece, CWR with the first.
// emit is called with each, built in buf (grown as needed, returned for
// reuse) behind a kind byte; it returns false, sending nothing, if the
// headers leave no room for data or pkt is a SYN (one with data, as TCP
// Fast Open sends, is not cut).
func segmentTCP(buf, pkt []byte, p *tcpPacket, kind byte, maxLen int, emit func([]byte)) ([]byte, bool) {
	thl := int(p.l4[12]>>4) * 4
	hl := p.hdrLen + thl
	step := maxLen - hl
	data := p.l4[thl:]
	if step <= 0 || len(data) == 0 || p.flags&tcpSYN != 0 {
		return buf, false
	}
	seq := binary.BigEndian.Uint32(p.l4[4:])
	var id uint16
	v4 := pkt[0]>>4 == 4
	if v4 {
		id = binary.BigEndian.Uint16(pkt[4:])
	}
	src, dst := p.src.Addr(), p.dst.Addr()
	for off := 0; off < len(data); off += step {
		chunk := data[off:min(off+step, len(data))]
		n := hl + len(chunk)
		buf = append(append(append(buf[:0], kind), pkt[:hl]...), chunk...)
		b := buf[1:]
		if v4 {
			binary.BigEndian.PutUint16(b[2:], uint16(n))
			binary.BigEndian.PutUint16(b[4:], id)
			id++
			binary.BigEndian.PutUint16(b[10:], 0)
			binary.BigEndian.PutUint16(b[10:], ^checksum.Checksum(b[:p.hdrLen], 0))
		} else {
			binary.BigEndian.PutUint16(b[4:], uint16(n-packet.IPv6HeaderLen))
		}
		seg := b[p.hdrLen:]
		binary.BigEndian.PutUint32(seg[4:], seq+uint32(off))
		if off+len(chunk) < len(data) {
			seg[13] &^= tcpFIN | 0x08 // FIN, PSH: the last piece's
		}
		if off > 0 {
			seg[13] &^= 0x80 // CWR: the first piece's
		}
		binary.BigEndian.PutUint16(seg[16:], 0)
		binary.BigEndian.PutUint16(seg[16:], ^checksum.Checksum(seg, packet.PseudoHeaderSum(src, dst, packet.ProtoTCP, len(seg))))
		emit(buf)
	}
	return buf, true
}
