package driver

import (
	"testing"
	"time"
)

func startAlarm(t *testing.T) *alarm {
	t.Helper()
	a := newAlarm()
	if a == nil {
		t.Fatal("no timerfd")
	}
	done := make(chan struct{})
	go a.wait(done)
	t.Cleanup(func() {
		a.close()
		<-done
	})
	return a
}

// An alarm moved later fires once, at the later instant: the earlier one
// wakes nobody (the point of arming a timerfd in place).
func TestAlarmMovedLater(t *testing.T) {
	a := startAlarm(t)
	start := time.Now()
	if !a.set(2 * time.Millisecond) {
		t.Fatal("set failed")
	}
	if !a.set(40 * time.Millisecond) {
		t.Fatal("set failed")
	}
	select {
	case <-a.C:
	case <-time.After(10 * time.Second):
		t.Fatal("no expiry in 10 s")
	}
	if el := time.Since(start); el < 40*time.Millisecond {
		t.Fatalf("fired after %v, want at least the 40 ms it was moved to", el)
	}
	select {
	case <-a.C:
		t.Fatal("a second expiry: the earlier instant fired too")
	case <-time.After(20 * time.Millisecond):
	}
}

// An alarm moved earlier fires at the earlier instant.
func TestAlarmMovedEarlier(t *testing.T) {
	a := startAlarm(t)
	start := time.Now()
	a.set(time.Hour)
	a.set(3 * time.Millisecond)
	select {
	case <-a.C:
	case <-time.After(10 * time.Second):
		t.Fatal("no expiry in 10 s: the hour's instant stayed")
	}
	if el := time.Since(start); el < 3*time.Millisecond {
		t.Fatalf("fired after %v, before its 3 ms", el)
	}
}

func TestAlarmStop(t *testing.T) {
	a := startAlarm(t)
	a.set(time.Millisecond)
	if !a.stop() {
		t.Fatal("stop failed")
	}
	select {
	case <-a.C:
		t.Fatal("a stopped alarm fired")
	case <-time.After(30 * time.Millisecond):
	}
	a.set(0) // at once
	select {
	case <-a.C:
	case <-time.After(10 * time.Second):
		t.Fatal("set(0) did not fire")
	}
}

func TestAlarmCloseEndsWait(t *testing.T) {
	a := newAlarm()
	if a == nil {
		t.Fatal("no timerfd")
	}
	done := make(chan struct{})
	go a.wait(done)
	a.set(time.Hour)
	a.close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("wait did not return after close")
	}
}

func TestAlarmSetAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	a := startAlarm(t)
	d := time.Hour
	if n := testing.AllocsPerRun(100, func() {
		d += time.Millisecond
		a.set(d)
		a.stop()
	}); n != 0 {
		t.Fatalf("%.1f allocations per set and stop, want 0", n)
	}
}
