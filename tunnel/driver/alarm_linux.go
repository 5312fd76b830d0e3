package driver

import (
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// alarm is the driver's timer on Linux: a timerfd that the driver
// goroutine arms and moves in place, and a goroutine (wait) parked on it
// in Go's poller that passes each expiry on to C. Moving a deadline is
// one system call and wakes nobody. A Go timer reset to a later instant
// keeps the earlier one in the runtime's timer heap until it passes, and
// the runtime wakes for it: the near edge's gathering reads push their
// quiet deadline a few milliseconds ahead with every batch they take
// (about 565 resets a second at 250 Mbit/s), and its runtime woke for
// about 214 of those stale instants a second with nothing to run. A
// timerfd also fires within tens of microseconds where a Go timer
// shorter than a millisecond fires 1-2 ms late (see the package doc).
//
// Its system calls are raw, like the sleeper's: made through the
// scheduler, they wake the runtime's monitor thread.
type alarm struct {
	f  *os.File
	rc syscall.RawConn
	C  chan struct{} // capacity 1: one or more expiries since the last receive

	spec    unix.ItimerSpec // set's argument (driver goroutine)
	setErr  syscall.Errno   // set's result (driver goroutine)
	readErr syscall.Errno   // read's result (wait goroutine)
	buf     [8]byte         // read's expiry count (wait goroutine)
	setFn   func(fd uintptr)
	readFn  func(fd uintptr) bool
}

// newAlarm opens the timerfd, or returns nil where there is none (the
// driver then uses its Go timer).
func newAlarm() *alarm {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), "timerfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil
	}
	a := &alarm{f: f, rc: rc, C: make(chan struct{}, 1)}
	a.setFn, a.readFn = a.settime, a.read
	return a
}

// set arms the alarm to expire d from now (at once if d <= 0), replacing
// any instant armed before, and reports whether the system call worked.
func (a *alarm) set(d time.Duration) bool {
	a.spec.Value = unix.NsecToTimespec(int64(max(d, 1))) // zero would disarm it
	return a.control()
}

// stop disarms the alarm. An expiry already passed on to C stays there.
func (a *alarm) stop() bool {
	a.spec.Value = unix.Timespec{}
	return a.control()
}

func (a *alarm) control() bool {
	if err := a.rc.Control(a.setFn); err != nil {
		return false
	}
	return a.setErr == 0
}

func (a *alarm) settime(fd uintptr) {
	_, _, a.setErr = unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, fd, 0, uintptr(unsafe.Pointer(&a.spec)), 0, 0, 0)
}

// read is wait's RawConn.Read callback: true once the timer has expired,
// false (park in the poller) while it has not. An instant moved later
// after it expired, before this read, clears the expiry: the read finds
// none and waits for the new instant.
func (a *alarm) read(fd uintptr) bool {
	for {
		_, _, a.readErr = unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&a.buf[0])), uintptr(len(a.buf)))
		if a.readErr != unix.EINTR {
			return a.readErr != unix.EAGAIN
		}
	}
}

// wait is the alarm's goroutine: it passes every expiry on to C until
// close, then closes done. A read that fails otherwise than by finding no
// expiry (not seen on a timerfd) is passed on as an expiry too, at most
// one a millisecond: the driver takes an early wake-up for what it is.
func (a *alarm) wait(done chan<- struct{}) {
	defer close(done)
	for {
		if err := a.rc.Read(a.readFn); err != nil {
			return // closed
		}
		if a.readErr != 0 {
			time.Sleep(time.Millisecond)
		}
		select {
		case a.C <- struct{}{}:
		default:
		}
	}
}

// close releases the timerfd, which ends wait.
func (a *alarm) close() { a.f.Close() }
