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

	// groLead is the room before each slot's 64 KiB: a caller's buffer
	// of at most this size can take the start of a message directly
	// (see receiver), and when a later message of the same call turns out
	// coalesced, that start is moved back here, in front of the rest.
	// 9216 bytes covers a jumbo-frame datagram; larger caller buffers are
	// not given to the kernel (the ring alone receives, and drain copies).
	groLead = 9216

	// rxOOBSize is the control buffer per received message: the UDP_GRO
	// message needs 24 bytes (20 on 32-bit systems); the rest is slack.
	rxOOBSize = 64

	groStride = groLead + groSlotSize
)

// receiver is the receive side of a linuxConn. mu serialises ReadBatch
// calls and guards every field.
type receiver struct {
	mu    sync.Mutex
	msgs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	zone  zoneCache

	// With GRO only: the ring the kernel receives into (groLead +
	// groSlotSize per message), the control messages carrying segment
	// sizes, and where each message's data starts in its slot.
	ring  []byte
	oob   []byte
	start []int

	// Pending GRO data: messages [next, count) of the last recvmmsg are
	// not yet all returned. When started, message next has been parsed
	// (seg, from) and returned up to byte off.
	count, next, off int
	started          bool
	seg              int
	from             Endpoint

	// recvmmsg arguments and results around oneshot.do; emptied: the
	// last one returned fewer messages than it asked for (see WaitRead).
	vlen, got int
	emptied   bool
	errno     syscall.Errno
	calls     uint64
	readFn    func(fd uintptr) bool // r.recvmmsg, bound once

	// coalescing: the last receive brought a super-datagram, so the next
	// receives into the ring alone (the first part of each message
	// would only be copied back behind the caller's buffer).
	coalescing bool
	direct     uint64 // datagrams returned without a copy from the ring (tests)
}

// With GRO, each message has two iovecs: first a caller's buffer (or
// nothing), then its ring slot after groLead bytes. A datagram that was
// not coalesced and fits the caller's buffer (every datagram, where
// nothing coalesces, as behind a TUN or a NIC without GRO) then lands
// where ReadBatch returns it, and is not copied out of the ring.
func (r *receiver) init(batch int, gro bool) {
	n, iovs := batch, 1
	if gro {
		n, iovs = min(batch, maxGROSlots), 2
		r.ring = make([]byte, n*groStride)
		r.oob = make([]byte, n*rxOOBSize)
		r.start = make([]int, n)
	}
	r.msgs = make([]unix.Mmsghdr, n)
	r.iovs = make([]unix.Iovec, n*iovs)
	r.names = make([]unix.RawSockaddrInet6, n)
	for i := range r.msgs {
		h := &r.msgs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Iov = &r.iovs[i*iovs]
		h.SetIovlen(iovs)
		if gro {
			slot := &r.iovs[2*i+1]
			slot.Base = &r.ring[i*groStride+groLead]
			slot.SetLen(groSlotSize)
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
			r.emptied = r.got < r.vlen
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
			if n := c.collect(r.got, bufs, sizes, eps); n > 0 {
				return n, nil
			}
			continue // all dropped
		}
		if r.next >= r.count {
			if !r.coalescing && direct(bufs) {
				if err := c.recv(min(len(bufs), len(r.msgs)), bufs); err != nil {
					return 0, err
				}
				n := c.take(bufs, sizes, eps)
				n += c.drain(bufs[n:], sizes[n:], eps[n:])
				if n > 0 {
					return n, nil
				}
				continue
			}
			if err := c.recv(len(r.msgs), nil); err != nil {
				return 0, err
			}
			r.coalescing = false
			for i := range r.got {
				r.start[i] = groLead
				if r.coalesced(i) {
					r.coalescing = true
				}
			}
			r.count, r.next, r.off, r.started = r.got, 0, 0, false
		}
		if n := c.drain(bufs, sizes, eps); n > 0 {
			return n, nil
		}
	}
}

// WaitRead implements ReadWaiter. It waits only while nothing is pending
// from the last receive (GRO data not yet returned) and that receive
// returned fewer messages than it asked for, so found the socket empty
// after them. A ReadBatch after a wait that Go's poller ended at once
// (a datagram came in between) reads as it would have anyway.
func (c *linuxConn) WaitRead() error {
	r := &c.rx
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.closed.Load() {
		return c.ioError("read", nil)
	}
	if !r.emptied || r.next < r.count {
		return nil
	}
	r.emptied = false
	if err := c.rxw.await(); err != nil {
		return c.ioError("wait for the socket", err)
	}
	return nil
}

// direct reports whether the caller's buffers can head the messages of a
// receive with GRO (see receiver.init): none is larger than groLead.
func direct(bufs [][]byte) bool {
	for _, b := range bufs {
		if len(b) > groLead {
			return false
		}
	}
	return true
}

// take returns the datagrams a receive with GRO put straight into bufs,
// in order, up to the first message that was coalesced (or that ran past
// its caller's buffer into the ring). From that one on the messages
// become pending ring data: the part of each in its caller's buffer is
// moved in front of the rest in its slot, before drain reuses the
// buffers.
func (c *linuxConn) take(bufs [][]byte, sizes []int, eps []Endpoint) int {
	r := &c.rx
	k := 0
	for ; k < r.got; k++ {
		if r.coalesced(k) {
			r.coalescing = true
			break
		}
		if int(r.msgs[k].Len) > len(bufs[k]) {
			break
		}
	}
	for j := k; j < r.got; j++ {
		head := min(int(r.msgs[j].Len), len(bufs[j]))
		r.start[j] = groLead - head
		copy(r.ring[j*groStride+r.start[j]:], bufs[j][:head])
	}
	r.count, r.next, r.off, r.started = r.got, k, 0, false
	n := c.collect(k, bufs, sizes, eps)
	r.direct += uint64(n)
	return n
}

// recv makes one recvmmsg for vlen messages, into bufs when given (first,
// with GRO: then into the ring) or into the ring alone.
func (c *linuxConn) recv(vlen int, bufs [][]byte) error {
	r := &c.rx
	step := 1 // iovecs per message: the caller's buffer first
	if r.ring != nil {
		step = 2
	}
	for i := range vlen {
		h := &r.msgs[i].Hdr
		h.Namelen = unix.SizeofSockaddrInet6
		if r.ring != nil {
			h.SetControllen(rxOOBSize)
		}
		v := &r.iovs[i*step]
		v.Base = nil
		v.SetLen(0)
		if bufs != nil && len(bufs[i]) > 0 {
			v.Base = &bufs[i][0]
			v.SetLen(len(bufs[i]))
		}
	}
	r.vlen, r.calls = vlen, 0
	err := c.rxw.do(r.readFn)
	c.stats.readSyscalls.Add(r.calls)
	if bufs != nil {
		for i := range vlen {
			r.iovs[i*step].Base = nil // keep no reference to the caller's buffers
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

// collect turns the first msgs messages of the last recvmmsg into the
// caller's results after a receive straight into bufs, moving datagrams
// down over dropped ones.
func (c *linuxConn) collect(msgs int, bufs [][]byte, sizes []int, eps []Endpoint) int {
	r := &c.rx
	n, bytes, dropped := 0, 0, 0
	for i := range msgs {
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
// super-datagrams, until bufs are full or nothing is pending. Message i's
// data starts at start[i] in its slot.
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
		data := r.ring[r.next*groStride+r.start[r.next]:][:m.Len]
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

// coalesced reports whether message i of the last receive holds a GRO
// super-datagram.
func (r *receiver) coalesced(i int) bool {
	m := &r.msgs[i]
	return groSegment(r.oob[i*rxOOBSize:][:min(int(m.Hdr.Controllen), rxOOBSize)]) > 0
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
