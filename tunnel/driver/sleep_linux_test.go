package driver

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wanopt/wanopt/internal/fdtest"
	"github.com/wanopt/wanopt/internal/monotime"
)

func TestSleeperNeverEarly(t *testing.T) {
	s := newSleeper()
	defer s.close()
	if s.f == nil {
		t.Fatal("no timerfd: the sleeper fell back to nanosleep")
	}
	for _, d := range []time.Duration{-time.Millisecond, 0, 50 * time.Microsecond, 300 * time.Microsecond, 2 * time.Millisecond} {
		for range 20 {
			until := monotime.Now().Add(d)
			s.until(until)
			if now := monotime.Now(); now.Before(until) {
				t.Fatalf("sleep of %v returned %v early", d, until.Sub(now))
			}
		}
	}
}

// TestSleeperRearmClears: a sleep leaves its timerfd's expiry unread,
// and the next arming clears it, so the fd does not read as ready (a
// wake-up in Go's poller) before the new instant.
func TestSleeperRearmClears(t *testing.T) {
	s := newSleeper()
	defer s.close()
	if s.f == nil {
		t.Fatal("no timerfd: the sleeper fell back to nanosleep")
	}
	s.until(monotime.Now().Add(200 * time.Microsecond))
	time.Sleep(time.Millisecond) // the expiry, if not yet, has come
	if !timerfdReadable(t, s) {
		t.Fatal("the expired timerfd does not read as ready")
	}
	s.spec.Value = unix.NsecToTimespec(int64(time.Hour))
	if err := s.rc.Control(s.setFn); err != nil || s.errno != 0 {
		t.Fatalf("arming: %v, %v", err, s.errno)
	}
	if timerfdReadable(t, s) {
		t.Fatal("after arming again the timerfd still reads as ready: the old expiry was not cleared")
	}
}

func timerfdReadable(t *testing.T, s *sleeper) bool {
	t.Helper()
	return fdtest.Readable(t, s.rc)
}

// TestSleeperWakesOnce: a sleep is one call of read before it parks and
// one when its expiry wakes it; more only after a stray wake-up.
func TestSleeperWakesOnce(t *testing.T) {
	s := newSleeper()
	defer s.close()
	if s.f == nil {
		t.Fatal("no timerfd: the sleeper fell back to nanosleep")
	}
	const sleeps = 50
	for range sleeps {
		s.until(monotime.Now().Add(500 * time.Microsecond))
	}
	if s.calls > sleeps*2*5/4 {
		t.Fatalf("%d calls for %d sleeps, want about two each", s.calls, sleeps)
	}
}

func TestSleeperAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	s := newSleeper()
	defer s.close()
	if n := testing.AllocsPerRun(50, func() { s.until(monotime.Now().Add(100 * time.Microsecond)) }); n != 0 {
		t.Fatalf("%.1f allocations per sleep, want 0", n)
	}
}

// The sleeper's fallback is a plain nanosleep: also never early.
func TestNanosleepNeverEarly(t *testing.T) {
	until := monotime.Now().Add(200 * time.Microsecond)
	nanosleep(until)
	if now := monotime.Now(); now.Before(until) {
		t.Fatalf("returned %v early", until.Sub(now))
	}
}
