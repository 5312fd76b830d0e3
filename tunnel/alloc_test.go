package tunnel

import (
	"runtime"
	"testing"
	"time"
)

// TestSteadyStateAllocations runs a bulk transfer in both directions over
// 1 % loss, lets every buffer, ring and pool reach its working size, and
// then counts heap allocations per packet over one simulated second. The
// count covers everything on the path of a packet: PollTransmit,
// HandleDatagram, ACK processing, loss recovery, the stream buffers, the
// event queue, the test's application driver and the simulator itself.
func TestSteadyStateAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	path := pathConfig{rateBps: 100_000_000, rtt: 40 * time.Millisecond, lossPct: 1}
	n := newTestNet(t, 31, path, nil)
	bulkNet(n, 1<<40, false, 2)
	// Warm-up: rings, pools and maps grow to their working sizes.
	n.sim.RunFor(6 * time.Second)
	stopKeeping(n)

	var before, after runtime.MemStats
	fs0 := n.sim.FlowStats(n.flow)
	runtime.GC()
	runtime.ReadMemStats(&before)
	n.sim.RunFor(time.Second)
	runtime.ReadMemStats(&after)
	fs1 := n.sim.FlowStats(n.flow)
	pkts := (fs1.ForwardPackets - fs0.ForwardPackets) + (fs1.ReversePackets - fs0.ReversePackets)
	allocs := after.Mallocs - before.Mallocs
	perPkt := float64(allocs) / float64(pkts)
	t.Logf("%d allocations for %d packets delivered (%.4f per packet)", allocs, pkts, perPkt)
	if pkts < 10000 {
		t.Fatalf("only %d packets in the measured second", pkts)
	}
	if perPkt > 0.001 {
		t.Errorf("%.4f allocations per packet in steady state, want 0", perPkt)
	}
	// The same with testing.AllocsPerRun: each run is 2 ms of simulated
	// time, about 40 packets.
	if a := testing.AllocsPerRun(100, func() { n.sim.RunFor(2 * time.Millisecond) }); a != 0 {
		t.Errorf("AllocsPerRun: %v allocations per 2 ms of transfer, want 0", a)
	}
}

// stopKeeping stops the endpoints from recording events (which grows a
// slice) so that only the connection's own allocations are counted.
func stopKeeping(n *testNet) {
	n.client.noKeep, n.server.noKeep = true, true
}

// BenchmarkBulkPackets measures the CPU cost of moving one packet through
// both Conns (seal, open, ACK, recovery, streams) and the simulator, with
// -benchmem showing that the packet path does not allocate.
func BenchmarkBulkPackets(b *testing.B) {
	path := pathConfig{rateBps: 1_000_000_000, rtt: 20 * time.Millisecond}
	n := newTestNet(b, 32, path, nil)
	bulkNet(n, 1<<40, false, 4)
	n.sim.RunFor(2 * time.Second)
	stopKeeping(n)
	fs0 := n.sim.FlowStats(n.flow)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		n.sim.RunFor(100 * time.Microsecond)
	}
	b.StopTimer()
	fs1 := n.sim.FlowStats(n.flow)
	pkts := (fs1.ForwardPackets - fs0.ForwardPackets) + (fs1.ReversePackets - fs0.ReversePackets)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(pkts), "ns/packet")
}
