package ring

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestAgainstSlice drives a Ring and a plain slice with the same random
// pushes and pops, from a zero Ring and from New, and checks that they
// always hold the same elements in the same order.
func TestAgainstSlice(t *testing.T) {
	for _, tc := range []struct {
		name string
		ring Ring[int]
	}{
		{"zero", Ring[int]{}},
		{"new-1", New[int](1)},
		{"new-5", New[int](5)},
		{"new-64", New[int](64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.ring
			var want []int
			rnd := rand.New(rand.NewPCG(1, 2))
			next := 0
			for step := range 20_000 {
				// Phases that grow, then shrink, then hover.
				pushBias := []int{70, 30, 50}[step/2000%3]
				if len(want) == 0 || rnd.IntN(100) < pushBias {
					r.PushBack(next)
					want = append(want, next)
					next++
					if got := *r.Back(); got != next-1 {
						t.Fatalf("step %d: Back %d after PushBack(%d)", step, got, next-1)
					}
				} else {
					if got := r.PopFront(); got != want[0] {
						t.Fatalf("step %d: PopFront %d, want %d", step, got, want[0])
					}
					want = want[1:]
				}
				if r.Len() != len(want) {
					t.Fatalf("step %d: Len %d, want %d", step, r.Len(), len(want))
				}
				if c := r.Cap(); c < r.Len() || c&(c-1) != 0 {
					t.Fatalf("step %d: Cap %d with Len %d, want a power of two >= Len", step, c, r.Len())
				}
				if len(want) > 0 && *r.Front() != want[0] {
					t.Fatalf("step %d: Front %d, want %d", step, *r.Front(), want[0])
				}
				if step%97 == 0 {
					for i, w := range want {
						if got := *r.At(i); got != w {
							t.Fatalf("step %d: At(%d) = %d, want %d", step, i, got, w)
						}
					}
				}
			}
		})
	}
}

// TestNewCapacity: New rounds the capacity up to a power of two and the
// ring does not grow before it is full.
func TestNewCapacity(t *testing.T) {
	for _, tc := range []struct {
		name      string
		capacity  int
		wantCap   int
		pushCount int
	}{
		{"zero", 0, 1, 1},
		{"one", 1, 1, 1},
		{"three", 3, 4, 4},
		{"exact", 64, 64, 64},
		{"above", 65, 128, 128},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New[int](tc.capacity)
			for i := range tc.pushCount {
				r.PushBack(i)
			}
			if r.Cap() != tc.wantCap {
				t.Fatalf("Cap %d after %d pushes, want %d", r.Cap(), tc.pushCount, tc.wantCap)
			}
			r.PushBack(-1)
			if r.Cap() != 2*tc.wantCap {
				t.Fatalf("Cap %d after one more push, want %d", r.Cap(), 2*tc.wantCap)
			}
		})
	}
}

// TestAtMutates: At returns a pointer into the ring.
func TestAtMutates(t *testing.T) {
	r := New[[2]int](4)
	for i := range 3 {
		r.PushBack([2]int{i, 0})
	}
	r.At(1)[1] = 7
	r.Front()[1] = 5
	if got := r.PopFront(); got != [2]int{0, 5} {
		t.Fatalf("front %v, want [0 5]", got)
	}
	if got := r.PopFront(); got != [2]int{1, 7} {
		t.Fatalf("second %v, want [1 7]", got)
	}
}

// TestPopFrontZeroes: a popped slot keeps no reference to its element.
func TestPopFrontZeroes(t *testing.T) {
	r := New[*int](2)
	x := new(int)
	r.PushBack(x)
	r.PopFront()
	for i := range r.buf {
		if r.buf[i] != nil {
			t.Fatalf("slot %d still holds %p after PopFront", i, r.buf[i])
		}
	}
}

// TestPanics: out-of-range access and popping an empty ring panic.
func TestPanics(t *testing.T) {
	r := New[int](4)
	r.PushBack(1)
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"At(-1)", func() { r.At(-1) }},
		{"At(Len)", func() { r.At(1) }},
		{"PopFront of empty", func() { var e Ring[int]; e.PopFront() }},
		{"Front of empty", func() { var e Ring[int]; e.Front() }},
		{"Back of empty", func() { var e Ring[int]; e.Back() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			tc.f()
		})
	}
}

// TestSteadyStateAllocFree: once the ring has grown to the queue's
// working size, pushes and pops do not allocate.
func TestSteadyStateAllocFree(t *testing.T) {
	var r Ring[record]
	for i := range 1000 {
		r.PushBack(record{seq: uint64(i)})
	}
	allocs := testing.AllocsPerRun(10_000, func() {
		r.PushBack(record{seq: 1})
		r.At(r.Len()/2).n++
		r.PopFront()
	})
	if allocs != 0 {
		t.Fatalf("%.2f allocations per push and pop in steady state", allocs)
	}
}

// record is the size of a typical element (a sent frame's record).
type record struct {
	kind      uint8
	n         uint32
	seq, off  uint64
	code, pad uint64
}

// BenchmarkPushPop measures a queue that holds about depth elements:
// one PushBack, one At and one PopFront per operation. In steady state it
// allocates nothing (-benchmem: 0 B/op, 0 allocs/op).
func BenchmarkPushPop(b *testing.B) {
	for _, depth := range []int{16, 1024} {
		b.Run("depth"+strconv.Itoa(depth), func(b *testing.B) {
			var r Ring[record]
			for i := range depth {
				r.PushBack(record{seq: uint64(i)})
			}
			b.ReportAllocs()
			i := uint64(0)
			for b.Loop() {
				r.PushBack(record{seq: i})
				r.At(r.Len()-1).n++
				r.PopFront()
				i++
			}
		})
	}
}

// BenchmarkGrow measures filling a zero Ring with 4096 elements and
// draining it: the cost of growing by doubling.
func BenchmarkGrow(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		var r Ring[record]
		for i := range 4096 {
			r.PushBack(record{seq: uint64(i)})
		}
		for r.Len() > 0 {
			r.PopFront()
		}
	}
}
