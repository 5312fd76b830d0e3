package simtcp_test

import (
	"fmt"
	"time"

	"github.com/wanopt/wanopt/internal/netsim"
	"github.com/wanopt/wanopt/internal/netsim/simtcp"
)

// Transfer 10 MB with CUBIC over 50 Mbit/s and 40 ms RTT, one BDP of queue.
func Example() {
	sim := netsim.New(1)
	fwd := sim.NewLink(netsim.LinkConfig{RateBps: 50e6, Delay: 20 * time.Millisecond, QueueBytes: 250_000})
	rev := sim.NewLink(netsim.LinkConfig{RateBps: 50e6, Delay: 20 * time.Millisecond})
	snd, rcv := simtcp.NewPair(simtcp.Config{TotalBytes: 10_000_000})
	sim.AddFlow(snd, rcv, fwd, rev, netsim.FlowOptions{})
	if err := sim.RunUntil(rcv.Done, sim.Now().Add(time.Minute)); err != nil {
		fmt.Println(err)
		return
	}
	st := snd.Stats()
	took := rcv.Stats().Done.Sub(st.Start)
	fmt.Printf("%d bytes in %v (%.1f Mbit/s), %d retransmitted\n",
		rcv.Stats().DeliveredBytes, took.Round(time.Millisecond),
		float64(rcv.Stats().DeliveredBytes)*8/took.Seconds()/1e6, st.Retransmits)
	// Output: 10000000 bytes in 1.806s (44.3 Mbit/s), 409 retransmitted
}
