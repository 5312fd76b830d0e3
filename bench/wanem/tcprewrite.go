package wanem

import "encoding/binary"

// This file is the emulated middlebox behind Config.ForgeSACK, WindowClamp
// and TamperUDPPct. Each rewrite is a pure function of the packet (and, for
// the clamp, the window scales seen on SYNs), so it can be fuzzed alone. A
// packet that does not parse as expected passes untouched; nothing here
// panics on bad bytes. A valid checksum stays valid and a broken one stays
// broken: a rewrite never launders a corrupt packet.

// ForgedSACK is the SACK block [ack+Offset, ack+Offset+Length) ForgeSACK adds
// to pure ACKs; above the sender's window it covers data not yet sent.
type ForgedSACK struct {
	// Offset is how far past the ACK number the block starts; at least 1.
	Offset uint32 `json:"offset"`
	// Length is the bytes the block covers; at least 1.
	Length uint32 `json:"length"`
}

// Limits of the rewrites.
const (
	// maxSACKGrowth is the most bytes forgeSACK adds to a packet: NOP,
	// NOP and a one-block SACK option.
	maxSACKGrowth = 12
	// maxTCPOptions is the TCP options room: a 60-byte header at most.
	maxTCPOptions = 40
	// maxWindowScale is RFC 7323's largest shift; larger offers count as it.
	maxWindowScale = 14
	// MaxWindowClamp is the largest WindowClamp accepted: the largest
	// window TCP can advertise (65535 << 14).
	MaxWindowClamp = 65535 << maxWindowScale
)

// IP protocol numbers and TCP bits the rewrites look at.
const (
	protoTCP = 6
	protoUDP = 17

	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10

	optEOL    = 0
	optNOP    = 1
	optWScale = 3
	optSACK   = 5
)

// l4 locates the transport header of an IPv4 or IPv6 packet whose length
// fields match len(pkt) exactly. It returns false for anything else:
// other versions, fragments, IPv6 extension headers, bad lengths.
func l4(pkt []byte) (off int, proto byte, v6 bool, ok bool) {
	if len(pkt) < 20 {
		return 0, 0, false, false
	}
	switch pkt[0] >> 4 {
	case 4:
		ihl := int(pkt[0]&0x0f) * 4
		if ihl < 20 || ihl > len(pkt) || int(binary.BigEndian.Uint16(pkt[2:4])) != len(pkt) {
			return 0, 0, false, false
		}
		if binary.BigEndian.Uint16(pkt[6:8])&0x3fff != 0 { // MF or a fragment offset
			return 0, 0, false, false
		}
		return ihl, pkt[9], false, true
	case 6:
		if len(pkt) < 40 || int(binary.BigEndian.Uint16(pkt[4:6]))+40 != len(pkt) {
			return 0, 0, false, false
		}
		return 40, pkt[6], true, true
	}
	return 0, 0, false, false
}

// tcpHeader returns the offset of the TCP header of pkt and its length
// (data offset), or false if pkt is not a whole, parsable TCP segment.
func tcpHeader(pkt []byte) (off, hlen int, v6 bool, ok bool) {
	off, proto, v6, ok := l4(pkt)
	if !ok || proto != protoTCP || len(pkt)-off < 20 {
		return 0, 0, false, false
	}
	hlen = int(pkt[off+12]>>4) * 4
	if hlen < 20 || off+hlen > len(pkt) {
		return 0, 0, false, false
	}
	return off, hlen, v6, true
}

// sum16 adds b as big-endian 16-bit words (zero-padded) to s, unfolded.
func sum16(s uint64, b []byte) uint64 {
	for len(b) >= 2 {
		s += uint64(b[0])<<8 | uint64(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

// fold folds a one's-complement sum to 16 bits.
func fold(s uint64) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// l4Sum is the one's-complement sum of the pseudo-header and the transport
// segment at pkt[off:] (checksum field included as it stands).
func l4Sum(pkt []byte, off int, v6 bool, proto byte) uint64 {
	n := uint64(len(pkt) - off)
	var s uint64
	if v6 {
		s = sum16(s, pkt[8:40])
	} else {
		s = sum16(s, pkt[12:20])
	}
	s += uint64(proto) + n>>16 + n&0xffff
	return sum16(s, pkt[off:])
}

// ipv4HeaderSum is the IPv4 header checksum of pkt's header.
func ipv4HeaderSum(pkt []byte, ihl int) uint16 {
	s := sum16(0, pkt[:10])
	s = sum16(s, pkt[12:ihl])
	return ^fold(s)
}

// updateSum is RFC 1624's incremental update (eqn. 3) of checksum hc for
// one 16-bit word changing from old to new.
func updateSum(hc, old, new uint16) uint16 {
	return ^fold(uint64(^hc) + uint64(^old) + uint64(new))
}

// forgeSACK adds the forged SACK block f to pkt if it is a pure TCP ACK
// (ACK set, SYN and RST clear, no payload, so it never outgrows the MTU),
// negotiated or not. With no SACK option it appends NOP, NOP and a
// one-block option; with one, it puts the block first (RFC 2018's slot for
// the newest) or, when the options room is full, overwrites the first. A
// segment with no room, or a wrong TCP or IPv4 checksum, is left alone.
// pkt must have capacity for maxSACKGrowth more bytes; forgeSACK returns
// it (grown in place) and whether it rewrote it.
func forgeSACK(pkt []byte, f ForgedSACK) ([]byte, bool) {
	off, hlen, v6, ok := tcpHeader(pkt)
	if !ok || cap(pkt) < len(pkt)+maxSACKGrowth {
		return pkt, false
	}
	tcp := pkt[off:]
	if flags := tcp[13]; flags&tcpACK == 0 || flags&(tcpSYN|tcpRST) != 0 || len(tcp) != hlen {
		return pkt, false
	}
	if fold(l4Sum(pkt, off, v6, protoTCP)) != 0xffff {
		return pkt, false // corrupt: a device fixing checksums would launder it
	}
	if !v6 && fold(sum16(0, pkt[:off])) != 0xffff {
		return pkt, false
	}
	opts := tcp[20:hlen]
	end, sackAt := len(opts), -1
	for i := 0; i < len(opts); {
		switch opts[i] {
		case optEOL:
			end = i
			i = len(opts)
			continue
		case optNOP:
			i++
			continue
		}
		if i+1 >= len(opts) {
			return pkt, false
		}
		l := int(opts[i+1])
		if l < 2 || i+l > len(opts) {
			return pkt, false
		}
		if opts[i] == optSACK {
			if sackAt >= 0 || l < 10 || (l-2)%8 != 0 {
				return pkt, false
			}
			sackAt = i
		}
		i += l
	}
	var block [8]byte
	left := binary.BigEndian.Uint32(tcp[8:12]) + f.Offset
	binary.BigEndian.PutUint32(block[:4], left)
	binary.BigEndian.PutUint32(block[4:], left+f.Length)

	// Build the new options in a scratch array: inserting overlaps.
	var nb [maxTCPOptions]byte
	var n int
	switch {
	case sackAt >= 0 && len(opts)+8 <= maxTCPOptions:
		n = copy(nb[:], opts[:sackAt+2])
		nb[sackAt+1] += 8
		n += copy(nb[n:], block[:])
		n += copy(nb[n:], opts[sackAt+2:])
	case sackAt >= 0:
		n = copy(nb[:], opts)
		copy(nb[sackAt+2:], block[:])
	default:
		need := (end + 12 + 3) &^ 3
		if need > maxTCPOptions {
			return pkt, false
		}
		n = copy(nb[:], opts[:end])
		nb[n], nb[n+1], nb[n+2], nb[n+3] = optNOP, optNOP, optSACK, 10
		n += 4
		n += copy(nb[n:], block[:])
		n = max(need, len(opts)) // the rest of nb is zero: EOL padding
	}
	grow := n - len(opts)
	pkt = pkt[:len(pkt)+grow]
	tcp = pkt[off:]
	copy(tcp[20:], nb[:n])
	tcp[12] = byte((20+n)/4)<<4 | tcp[12]&0x0f
	if v6 {
		binary.BigEndian.PutUint16(pkt[4:6], uint16(len(pkt)-40))
	} else {
		binary.BigEndian.PutUint16(pkt[2:4], uint16(len(pkt)))
		binary.BigEndian.PutUint16(pkt[10:12], ipv4HeaderSum(pkt, off))
	}
	tcp[16], tcp[17] = 0, 0
	binary.BigEndian.PutUint16(tcp[16:18], ^fold(l4Sum(pkt, off, v6, protoTCP)))
	return pkt, true
}

// scaleSlots is the size of a direction's window-scale table.
const scaleSlots = 256

// scaleTable remembers, per connection seen in one direction, the window
// scale offered on its SYN, which the clamp needs to turn a window field
// into bytes. A fixed array: a colliding SYN replaces the entry.
type scaleTable struct {
	slot [scaleSlots]struct {
		key   uint64
		shift uint8
		used  bool
	}
}

// flowKey hashes the addresses and ports of the segment (FNV-1a).
func flowKey(pkt []byte, off int, v6 bool) uint64 {
	h := uint64(14695981039346656037)
	addrs := pkt[12:20]
	if v6 {
		addrs = pkt[8:40]
	}
	for _, b := range addrs {
		h = (h ^ uint64(b)) * 1099511628211
	}
	for _, b := range pkt[off : off+4] {
		h = (h ^ uint64(b)) * 1099511628211
	}
	return h
}

func (t *scaleTable) set(key uint64, shift uint8) {
	s := &t.slot[key%scaleSlots]
	s.key, s.shift, s.used = key, shift, true
}

func (t *scaleTable) get(key uint64) (shift uint8, ok bool) {
	s := &t.slot[key%scaleSlots]
	if !s.used || s.key != key {
		return 0, false
	}
	return s.shift, true
}

// synWindowScale returns the window-scale option of a SYN's options, 0 if
// it has none or they are malformed.
func synWindowScale(opts []byte) uint8 {
	for i := 0; i < len(opts); {
		switch opts[i] {
		case optEOL:
			return 0
		case optNOP:
			i++
			continue
		}
		if i+1 >= len(opts) {
			return 0
		}
		l := int(opts[i+1])
		if l < 2 || i+l > len(opts) {
			return 0
		}
		if opts[i] == optWScale && l == 3 {
			return min(opts[i+2], maxWindowScale)
		}
		i += l
	}
	return 0
}

// clampWindow lowers a TCP segment's window field so that it advertises at
// most clamp bytes, and reports whether it changed it. A SYN's window is
// unscaled; its scale offer is recorded in scales, and later segments are
// clamped to clamp >> scale, at least 1 (a zero window would stall the
// connection). If the peer declined scaling the clamp is tighter than
// asked; if the SYN was not seen, the segment is clamped as unscaled. RST
// segments are left alone. The checksum is updated incrementally.
func clampWindow(pkt []byte, clamp uint32, scales *scaleTable) bool {
	off, hlen, v6, ok := tcpHeader(pkt)
	if !ok {
		return false
	}
	tcp := pkt[off:]
	flags := tcp[13]
	if flags&tcpRST != 0 {
		return false
	}
	key := flowKey(pkt, off, v6)
	limit := clamp
	if flags&tcpSYN != 0 {
		scales.set(key, synWindowScale(tcp[20:hlen]))
	} else if shift, ok := scales.get(key); ok {
		limit = max(clamp>>shift, 1)
	}
	limit = min(limit, 65535)
	old := binary.BigEndian.Uint16(tcp[14:16])
	if uint32(old) <= limit {
		return false
	}
	binary.BigEndian.PutUint16(tcp[14:16], uint16(limit))
	cs := binary.BigEndian.Uint16(tcp[16:18])
	binary.BigEndian.PutUint16(tcp[16:18], updateSum(cs, old, uint16(limit)))
	return true
}

// tamperUDP inverts the last payload byte of a UDP datagram and fixes the
// checksum; it reports whether it did. For an AEAD-sealed datagram that
// byte is in the tag. Datagrams with no payload or inconsistent lengths are
// left alone; an IPv4 datagram without a checksum (0) keeps none.
func tamperUDP(pkt []byte) bool {
	off, proto, v6, ok := l4(pkt)
	if !ok || proto != protoUDP || len(pkt)-off <= 8 {
		return false
	}
	udp := pkt[off:]
	if int(binary.BigEndian.Uint16(udp[4:6])) != len(udp) {
		return false
	}
	i := len(udp) - 1
	w := i &^ 1 // the 16-bit word holding the byte
	var oldWord uint16
	if w+1 < len(udp) {
		oldWord = binary.BigEndian.Uint16(udp[w:])
	} else {
		oldWord = uint16(udp[w]) << 8 // odd length: padded with zero
	}
	udp[i] ^= 0xff
	newWord := oldWord ^ 0xff
	if i == w {
		newWord = oldWord ^ 0xff00
	}
	cs := binary.BigEndian.Uint16(udp[6:8])
	if cs == 0 && !v6 {
		return true // no checksum to fix
	}
	cs = updateSum(cs, oldWord, newWord)
	if cs == 0 {
		cs = 0xffff // UDP sends a computed zero as all ones
	}
	binary.BigEndian.PutUint16(udp[6:8], cs)
	return true
}

// isUDP reports whether pkt is a whole, unfragmented UDP datagram, so that
// only UDP datagrams draw from TamperUDPPct's generator.
func isUDP(pkt []byte) bool {
	_, proto, _, ok := l4(pkt)
	return ok && proto == protoUDP
}
