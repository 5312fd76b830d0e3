// Package netsimtest holds the checks that the simulator's own tests and
// the tests of the endpoints built on it share: a steady state that
// allocates nothing, and the benchmark figures of a simulated run.
package netsimtest

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/netsim"
)

// Run runs sim for d and fails tb if the run fails.
func Run(tb testing.TB, sim *netsim.Sim, d time.Duration) {
	tb.Helper()
	if err := sim.RunFor(d); err != nil {
		tb.Fatal(err)
	}
}

// NoSteadyAllocs runs sim for warm, then fails t unless a further run of
// step allocates nothing; what names the traffic in the message.
func NoSteadyAllocs(t *testing.T, sim *netsim.Sim, warm, step time.Duration, what string) {
	t.Helper()
	Run(t, sim, warm)
	if n := testing.AllocsPerRun(3, func() { Run(t, sim, step) }); n != 0 {
		t.Errorf("%.1f allocations per %v of %s, want 0", n, step, what)
	}
}

// Bench runs sim for per in each iteration of b and reports the events
// and the simulated seconds per wall-clock second. Warm sim up first.
func Bench(b *testing.B, sim *netsim.Sim, per time.Duration) {
	b.ReportAllocs()
	e0 := sim.Events()
	for b.Loop() {
		Run(b, sim, per)
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(sim.Events()-e0)/sec, "events/s")
	b.ReportMetric(per.Seconds()*float64(b.N)/sec, "sim-s/s")
}
