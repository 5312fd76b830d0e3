//go:build linux && !bindfallback

package bind

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// oneshot makes a socket's system calls and, when one reports EAGAIN,
// waits for the socket in Go's poller through an epoll instance of its
// own, armed for one event per wait (EPOLLONESHOT).
//
// Why not the socket's own place in Go's poller: the runtime registers a
// socket edge-triggered for good, so every datagram wakes a thread
// sleeping in the poller, also while the reader holds its next read on
// purpose (the driver's receive moderation). Armed once per wait, the
// socket wakes the edge only when a reader waits
// (TestOneshotQuietBetweenReads).
type oneshot struct {
	sock   int    // the socket (its owner closes it)
	events uint32 // unix.EPOLLIN or unix.EPOLLOUT
	ep     *os.File
	rc     syscall.RawConn
	ctl    unix.EpollEvent
	evs    [1]unix.EpollEvent
	added  bool   // the socket is in the epoll set (armed or spent)
	armed  bool   // armed for the current wait
	pwaits uint64 // epoll_pwait calls (tests)
	errno  syscall.Errno
	waitFn func(fd uintptr) bool // o.wait, bound once so that a wait allocates nothing
	onWait func()                // called before each wait (WaitNotifier); nil: none
}

func newOneshot(sock int, events uint32) (*oneshot, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil { // so that Go's poller takes it
		unix.Close(epfd)
		return nil, fmt.Errorf("set the epoll instance non-blocking: %w", err)
	}
	ep := os.NewFile(uintptr(epfd), "epoll")
	rc, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		return nil, err
	}
	o := &oneshot{sock: sock, events: events, ep: ep, rc: rc}
	o.ctl = unix.EpollEvent{Events: events | unix.EPOLLONESHOT, Fd: int32(sock)}
	o.waitFn = o.wait
	return o, nil
}

// do calls f with the socket until f reports done (false: EAGAIN),
// waiting for the socket between calls. After close it fails with the
// epoll file's error.
func (o *oneshot) do(f func(fd uintptr) bool) error {
	for !f(uintptr(o.sock)) {
		if err := o.await(); err != nil {
			return err
		}
	}
	return nil
}

// await waits until the socket has its event (or the epoll file is
// closed), telling onWait first.
func (o *oneshot) await() error {
	if o.onWait != nil {
		o.onWait()
	}
	o.armed, o.errno = false, 0
	if err := o.rc.Read(o.waitFn); err != nil {
		return err
	}
	if o.errno != 0 {
		return os.NewSyscallError("epoll_ctl", o.errno)
	}
	return nil
}

// wait is the epoll file's RawConn.Read callback: it arms the socket once,
// then reports whether its event has come (false: park until the epoll
// instance is readable). Right after arming it parks without asking: if
// the socket is readable by then, arming itself makes the instance
// readable and wakes Go's poller. So a wait costs one epoll_pwait, not
// two.
func (o *oneshot) wait(epfd uintptr) bool {
	if !o.armed {
		op := unix.EPOLL_CTL_MOD
		if !o.added {
			op = unix.EPOLL_CTL_ADD
		}
		if _, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, epfd, uintptr(op), uintptr(o.sock), uintptr(unsafe.Pointer(&o.ctl)), 0, 0); e != 0 {
			o.errno = e
			return true
		}
		o.added, o.armed = true, true
		return false
	}
	for {
		o.pwaits++
		n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, epfd, uintptr(unsafe.Pointer(&o.evs[0])), 1, 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		return e == 0 && n > 0
	}
}

// close closes the epoll instance, which wakes a do that waits.
func (o *oneshot) close() error { return o.ep.Close() }
