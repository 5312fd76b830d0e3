package driver

import (
	"testing"
	"time"

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

// TestSleeperOneRead: a sleep reads its timerfd once, when it has
// expired, not first to hear EAGAIN (sleeper.read skips that read
// while the armed instant is still ahead).
func TestSleeperOneRead(t *testing.T) {
	s := newSleeper()
	defer s.close()
	if s.f == nil {
		t.Fatal("no timerfd: the sleeper fell back to nanosleep")
	}
	const sleeps = 50
	for range sleeps {
		s.until(monotime.Now().Add(500 * time.Microsecond))
	}
	// A sleep whose instant had passed by its first call reads once too,
	// one that found it passed before arming not at all (a loaded
	// machine); only a spurious wake-up reads more than once.
	if s.reads > sleeps*5/4 {
		t.Fatalf("%d timerfd reads for %d sleeps, want one each", s.reads, sleeps)
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
