package driver

import (
	"syscall"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// havePreciseSleep reports whether sleepUntil is finer than Go timers.
const havePreciseSleep = true

// sleepUntil blocks the calling thread until the monotonic clock reaches
// t, with nanosleep(2): about 60 µs late (the kernel's timer slack),
// where a Go timer shorter than a millisecond fires after 1-2 ms on an
// idle runtime (its poller waits in whole milliseconds).
func sleepUntil(t monotime.Time) {
	for {
		d := t.Sub(monotime.Now())
		if d <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(int64(min(d, time.Second)))
		_ = syscall.Nanosleep(&ts, nil) // EINTR: loop and sleep the rest
	}
}
