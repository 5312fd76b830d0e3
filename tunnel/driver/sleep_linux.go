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
// idle runtime. It arms a timerfd and waits for it in Go's poller, so
// the waiting goroutine holds no P; a nanosleep(2) would hold the P in a
// system call, and on one thread (GOMAXPROCS 1) the runtime's monitor
// would take it away after 20 µs every sleep. Without a timerfd it falls
// back to nanosleep. One goroutine owns a sleeper.
//
// Arming the timerfd is a raw system call (it never waits): a system
// call made through the scheduler sets the runtime's monitor back to
// waking every 20 µs. The timerfd is never read: the next arming resets
// its expiry count (timerfd_settime(2)), so a sleep costs one system
// call, not two.
type sleeper struct {
	f        *os.File // nil: nanosleep
	rc       syscall.RawConn
	spec     unix.ItimerSpec
	errno    syscall.Errno
	setFn    func(fd uintptr)      // s.set, bound once so that arming allocates nothing
	readFn   func(fd uintptr) bool // s.read, likewise
	armedFor monotime.Time         // the instant the armed timer expires at or after
	calls    uint64                // read calls: one, then one per wake-up (tests)
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
// clock has reached the armed instant. It reads nothing: the timer
// expires at or after that instant on the same clock, so while the clock
// is short of it the poller's wake-up is still to come. A wake-up left
// from an earlier arming only brings another call.
func (s *sleeper) read(fd uintptr) bool {
	s.calls++
	return !monotime.Now().Before(s.armedFor)
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
	s.armedFor = t
	if err := s.rc.Read(s.readFn); err != nil {
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
