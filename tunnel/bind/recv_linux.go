//go:build linux && !bindfallback

package bind

import (
	"encoding/binary"
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// groSlotSize holds the largest UDP datagram and so the largest GRO
	// super-datagram (65535 bytes of IP packet).
	groSlotSize = 1 << 16

	// maxGROSlots bounds the GRO ring whatever the batch size.
	maxGROSlots = 64

	// rxOOBSize is the control buffer per received message: the UDP_GRO
	// message needs 24 bytes (20 on 32-bit systems); the rest is slack.
	rxOOBSize = 64
)

// receiver is the receive side of a linuxConn. mu serialises ReadBatch
// calls and guards every field.
type receiver struct {
	mu    sync.Mutex
	msgs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	zone  zoneCache

	// With GRO only: the ring the kernel receives into (groSlotSize per
	// message) and the control messages carrying segment sizes.
	ring []byte
	oob  []byte

	// Pending GRO data: messages [next, count) of the last recvmmsg are
	// not yet all returned. When started, message next has been parsed
	// (seg, from) and returned up to byte off.
	count, next, off int
	started          bool
	seg              int
	from             Endpoint

	// recvmmsg arguments and results around oneshot.do.
	vlen, got int
	errno     syscall.Errno
	calls     uint64
	readFn    func(fd uintptr) bool // r.recvmmsg, bound once
}

func (r *receiver) init(batch int, gro bool) {
	n := batch
	if gro {
		n = min(batch, maxGROSlots)
		r.ring = make([]byte, n*groSlotSize)
		r.oob = make([]byte, n*rxOOBSize)
	}
	r.msgs = make([]unix.Mmsghdr, n)
	r.iovs = make([]unix.Iovec, n)
	r.names = make([]unix.RawSockaddrInet6, n)
	for i := range r.msgs {
		h := &r.msgs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Iov = &r.iovs[i]
		h.SetIovlen(1)
		if gro {
			r.iovs[i].Base = &r.ring[i*groSlotSize]
			r.iovs[i].SetLen(groSlotSize)
			h.Control = &r.oob[i*rxOOBSize]
		}
	}
	r.readFn = r.recvmmsg
}

// recvmmsg is the oneshot.do callback: one system call, retried on EINTR,
// reporting false on EAGAIN so the goroutine waits for the socket. Like
// sendmmsg it never waits (the socket is non-blocking), so it is a raw
// system call for the same reason.
func (r *receiver) recvmmsg(fd uintptr) bool {
	for {
		r.calls++
		n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.msgs[0])),
			uintptr(r.vlen), 0, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		case 0:
			r.got, r.errno = int(n), 0
		default:
			r.got, r.errno = 0, e
		}
		return true
	}
}

func (c *linuxConn) ReadBatch(bufs [][]byte, sizes []int, eps []Endpoint) (int, error) {
	if len(sizes) < len(bufs) || len(eps) < len(bufs) {
		panic(fmt.Sprintf("bind: ReadBatch with %d bufs but %d sizes and %d eps", len(bufs), len(sizes), len(eps)))
	}
	r := &c.rx
	r.mu.Lock()
	defer r.mu.Unlock()
	bufs = bufs[:min(len(bufs), c.batch)]
	if len(bufs) == 0 {
		return 0, nil
	}
	for {
		if c.closed.Load() {
			return 0, c.ioError("read", nil)
		}
		if r.ring == nil {
			if err := c.recv(len(bufs), bufs); err != nil {
				return 0, err
			}
			if n := c.collect(bufs, sizes, eps); n > 0 {
				return n, nil
			}
			continue // all dropped
		}
		if r.next >= r.count {
			if err := c.recv(len(r.msgs), nil); err != nil {
				return 0, err
			}
			r.count, r.next, r.off, r.started = r.got, 0, 0, false
		}
		if n := c.drain(bufs, sizes, eps); n > 0 {
			return n, nil
		}
	}
}

// recv makes one recvmmsg for vlen messages, into bufs when given (no GRO)
// or into the ring.
func (c *linuxConn) recv(vlen int, bufs [][]byte) error {
	r := &c.rx
	for i := range vlen {
		h := &r.msgs[i].Hdr
		h.Namelen = unix.SizeofSockaddrInet6
		if bufs != nil {
			if b := bufs[i]; len(b) > 0 {
				r.iovs[i].Base = &b[0]
			} else {
				r.iovs[i].Base = nil
			}
			r.iovs[i].SetLen(len(bufs[i]))
		} else {
			h.SetControllen(rxOOBSize)
		}
	}
	r.vlen, r.calls = vlen, 0
	err := c.rxw.do(r.readFn)
	c.stats.readSyscalls.Add(r.calls)
	if bufs != nil {
		for i := range vlen {
			r.iovs[i].Base = nil // keep no reference to the caller's buffers
		}
	}
	if err != nil {
		return c.ioError("recvmmsg", err)
	}
	if r.errno != 0 {
		return c.ioError("recvmmsg", r.errno)
	}
	return nil
}

// collect turns the last recvmmsg into the caller's results after a
// receive straight into bufs, moving datagrams down over dropped ones.
func (c *linuxConn) collect(bufs [][]byte, sizes []int, eps []Endpoint) int {
	r := &c.rx
	n, bytes, dropped := 0, 0, 0
	for i := range r.got {
		m := &r.msgs[i]
		size := int(m.Len)
		if m.Hdr.Flags&unix.MSG_TRUNC != 0 || size > len(bufs[n]) {
			dropped++
			continue
		}
		if n != i {
			copy(bufs[n], bufs[i][:size])
		}
		sizes[n], eps[n] = size, decodeSockaddr(&r.names[i], &r.zone)
		bytes += size
		n++
	}
	c.stats.datagramsRead.Add(uint64(n))
	c.stats.bytesRead.Add(uint64(bytes))
	c.stats.dropped.Add(uint64(dropped))
	return n
}

// drain copies pending datagrams from the ring into bufs, splitting GRO
// super-datagrams, until bufs are full or nothing is pending.
func (c *linuxConn) drain(bufs [][]byte, sizes []int, eps []Endpoint) int {
	r := &c.rx
	n, bytes, dropped, coalesced := 0, 0, 0, 0
	for n < len(bufs) && r.next < r.count {
		m := &r.msgs[r.next]
		if !r.started {
			if m.Hdr.Flags&unix.MSG_TRUNC != 0 {
				dropped++
				r.next++
				continue
			}
			r.from = decodeSockaddr(&r.names[r.next], &r.zone)
			r.seg = int(m.Len)
			oob := r.oob[r.next*rxOOBSize:][:min(int(m.Hdr.Controllen), rxOOBSize)]
			if g := groSegment(oob); g > 0 && g < r.seg {
				r.seg = g
				coalesced++
			}
			r.started = true
		}
		data := r.ring[r.next*groSlotSize:][:m.Len]
		if len(data) == 0 { // an empty datagram is still one
			sizes[n], eps[n] = 0, r.from
			n++
		}
		for n < len(bufs) && r.off < len(data) {
			d := data[r.off:min(r.off+r.seg, len(data))]
			r.off += len(d)
			if len(d) > len(bufs[n]) {
				dropped++
				continue
			}
			sizes[n], eps[n] = copy(bufs[n], d), r.from
			bytes += len(d)
			n++
		}
		if r.off >= len(data) {
			r.next, r.off, r.started = r.next+1, 0, false
		}
	}
	c.stats.datagramsRead.Add(uint64(n))
	c.stats.bytesRead.Add(uint64(bytes))
	c.stats.dropped.Add(uint64(dropped))
	c.stats.coalesced.Add(uint64(coalesced))
	return n
}

// groSegment returns the segment size from a UDP_GRO control message in
// oob, or 0 when there is none (a datagram that was not coalesced).
func groSegment(oob []byte) int {
	hdr := unix.CmsgLen(0)
	for len(oob) >= hdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdr || l > len(oob) {
			return 0
		}
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && l >= unix.CmsgLen(4) {
			return int(binary.NativeEndian.Uint32(oob[hdr:]))
		}
		oob = oob[min(unix.CmsgSpace(l-hdr), len(oob)):]
	}
	return 0
}
