package fdtest

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Readable reports whether the descriptor behind rc would wake a poller
// for reading now (an epoll instance with an event, an expired timerfd).
// It fails t if rc cannot be polled.
func Readable(t testing.TB, rc syscall.RawConn) bool {
	t.Helper()
	var ready bool
	if err := rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		if err != nil {
			t.Errorf("poll: %v", err)
		}
		ready = n == 1 && fds[0].Revents&unix.POLLIN != 0
	}); err != nil {
		t.Fatal(err)
	}
	return ready
}
