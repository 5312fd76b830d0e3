package lab

import (
	"encoding/binary"
	"errors"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"

	"github.com/wanopt/wanopt/tun"
)

// With LinkSpec.Offload the link helper's ends are TUN devices opened with a
// virtio-net header and UDP segmentation offload (linux/virtio_net.h,
// linux/if_tun.h). A sender's UDP GSO batch (up to 64 datagrams) then
// reaches the helper as one frame, unsegmented, and the real-time reader
// wakes once per batch instead of preempting the sender for every datagram,
// as with a NIC that has the offload. The helper splits the frame before the
// emulated link, so rate, queue and loss act on each datagram. Off by
// default, to compare with the published tables ('--link-offload').
const (
	vnetHdrLen     = tun.VirtioNetHdrLen
	vnetFNeedsCsum = 1
	vnetGSONone    = 0
	vnetGSOUDPL4   = 5
	vnetGSOECN     = 0x80

	// TUNSETOFFLOAD flags.
	tunFCsum = 0x01
	tunFUSO4 = 0x20
	tunFUSO6 = 0x40

	// vnetMaxFrame is the largest frame a read returns: the header and a
	// 64 KiB IP packet.
	vnetMaxFrame = vnetHdrLen + 1<<16
)

var (
	errVnetShort       = errors.New("frame shorter than its headers")
	errVnetUnsupported = errors.New("GSO type other than UDP segmentation")
	errVnetMalformed   = errors.New("malformed IP/UDP headers in a GSO frame")
)

// gsoSplitter turns one frame read from an offloading TUN into its IP
// packets with complete checksums; load keeps the frame until the last next.
type gsoSplitter struct {
	pkt    []byte // the IP packet of the frame; nil when nothing is left
	single bool   // pkt is one packet, not a UDP GSO batch
	l4     int    // offset of the UDP header
	mss    int    // UDP payload bytes per datagram
	off    int    // offset in pkt of the next datagram's payload
	v6     bool
	ipID   uint16 // the next datagram's IPv4 identification
	pseudo uint16 // sum of the pseudo-header's addresses and protocol
}

// load takes frame (header first) as the next input. An error drops the
// frame: nothing is left to read.
func (s *gsoSplitter) load(frame []byte) error {
	s.pkt = nil
	if len(frame) < vnetHdrLen {
		return errVnetShort
	}
	flags, gsoType := frame[0], frame[1]&^vnetGSOECN
	gsoSize := int(binary.LittleEndian.Uint16(frame[4:]))
	csumStart := int(binary.LittleEndian.Uint16(frame[6:]))
	csumOffset := int(binary.LittleEndian.Uint16(frame[8:]))
	p := frame[vnetHdrLen:]
	switch gsoType {
	case vnetGSONone:
		if flags&vnetFNeedsCsum != 0 {
			// Partial: the field holds the pseudo-header sum; the sum over
			// the transport header and payload completes it.
			if csumStart+csumOffset+2 > len(p) {
				return errVnetShort
			}
			sum := checksum.Checksum(p[csumStart:], 0)
			binary.BigEndian.PutUint16(p[csumStart+csumOffset:], ^sum)
		}
		s.pkt, s.single = p, true
		return nil
	case vnetGSOUDPL4:
	default:
		return errVnetUnsupported
	}
	if len(p) < 1 || gsoSize == 0 {
		return errVnetMalformed
	}
	switch p[0] >> 4 {
	case 4:
		if len(p) < 20 {
			return errVnetShort
		}
		ihl := int(p[0]&0x0f) * 4
		// A GSO frame is never a fragment (flags MF or an offset).
		if ihl < 20 || p[9] != 17 || binary.BigEndian.Uint16(p[6:])&0x3fff != 0 {
			return errVnetMalformed
		}
		s.l4, s.v6 = ihl, false
		s.ipID = binary.BigEndian.Uint16(p[4:])
		s.pseudo = addrPseudoSum(p, false, 17)
	case 6:
		// The kernel builds UDP GSO frames without extension headers.
		if len(p) < 40 || p[6] != 17 {
			return errVnetMalformed
		}
		s.l4, s.v6 = 40, true
		s.pseudo = addrPseudoSum(p, true, 17)
	default:
		return errVnetMalformed
	}
	if len(p) < s.l4+8 || (flags&vnetFNeedsCsum != 0 && csumStart != s.l4) {
		return errVnetMalformed
	}
	s.pkt, s.single, s.mss, s.off = p, false, gsoSize, s.l4+8
	if s.off == len(p) { // no payload: one empty datagram
		s.single = true
		s.pkt = p
		s.fixDatagram(p, 0)
	}
	return nil
}

// next copies the next packet into dst and reports its length; false when
// the frame is used up (or dst is too small, which drops the rest).
func (s *gsoSplitter) next(dst []byte) (int, bool) {
	if s.pkt == nil {
		return 0, false
	}
	if s.single {
		n := copy(dst, s.pkt)
		ok := n == len(s.pkt)
		s.pkt = nil
		return n, ok
	}
	hdr := s.l4 + 8
	payload := min(s.mss, len(s.pkt)-s.off)
	n := hdr + payload
	if len(dst) < n {
		s.pkt = nil
		return 0, false
	}
	copy(dst, s.pkt[:hdr])
	copy(dst[hdr:], s.pkt[s.off:s.off+payload])
	s.off += payload
	s.fixDatagram(dst[:n], payload)
	if s.off >= len(s.pkt) {
		s.pkt = nil
	}
	return n, true
}

// fixDatagram sets the lengths, IPv4 identification and checksums of one
// datagram of payload bytes, its headers copied from the frame's.
func (s *gsoSplitter) fixDatagram(d []byte, payload int) {
	udpLen := 8 + payload
	if s.v6 {
		binary.BigEndian.PutUint16(d[4:], uint16(udpLen))
	} else {
		binary.BigEndian.PutUint16(d[2:], uint16(len(d)))
		binary.BigEndian.PutUint16(d[4:], s.ipID)
		s.ipID++ // as a NIC segmenting the batch numbers the datagrams
		d[10], d[11] = 0, 0
		binary.BigEndian.PutUint16(d[10:], ^checksum.Checksum(d[:s.l4], 0))
	}
	u := d[s.l4:]
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0, 0
	sum := ^checksum.Checksum(u, checksum.Combine(s.pseudo, uint16(udpLen)))
	if sum == 0 {
		sum = 0xffff // zero means "no checksum" in UDP
	}
	binary.BigEndian.PutUint16(u[6:], sum)
}

// markChecksumOffloaded prepares the virtio-net header hdr for writing IP
// packet p to an offloading TUN as a NIC with receive checksum offload
// would: a TCP or UDP packet (not a fragment, nor IPv4 UDP without a
// checksum) gets a partial checksum (NEEDS_CSUM) with the pseudo-header's
// sum in the field, so the receiving kernel does not sum it again; anything
// else an empty header. The helper's checksums are all right.
func markChecksumOffloaded(hdr, p []byte) {
	clear(hdr[:vnetHdrLen])
	var l4, csumOff int
	var proto byte
	v4 := len(p) >= 20 && p[0]>>4 == 4
	switch {
	case v4:
		l4, proto = int(p[0]&0x0f)*4, p[9]
		if l4 < 20 || binary.BigEndian.Uint16(p[6:])&0x3fff != 0 || int(binary.BigEndian.Uint16(p[2:])) != len(p) {
			return // a fragment, or lengths to leave to the kernel
		}
	case len(p) >= 40 && p[0]>>4 == 6:
		l4, proto = 40, p[6] // extension headers: not marked
		if int(binary.BigEndian.Uint16(p[4:]))+40 != len(p) {
			return
		}
	default:
		return
	}
	switch proto {
	case 17:
		csumOff = 6
		if len(p) < l4+8 || (v4 && p[l4+6] == 0 && p[l4+7] == 0) {
			return
		}
	case 6:
		csumOff = 16
		if len(p) < l4+20 {
			return
		}
	default:
		return
	}
	sum := checksum.Combine(addrPseudoSum(p, !v4, proto), uint16(len(p)-l4))
	binary.BigEndian.PutUint16(p[l4+csumOff:], sum)
	hdr[0] = vnetFNeedsCsum
	binary.LittleEndian.PutUint16(hdr[6:], uint16(l4))
	binary.LittleEndian.PutUint16(hdr[8:], uint16(csumOff))
}

// addrPseudoSum is the sum of IP packet p's pseudo-header without its
// length (which differs per datagram): the addresses and protocol proto.
func addrPseudoSum(p []byte, v6 bool, proto byte) uint16 {
	addrs := p[12:20]
	if v6 {
		addrs = p[8:40]
	}
	return checksum.Combine(checksum.Checksum(addrs, 0), uint16(proto))
}
