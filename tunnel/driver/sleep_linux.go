package driver

import (
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wanopt/wanopt/internal/monotime"
)

// havePreciseSleep reports whether a sleeper is finer than Go timers.
const havePreciseSleep = true

// sleeper waits until a monotonic instant with sub-millisecond precision,
// where a Go timer shorter than a millisecond fires after 1-2 ms on an
// idle runtime (its poller waits in whole milliseconds). It arms a timerfd
// and reads it, so the waiting goroutine is parked in Go's poller and
// holds no P. A nanosleep(2) would hold the P in a system call: on one
// thread (GOMAXPROCS 1) the runtime's monitor takes the P away after 20
// µs, every sleep, and then keeps waking every 20 µs itself. Without a
// timerfd it falls back to nanosleep. One goroutine owns a sleeper.
//
// Arming and reading the timerfd are raw system calls (they never wait:
// the fd is non-blocking), because any system call made through the
// scheduler wakes the runtime's monitor from its idle sleep and sets it
// back to waking every 20 µs.
type sleeper struct {
	f        *os.File // nil: nanosleep
	rc       syscall.RawConn
	spec     unix.ItimerSpec
	errno    syscall.Errno
	setFn    func(fd uintptr)      // s.set, bound once so that arming allocates nothing
	readFn   func(fd uintptr) bool // s.read, likewise
	buf      [8]byte
	armedFor monotime.Time // the instant the armed timer expires at or after
	armed    bool          // no read has come since the timer was armed
	reads    uint64        // read(2) calls on the timerfd (tests)
}

func newSleeper() *sleeper {
	s := &sleeper{}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return s
	}
	f := os.NewFile(uintptr(fd), "timerfd") // non-blocking: reads park in the poller
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return s
	}
	s.f, s.rc = f, rc
	s.setFn, s.readFn = s.set, s.read
	return s
}

func (s *sleeper) set(fd uintptr) {
	_, _, s.errno = unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, fd, 0, uintptr(unsafe.Pointer(&s.spec)), 0, 0, 0)
}

// read is the RawConn.Read callback: false (wait in the poller) until the
// timer has expired. Its first call after arming, before the instant
// armed, returns false without a read(2), which would only say EAGAIN:
// the timer, armed for a span measured from before the arming call,
// cannot have expired, so its expiry wakes the poller after this call
// (which follows Go's reset of the fd's readiness). That halves the
// sleeper's reads (a far edge pacing at 250 Mbit/s sleeps about 1,000
// times a second).
func (s *sleeper) read(fd uintptr) bool {
	if s.armed {
		s.armed = false
		if monotime.Now().Before(s.armedFor) {
			return false
		}
	}
	for {
		s.reads++
		_, _, s.errno = unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&s.buf[0])), uintptr(len(s.buf)))
		if s.errno != unix.EINTR {
			return s.errno != unix.EAGAIN
		}
	}
}

// until returns when the monotonic clock reaches t (or at once if the
// timerfd fails, which the caller's loop then absorbs as a short sleep).
func (s *sleeper) until(t monotime.Time) {
	d := t.Sub(monotime.Now())
	if d <= 0 {
		return
	}
	if s.f == nil {
		nanosleep(t)
		return
	}
	s.spec.Value = unix.NsecToTimespec(int64(d))
	if err := s.rc.Control(s.setFn); err != nil || s.errno != 0 {
		nanosleep(t)
		return
	}
	s.armedFor, s.armed = t, true
	if err := s.rc.Read(s.readFn); err != nil || s.errno != 0 {
		nanosleep(t)
	}
}

// close releases the timerfd.
func (s *sleeper) close() {
	if s.f != nil {
		s.f.Close()
	}
}

// nanosleep blocks the thread until t: about 60 µs late (the kernel's
// timer slack).
func nanosleep(t monotime.Time) {
	for {
		d := t.Sub(monotime.Now())
		if d <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(int64(min(d, time.Second)))
		_ = syscall.Nanosleep(&ts, nil) // EINTR: loop and sleep the rest
	}
}
