package netsim_test

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/netsim"
	"github.com/wanopt/wanopt/internal/netsim/netsimtest"
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
	netsimtest.NoSteadyAllocs(t, saturated(1), time.Second, 20*time.Millisecond, "a saturated link")
}

// BenchmarkSaturatedLink simulates 10 s of a 250 Mbit/s, 100 ms link that
// 1500-byte datagrams saturate both ways per op (about 1.25 M events).
func BenchmarkSaturatedLink(b *testing.B) {
	sim := saturated(1)
	netsimtest.Run(b, sim, time.Second)
	netsimtest.Bench(b, sim, 10*time.Second)
}
