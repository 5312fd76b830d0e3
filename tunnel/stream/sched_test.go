package stream

import (
	"testing"
)

func TestSchedulerFairness(t *testing.T) {
	const quantum = 1350
	for seed := uint64(1); seed <= 5; seed++ {
		rng := newRand(t, seed)
		s := NewScheduler(quantum)
		ids := []uint64{0, 4, 9}
		for _, id := range ids {
			s.Add(id)
		}
		sent := map[uint64]int{}
		turns := 0
		// Streams with infinite data send frames of random sizes (up to a
		// quantum, as when a packet also carries other frames).
		for range 3 * 1000 {
			id, ok := s.Next()
			if !ok {
				t.Fatal("empty")
			}
			n := 1 + rng.IntN(quantum)
			sent[id] += n
			s.Charge(n)
			if next(s) == id {
				continue // the turn goes on
			}
			turns++
			// At the end of every round (each stream had the same number
			// of turns) the shares differ by less than one quantum.
			if turns%3 == 0 {
				lo, hi := sent[ids[0]], sent[ids[0]]
				for _, id := range ids {
					lo, hi = min(lo, sent[id]), max(hi, sent[id])
				}
				if hi-lo >= quantum {
					t.Fatalf("seed %d after %d turns: shares %v differ by %d >= quantum", seed, turns, sent, hi-lo)
				}
			}
		}
		if turns < 900 {
			t.Fatalf("only %d turns", turns)
		}
	}
}

// next returns the scheduler's current stream.
func next(s *Scheduler) uint64 {
	id, _ := s.Next()
	return id
}

func TestSchedulerJoinLeave(t *testing.T) {
	s := NewScheduler(100)
	order := func(n int) []uint64 {
		var got []uint64
		for range n {
			id, ok := s.Next()
			if !ok {
				break
			}
			got = append(got, id)
			s.Charge(100)
		}
		return got
	}
	eq := func(got, want []uint64) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("order %v, want %v", got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("order %v, want %v", got, want)
			}
		}
	}
	if _, ok := s.Next(); ok {
		t.Fatal("empty scheduler returned a stream")
	}
	s.Add(1)
	s.Add(2)
	s.Add(3)
	s.Add(2) // already in: no change
	eq(order(4), []uint64{1, 2, 3, 1})
	s.Add(4) // joins at the end of the round: after 1, before 2 whose turn it is
	eq(order(4), []uint64{2, 3, 1, 4})
	s.Remove(3)
	s.Remove(3)
	eq(order(3), []uint64{2, 1, 4})
	s.Remove(2) // the current stream leaves: the turn passes on
	eq(order(3), []uint64{1, 4, 1})
	s.Charge(10) // partial turn: 4 keeps it
	if id, _ := s.Next(); id != 4 {
		t.Fatalf("turn moved after a partial charge: %d", id)
	}
	s.Charge(0) // nothing sent: the turn ends
	if id, _ := s.Next(); id != 1 {
		t.Fatalf("turn kept after Charge(0): %d", id)
	}
	s.Remove(1)
	s.Remove(4)
	if _, ok := s.Next(); ok || s.Len() != 0 || s.Contains(4) {
		t.Fatal("not empty")
	}
	s.Add(7)
	eq(order(2), []uint64{7, 7})
}

func TestSchedulerAllocs(t *testing.T) {
	s := NewScheduler(1350)
	for id := range uint64(64) {
		s.Add(id)
	}
	var id uint64 = 64
	allocs := testing.AllocsPerRun(1000, func() {
		// Churn: one stream leaves, one joins, a few turns are taken.
		victim, _ := s.Next()
		s.Remove(victim)
		s.Add(id)
		id++
		for range 4 {
			s.Next()
			s.Charge(700)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per operation", allocs)
	}
}
