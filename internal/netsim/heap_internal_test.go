package netsim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// TestHeapAgainstSort drives the heap with random pushes, pops, timer moves
// and removals and checks it against a sorted reference.
func TestHeapAgainstSort(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		r := rand.New(rand.NewPCG(seed, 0))
		const timers = 8
		h := eventHeap{timerP: slices.Repeat([]int32{-1}, timers)}
		var ref []event // events alive, any order
		var seq uint64
		check := func() {
			for i := range h.ev {
				if i > 0 && h.ev[i].less(&h.ev[(i-1)/2]) {
					t.Fatalf("seed %d: heap order broken at %d", seed, i)
				}
				if e := h.ev[i]; e.kind == evTimer && h.timerP[e.id] != int32(i) {
					t.Fatalf("seed %d: timer %d at %d, recorded at %d", seed, e.id, i, h.timerP[e.id])
				}
			}
		}
		for range 5000 {
			switch op := r.IntN(10); {
			case op < 4:
				seq++
				e := event{at: monotime.Time(r.IntN(50)), seq: seq, kind: evCall}
				h.push(e)
				ref = append(ref, e)
			case op < 6:
				id := int32(r.IntN(timers))
				seq++
				at := monotime.Time(r.IntN(50))
				if p := h.timerP[id]; p >= 0 {
					i := slices.IndexFunc(ref, func(e event) bool { return e.kind == evTimer && e.id == id })
					ref[i].at, ref[i].seq = at, seq
					h.ev[p].at, h.ev[p].seq = at, seq
					h.fix(int(p))
				} else {
					e := event{at: at, seq: seq, kind: evTimer, id: id}
					h.push(e)
					ref = append(ref, e)
				}
			case op < 7:
				id := int32(r.IntN(timers))
				if p := h.timerP[id]; p >= 0 {
					h.remove(int(p))
					ref = slices.DeleteFunc(ref, func(e event) bool { return e.kind == evTimer && e.id == id })
				}
			default:
				if len(ref) == 0 {
					continue
				}
				got := h.pop()
				i := 0
				for j := range ref {
					if ref[j].less(&ref[i]) {
						i = j
					}
				}
				if got != ref[i] {
					t.Fatalf("seed %d: popped %+v, want %+v", seed, got, ref[i])
				}
				ref = slices.Delete(ref, i, i+1)
			}
			check()
			if len(ref) != h.len() {
				t.Fatalf("seed %d: heap has %d events, want %d", seed, h.len(), len(ref))
			}
		}
	}
}

func TestHistogram(t *testing.T) {
	var h delayHist
	for v := range 100_000 {
		h.record(time.Duration(v * 100)) // 0 .. 10 ms uniformly
	}
	s := h.stats()
	for _, c := range []struct {
		got, want time.Duration
	}{{s.P50, 5_000_000}, {s.P95, 9_500_000}, {s.P99, 9_900_000}, {s.Max, 9_999_900}, {s.Mean, 4_999_950}} {
		if d := c.got - c.want; d < -c.want/100 || d > c.want/100 {
			t.Errorf("got %v, want %v ± 1%%", c.got, c.want)
		}
	}
	for _, v := range []uint64{0, 1, 127, 128, 255, 256, 1 << 20, 1<<40 - 1} {
		i := histIndex(v)
		lo, w := histLow(i)
		if v < lo || v >= lo+w {
			t.Errorf("value %d in bucket %d = [%d, %d)", v, i, lo, lo+w)
		}
	}
}
