package egress

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wanopt/wanopt/flow"
)

// rawConn is a kernel TCP connection whose Read and Write are raw system
// calls on its non-blocking socket, waiting in Go's poller when it has
// nothing to give or no room. A call through net.TCPConn goes through the
// scheduler, which wakes the runtime's monitor thread; with GOMAXPROCS 1
// the monitor then takes the P from any call spanning one of its 20 µs
// ticks. Deadlines, Close and the rest are net.TCPConn's.
type rawConn struct {
	*net.TCPConn
	rc syscall.RawConn

	// One reader and one writer at a time (the relay's two directions):
	// each has its own state, bound once so that a call allocates nothing.
	rp      []byte
	rn      int
	rerrno  syscall.Errno
	readFn  func(fd uintptr) bool
	iov     [4]unix.Iovec // ReadBuffers' vector
	niov    int
	readvFn func(fd uintptr) bool
	wp      []byte
	wn      int
	werrno  syscall.Errno
	writeFn func(fd uintptr) bool
}

// wrapRaw returns c with raw reads and writes, or c itself if its socket
// cannot be reached.
func wrapRaw(c *net.TCPConn) flow.Conn {
	rc, err := c.SyscallConn()
	if err != nil {
		return c
	}
	r := &rawConn{TCPConn: c, rc: rc}
	r.readFn, r.writeFn, r.readvFn = r.read, r.write, r.readv
	return r
}

// read and readv convert their buffers' addresses in the system call's own
// argument list, as unsafe.Pointer's rules ask, so the two loops are
// written out twice.
func (c *rawConn) read(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(c.rp))), uintptr(len(c.rp)))
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		c.rn, c.rerrno = int(n), e
		return true
	}
}

func (c *rawConn) readv(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&c.iov[0])), uintptr(c.niov))
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		c.rn, c.rerrno = int(n), e
		return true
	}
}

// Read reads like net.TCPConn.Read.
func (c *rawConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rp, c.rn, c.rerrno = p, 0, 0
	err := c.rc.Read(c.readFn)
	c.rp = nil
	return c.readResult(err)
}

// readResult turns a raw read's outcome into Read's result.
func (c *rawConn) readResult(err error) (int, error) {
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case c.rerrno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", c.rerrno))
	case c.rn == 0:
		return 0, io.EOF
	}
	return c.rn, nil
}

// ReadBuffers reads like Read into bufs in order, with one readv of at
// most four of them (flow.BuffersReader): a copy into a tunnel stream's
// lent room, which spans its blocks.
func (c *rawConn) ReadBuffers(bufs [][]byte) (int, error) {
	c.niov = 0
	for _, b := range bufs[:min(len(bufs), len(c.iov))] {
		if len(b) > 0 {
			c.iov[c.niov].Base = unsafe.SliceData(b)
			c.iov[c.niov].SetLen(len(b))
			c.niov++
		}
	}
	if c.niov == 0 {
		return 0, nil
	}
	c.rn, c.rerrno = 0, 0
	err := c.rc.Read(c.readvFn)
	c.iov = [4]unix.Iovec{} // hold no pointers into the buffers
	return c.readResult(err)
}

func (c *rawConn) write(fd uintptr) bool {
	for c.wn < len(c.wp) {
		rest := c.wp[c.wn:]
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(rest))), uintptr(len(rest)))
		switch e {
		case 0:
			c.wn += int(n)
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			c.werrno = e
			return true
		}
	}
	return true
}

// Write writes all of p like net.TCPConn.Write.
func (c *rawConn) Write(p []byte) (int, error) {
	c.wp, c.wn, c.werrno = p, 0, 0
	err := c.rc.Write(c.writeFn)
	c.wp = nil
	switch {
	case err != nil:
		return c.wn, c.opError("write", err)
	case c.werrno != 0:
		return c.wn, c.opError("write", os.NewSyscallError("write", c.werrno))
	}
	return c.wn, nil
}

// opError wraps err as net.TCPConn would: errors.Is still finds
// net.ErrClosed and os.ErrDeadlineExceeded, and a deadline is a Timeout.
func (c *rawConn) opError(op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) { // the RawConn's own "raw-read" wrapping
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// Abort resets the connection (flow.Aborter): SO_LINGER 0, then close.
func (c *rawConn) Abort() error {
	_ = c.SetLinger(0)
	return c.Close()
}
