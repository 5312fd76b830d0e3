package netsim_test

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/netsim"
)

// saturated returns a sim with one flow sending 1500-byte datagrams at
// 250 Mbit/s each way over links of 250 Mbit/s and 100 ms.
func saturated(seed uint64) *netsim.Sim {
	const rate = 250e6
	sim := netsim.New(seed)
	cfg := netsim.LinkConfig{RateBps: rate, Delay: 100 * time.Millisecond, QueueBytes: 1 << 20, LossPercent: 0.01}
	a := &cbr{size: 1500, interval: serTime(1500, rate)}
	b := &cbr{size: 1500, interval: serTime(1500, rate)}
	sim.AddFlow(a, b, sim.NewLink(cfg), sim.NewLink(cfg), netsim.FlowOptions{})
	return sim
}

func TestSteadyStateAllocatesNothing(t *testing.T) {
	sim := saturated(1)
	if err := sim.RunFor(time.Second); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(3, func() {
		if err := sim.RunFor(20 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%.1f allocations per 20 ms of a saturated link, want 0", n)
	}
}

// BenchmarkSaturatedLink simulates 10 s of a 250 Mbit/s, 100 ms link that
// 1500-byte datagrams saturate both ways per op (about 1.25 M events).
func BenchmarkSaturatedLink(b *testing.B) {
	sim := saturated(1)
	if err := sim.RunFor(time.Second); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	e0 := sim.Events()
	b.ResetTimer()
	for b.Loop() {
		if err := sim.RunFor(10 * time.Second); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(sim.Events()-e0)/sec, "events/s")
	b.ReportMetric(10*float64(b.N)/sec, "sim-s/s")
}
