package simtcp_test

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/netsim"
	"github.com/wanopt/wanopt/internal/netsim/netsimtest"
	"github.com/wanopt/wanopt/internal/netsim/simtcp"
)

func TestDeterministic(t *testing.T) {
	run := func(seed uint64) (simtcp.SenderStats, simtcp.ReceiverStats, [2]netsim.LinkStats) {
		p := symmetric(50e6, 60*time.Millisecond, 0.5, 0.5)
		p.rev.LossPercent = 1
		p.fwd.Jitter = time.Millisecond
		sim, links, flows := newSim(seed, p, simtcp.Config{TotalBytes: 10_000_000, DelayedAck: true},
			simtcp.Config{Controller: simtcp.NewReno(mss)})
		if err := sim.RunUntil(flows[0].rcv.Done, sim.Now().Add(time.Minute)); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		return flows[0].snd.Stats(), flows[0].rcv.Stats(), [2]netsim.LinkStats{links[0].Stats(), links[1].Stats()}
	}
	s1, r1, l1 := run(1)
	s2, r2, l2 := run(1)
	if s1 != s2 || r1 != r2 || l1 != l2 {
		t.Errorf("same seed, different runs:\n%+v %+v\n%+v %+v", s1, r1, s2, r2)
	}
	s3, r3, _ := run(2)
	if s3.Retransmits == s1.Retransmits && r3.Done == r1.Done {
		t.Errorf("seeds 1 and 2 gave the same run: %+v", s3)
	}
}

// saturatedTCP returns a sim with one endless CUBIC flow over 250 Mbit/s, 100
// ms RTT, a queue of one BDP and 64 MiB buffers.
func saturatedTCP() *netsim.Sim {
	cfg := simtcp.Config{SendBufferBytes: 64 << 20, ReceiveBufferBytes: 64 << 20}
	sim, _, _ := newSim(1, symmetric(250e6, 100*time.Millisecond, 1, 0), cfg)
	return sim
}

// flowDelivered returns the payload bytes delivered to flow 0's receiver.
func flowDelivered(sim *netsim.Sim) uint64 {
	return sim.FlowStats(0).ForwardBytes / wireSize * mss
}

func TestSteadyStateAllocatesNothing(t *testing.T) {
	netsimtest.NoSteadyAllocs(t, saturatedTCP(), 5*time.Second, 50*time.Millisecond, "a saturating TCP flow")
}

// BenchmarkCubic250Mbit simulates 10 s of a CUBIC flow filling a 250 Mbit/s,
// 100 ms path per op (about 208,000 segments), after a warm-up.
func BenchmarkCubic250Mbit(b *testing.B) {
	sim := saturatedTCP()
	netsimtest.Run(b, sim, 10*time.Second)
	d0 := flowDelivered(sim)
	netsimtest.Bench(b, sim, 10*time.Second)
	b.ReportMetric(float64(flowDelivered(sim)-d0)*8/(10*float64(b.N))/1e6, "delivered-Mbit/s")
}
