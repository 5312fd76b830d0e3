package simtcp

import (
	"encoding/binary"

	"github.com/wanopt/wanopt/internal/monotime"
)

// Datagram layouts (big endian). Only the first bytes carry fields; a data
// segment is padded to HeaderBytes+len so that it occupies as many bytes as
// a real one on the link.
//
//	data: kind(1) seq(8) len(2) tsval(8)
//	ack:  kind(1) ack(8) wnd(8) tsecr(8) nblocks(1) {lo(8) hi(8)}*nblocks
const (
	kindData = 1
	kindAck  = 2
	flagFIN  = 0x80

	dataFieldBytes = 19
	ackFieldBytes  = 26
	maxSACKBlocks  = 3
	// minHeaderBytes is the smallest HeaderBytes that holds the fields of
	// both datagram kinds.
	minHeaderBytes = ackFieldBytes
)

type dataSeg struct {
	seq   int64
	n     int
	fin   bool
	tsval monotime.Time
}

func putData(buf []byte, d dataSeg, headerBytes int) int {
	buf[0] = kindData
	if d.fin {
		buf[0] |= flagFIN
	}
	binary.BigEndian.PutUint64(buf[1:], uint64(d.seq))
	binary.BigEndian.PutUint16(buf[9:], uint16(d.n))
	binary.BigEndian.PutUint64(buf[11:], uint64(d.tsval))
	return headerBytes + d.n
}

func parseData(b []byte) (d dataSeg, ok bool) {
	if len(b) < dataFieldBytes || b[0]&^flagFIN != kindData {
		return d, false
	}
	d.fin = b[0]&flagFIN != 0
	d.seq = int64(binary.BigEndian.Uint64(b[1:]))
	d.n = int(binary.BigEndian.Uint16(b[9:]))
	d.tsval = monotime.Time(binary.BigEndian.Uint64(b[11:]))
	return d, true
}

type ackSeg struct {
	ack    int64
	wnd    int64
	tsecr  monotime.Time
	nblk   int
	blocks [maxSACKBlocks]span
}

// putAck writes a and returns the datagram length: headerBytes plus the SACK
// option as TCP carries it (two NOPs, kind, length, 8 bytes per block).
func putAck(buf []byte, a *ackSeg, headerBytes int) int {
	buf[0] = kindAck
	binary.BigEndian.PutUint64(buf[1:], uint64(a.ack))
	binary.BigEndian.PutUint64(buf[9:], uint64(a.wnd))
	binary.BigEndian.PutUint64(buf[17:], uint64(a.tsecr))
	buf[25] = byte(a.nblk)
	o := ackFieldBytes
	for _, b := range a.blocks[:a.nblk] {
		binary.BigEndian.PutUint64(buf[o:], uint64(b.lo))
		binary.BigEndian.PutUint64(buf[o+8:], uint64(b.hi))
		o += 16
	}
	n := headerBytes
	if a.nblk > 0 {
		n += 4 + 8*a.nblk
	}
	return max(n, o)
}

func parseAck(b []byte, a *ackSeg) bool {
	if len(b) < ackFieldBytes || b[0] != kindAck {
		return false
	}
	a.ack = int64(binary.BigEndian.Uint64(b[1:]))
	a.wnd = int64(binary.BigEndian.Uint64(b[9:]))
	a.tsecr = monotime.Time(binary.BigEndian.Uint64(b[17:]))
	a.nblk = int(b[25])
	if a.nblk > maxSACKBlocks || len(b) < ackFieldBytes+16*a.nblk {
		return false
	}
	o := ackFieldBytes
	for i := range a.nblk {
		a.blocks[i] = span{int64(binary.BigEndian.Uint64(b[o:])), int64(binary.BigEndian.Uint64(b[o+8:]))}
		o += 16
	}
	return true
}
