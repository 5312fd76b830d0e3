package wanem

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/wanopt/wanopt/internal/monotime"
)

// sleepUntil blocks the calling thread until clockNow() ≥ t with
// clock_nanosleep on an absolute CLOCK_MONOTONIC time: the kernel's
// high-resolution timers instead of the Go timer wheel, and no drift from
// a relative sleep interrupted by signals. The target is translated from
// clockNow (Go's monotonic clock, read through the vDSO) to
// CLOCK_MONOTONIC by reading both, so nothing assumes which clock Go uses;
// the translation error is the time between the two reads. clockNow is
// read first, so a thread preempted between them wakes late, never early
// (read the other way round it woke 78-125 µs early on a loaded host).
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

// prepareReleaserThread tunes the calling, locked OS thread for precise
// sleeps: a timer slack of 1 ns instead of the default 50 µs, which
// clock_nanosleep would otherwise add to every wake-up of a thread that
// is not real-time. The setting dies with the thread (see releaseLoop).
func prepareReleaserThread() {
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0) // best effort
}
