package simtcp_test

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/netsim"
	"github.com/wanopt/wanopt/internal/netsim/simtcp"
)

// path is a dumbbell's two bottleneck directions.
type path struct {
	fwd, rev netsim.LinkConfig
}

// symmetric returns a path of rateBps each way, rtt split evenly, with a
// forward queue of queueBDP BDPs and forward random loss of lossPct.
func symmetric(rateBps int64, rtt time.Duration, queueBDP, lossPct float64) path {
	bdp := float64(rateBps) / 8 * rtt.Seconds()
	fwd := netsim.LinkConfig{RateBps: rateBps, Delay: rtt / 2, QueueBytes: max(int(queueBDP*bdp), 3000), LossPercent: lossPct}
	return path{fwd: fwd, rev: netsim.LinkConfig{RateBps: rateBps, Delay: rtt / 2}}
}

// flowRun is one simtcp flow in a simulation.
type flowRun struct {
	snd *simtcp.Sender
	rcv *simtcp.Receiver
	id  netsim.FlowID
}

// newSim builds a dumbbell over p with one flow per config, all started at
// once, and returns the simulator, its links and the flows.
func newSim(seed uint64, p path, cfgs ...simtcp.Config) (*netsim.Sim, [2]*netsim.Link, []flowRun) {
	sim := netsim.New(seed)
	fwd, rev := sim.NewLink(p.fwd), sim.NewLink(p.rev)
	var flows []flowRun
	for _, c := range cfgs {
		s, r := simtcp.NewPair(c)
		flows = append(flows, flowRun{snd: s, rcv: r, id: sim.AddFlow(s, r, fwd, rev, netsim.FlowOptions{})})
	}
	return sim, [2]*netsim.Link{fwd, rev}, flows
}

// goodputBps measures the flows' in-order payload rates, in bits per second,
// between from and to (virtual time since the start).
func goodputBps(t *testing.T, sim *netsim.Sim, flows []flowRun, from, to time.Duration) []float64 {
	t.Helper()
	if err := sim.RunFor(from - sim.Elapsed()); err != nil {
		t.Fatalf("seed %d: %v", sim.Seed(), err)
	}
	b0 := make([]int64, len(flows))
	for i, f := range flows {
		b0[i] = f.rcv.Stats().DeliveredBytes
	}
	if err := sim.RunFor(to - from); err != nil {
		t.Fatalf("seed %d: %v", sim.Seed(), err)
	}
	out := make([]float64, len(flows))
	for i, f := range flows {
		out[i] = float64(f.rcv.Stats().DeliveredBytes-b0[i]) * 8 / (to - from).Seconds()
	}
	return out
}
