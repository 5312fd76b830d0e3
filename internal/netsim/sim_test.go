package netsim_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/netsim"
)

// scripted is an endpoint whose k-th poll reports NextTimeout timeouts[k] (0
// past the end). It logs HandleTimeout calls.
type scripted struct {
	timeouts []monotime.Time
	polls    int
	fired    []monotime.Time
}

func (s *scripted) HandleDatagram(monotime.Time, []byte)   {}
func (s *scripted) PollTransmit(monotime.Time, []byte) int { return 0 }
func (s *scripted) HandleTimeout(now monotime.Time)        { s.fired = append(s.fired, now) }
func (s *scripted) NextTimeout() monotime.Time {
	k := s.polls
	s.polls++
	if k < len(s.timeouts) {
		return s.timeouts[k]
	}
	return 0
}

func TestTimerMovesInPlace(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	sim := netsim.New(1)
	t0 := sim.Now()
	at := func(n int) monotime.Time { return t0.Add(ms(n)) }
	// First poll (flow start) asks for 100 ms; a wake at 10 ms moves it to
	// 50 ms; a wake at 20 ms moves it later to 70 ms; it fires at 70 ms, asks
	// for 90 ms, and the wake at 80 ms cancels it.
	e := &scripted{timeouts: []monotime.Time{at(100), at(50), at(70), at(90), 0}}
	f := sim.AddFlow(e, &scripted{}, sim.NewLink(netsim.LinkConfig{}), sim.NewLink(netsim.LinkConfig{}), netsim.FlowOptions{})
	for _, w := range []int{10, 20, 80} {
		sim.At(at(w), func() { sim.Wake(f) })
	}
	if err := sim.RunFor(time.Second); err != nil {
		t.Fatal(err)
	}
	if want := []monotime.Time{at(70)}; !slices.Equal(e.fired, want) {
		t.Errorf("timeouts fired at %v, want %v", e.fired, want)
	}
}

func TestAtOrderAndRunUntil(t *testing.T) {
	sim := netsim.New(1)
	t0 := sim.Now()
	var order []int
	for i, d := range []time.Duration{30, 10, 30, 20, 10} {
		sim.At(t0.Add(d*time.Millisecond), func() { order = append(order, i) })
	}
	// A callback scheduling another for the same instant runs it after the
	// ones already due; one for the past runs now.
	sim.At(t0.Add(20*time.Millisecond), func() {
		sim.At(t0, func() { order = append(order, 9) })
	})
	err := sim.RunUntil(func() bool { return len(order) == 4 }, t0.Add(time.Second))
	if err != nil || sim.Now() != t0.Add(20*time.Millisecond) {
		t.Fatalf("RunUntil = %v at %v, want nil at 20ms", err, sim.Elapsed())
	}
	err = sim.RunUntil(func() bool { return false }, t0.Add(500*time.Millisecond))
	if !errors.Is(err, netsim.ErrDeadline) || sim.Now() != t0.Add(500*time.Millisecond) {
		t.Fatalf("RunUntil = %v at %v, want ErrDeadline at 500ms", err, sim.Elapsed())
	}
	if want := []int{1, 4, 3, 9, 0, 2}; !slices.Equal(order, want) {
		t.Errorf("callbacks ran in order %v, want %v", order, want)
	}
}

func TestValidate(t *testing.T) {
	bad := []netsim.LinkConfig{
		{RateBps: -1},
		{Delay: -time.Millisecond},
		{LossPercent: 101},
		{ReorderPercent: 5},
		{Burst: netsim.GilbertElliott{LeaveBadPercent: -1}},
		{Outages: []netsim.Outage{{Start: 2, End: 1}}},
	}
	for _, c := range bad {
		if err := c.Validate(); !errors.Is(err, netsim.ErrBadConfig) {
			t.Errorf("Validate(%+v) = %v, want ErrBadConfig", c, err)
		}
	}
	if err := (netsim.LinkConfig{RateBps: 1e6, ReorderPercent: 1, ReorderDelay: 1}).Validate(); err != nil {
		t.Errorf("valid config rejected: %v", err)
	}
}
