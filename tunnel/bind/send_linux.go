//go:build linux && !bindfallback

package bind

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sender is the send side of a linuxConn. mu serialises WriteBatch calls
// and guards every field.
type sender struct {
	mu      sync.Mutex
	msgs    []unix.Mmsghdr
	iovs    []unix.Iovec // one per datagram; a GSO message spans several
	segs    []int        // datagrams per message
	bytes   []int        // payload bytes per message
	oob     []byte       // one UDP_SEGMENT control message per message
	oobSize int

	// The destination, encoded once per change of ep.
	name    unix.RawSockaddrInet6
	namelen uint32
	dest    Endpoint

	// sendmmsg arguments and results around oneshot.do.
	start, vlen, sent int
	errno             syscall.Errno
	calls             uint64
	writeFn           func(fd uintptr) bool // s.sendmmsg, bound once
}

func (s *sender) init(batch int) {
	s.msgs = make([]unix.Mmsghdr, batch)
	s.iovs = make([]unix.Iovec, batch)
	s.segs = make([]int, batch)
	s.bytes = make([]int, batch)
	s.oobSize = unix.CmsgSpace(2)
	s.oob = make([]byte, batch*s.oobSize)
	for i := range batch {
		// The header never changes; build fills in the segment size.
		h := (*unix.Cmsghdr)(unsafe.Pointer(&s.oob[i*s.oobSize]))
		h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		s.msgs[i].Hdr.Name = (*byte)(unsafe.Pointer(&s.name))
	}
	s.writeFn = s.sendmmsg
}

// sendmmsg is the oneshot.do callback: one system call for messages
// [start, vlen), retried on EINTR, reporting false on EAGAIN so the
// goroutine waits until the socket is writable.
//
// The socket is non-blocking, so the call never waits, and it is made
// without telling the scheduler (RawSyscall6): through Syscall6, a send
// that runs past the runtime monitor's 20 µs tick loses its P when the
// edge runs on one thread (GOMAXPROCS 1, as under a CPU limit of a core
// or less), and the monitor then keeps waking every 20 µs.
func (s *sender) sendmmsg(fd uintptr) bool {
	for {
		s.calls++
		n, _, e := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&s.msgs[s.start])),
			uintptr(s.vlen-s.start), 0, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		case 0:
			s.sent, s.errno = int(n), 0
		default:
			s.sent, s.errno = 0, e
		}
		return true
	}
}

func (c *linuxConn) WriteBatch(bufs [][]byte, ep Endpoint) error {
	s := &c.tx
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.closed.Load() {
		return c.ioError("write", nil)
	}
	if ep != s.dest || s.namelen == 0 {
		l, err := c.encodeSockaddr(&s.name, ep)
		if err != nil {
			s.namelen = 0
			return err
		}
		s.namelen, s.dest = l, ep
	}
	for len(bufs) > 0 {
		chunk := bufs[:min(len(bufs), c.batch)]
		err := c.sendChunk(chunk)
		for i := range chunk {
			s.iovs[i].Base = nil // keep no reference to the caller's buffers
		}
		if err != nil {
			return err
		}
		bufs = bufs[len(chunk):]
	}
	return nil
}

// sendChunk sends up to BatchSize datagrams. When a GSO send fails in a
// way that says the kernel or device cannot do GSO on this path, it turns
// GSO off and sends the rest without it, once.
//
// A GSO message refused as too big (EMSGSIZE) is sent again, with the
// rest of the chunk, one datagram per message, so only the datagrams that
// are too big are dropped (a path MTU probe must not take the data
// packets batched with it down too); GSO stays on.
func (c *linuxConn) sendChunk(chunk [][]byte) error {
	gso := c.stats.gso.Load()
	done, err := c.send(c.tx.build(chunk, gso))
	switch {
	case errors.Is(err, errGSOTooBig):
		_, err = c.send(c.tx.build(chunk[done:], false))
	case err != nil && gso && (errors.Is(err, unix.EIO) || errors.Is(err, unix.EINVAL)):
		// Linux also refuses a GSO message whose segments exceed the
		// device's MTU with EINVAL: when sending the rest one by one
		// finds a datagram too big, that was the cause, and GSO stays.
		tooBig := c.stats.tooBig.Load()
		_, err2 := c.send(c.tx.build(chunk[done:], false))
		if c.stats.tooBig.Load() == tooBig {
			c.disableGSO(err)
		}
		err = err2
	}
	return err
}

// errGSOTooBig is send's report of a GSO message refused with EMSGSIZE.
var errGSOTooBig = errors.New("bind: GSO message larger than the device's MTU")

// build lays chunk out as messages, one per datagram or, with gso, one per
// run of datagrams gsoRun allows, and returns the number of messages.
func (s *sender) build(chunk [][]byte, gso bool) int {
	m := 0
	for i := 0; i < len(chunk); m++ {
		n := 1
		if gso {
			n = gsoRun(chunk[i:], maxGSOSegments, maxGSOBytes)
		}
		total := 0
		for j, b := range chunk[i : i+n] {
			iov := &s.iovs[i+j]
			if len(b) > 0 {
				iov.Base = &b[0]
			} else {
				iov.Base = nil
			}
			iov.SetLen(len(b))
			total += len(b)
		}
		h := &s.msgs[m].Hdr
		h.Namelen = s.namelen
		h.Iov = &s.iovs[i]
		h.SetIovlen(n)
		if n > 1 {
			oob := s.oob[m*s.oobSize:][:s.oobSize]
			binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(len(chunk[i])))
			h.Control = &oob[0]
			h.SetControllen(s.oobSize)
		} else {
			h.Control = nil
			h.SetControllen(0)
		}
		s.segs[m], s.bytes[m] = n, total
		i += n
	}
	return m
}

// send sends the first m built messages, with as many sendmmsg calls as
// the kernel needs, and returns how many datagrams it is done with: sent,
// or dropped as too big (a single datagram refused with EMSGSIZE is
// counted in TooBig and skipped). A GSO message refused with EMSGSIZE
// stops it with errGSOTooBig, the message not done.
func (c *linuxConn) send(m int) (int, error) {
	s := &c.tx
	s.start, s.vlen = 0, m
	done, written, bytes, segmented := 0, 0, 0, 0
	defer func() {
		c.stats.datagramsWritten.Add(uint64(written))
		c.stats.bytesWritten.Add(uint64(bytes))
		c.stats.segmented.Add(uint64(segmented))
	}()
	for s.start < m {
		s.calls = 0
		err := c.txw.do(s.writeFn)
		c.stats.writeSyscalls.Add(s.calls)
		if err != nil {
			return done, c.ioError("sendmmsg", err)
		}
		if s.errno == unix.EMSGSIZE {
			if s.segs[s.start] > 1 {
				return done, errGSOTooBig
			}
			c.stats.tooBig.Add(1)
			done++
			s.start++
			continue
		}
		if s.errno != 0 || s.sent <= 0 {
			var e error = s.errno
			if s.errno == 0 {
				e = errors.New("kernel sent no message")
			}
			return done, fmt.Errorf("bind: sendmmsg from %v to %v, after %d datagrams of the batch: %w",
				c.local, s.dest, done, e)
		}
		for i := s.start; i < s.start+s.sent; i++ {
			done += s.segs[i]
			written += s.segs[i]
			bytes += s.bytes[i]
			if s.segs[i] > 1 {
				segmented++
			}
		}
		s.start += s.sent
	}
	return done, nil
}
