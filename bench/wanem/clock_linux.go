package wanem

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/wanopt/wanopt/internal/monotime"
)

// sleepUntil blocks the calling thread until clockNow() ≥ t with
// clock_nanosleep on an absolute CLOCK_MONOTONIC time: high-resolution
// timers, and no drift when a signal interrupts the sleep. The target is
// translated from clockNow to CLOCK_MONOTONIC by reading both, clockNow
// first, so a thread preempted between the reads wakes late, never early.
func sleepUntil(t monotime.Time) {
	d := t.Sub(clockNow())
	var mono unix.Timespec
	err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono)
	if d <= 0 {
		return
	}
	if err != nil { // never seen; sleep imprecisely rather than spin
		time.Sleep(d)
		return
	}
	ts := unix.NsecToTimespec(mono.Nano() + int64(d))
	for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil) == unix.EINTR {
	}
}

// prepareReleaserThread sets the calling, locked thread's timer slack to
// 1 ns instead of the default 50 µs. The setting dies with the thread.
func prepareReleaserThread() {
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0) // best effort
}
