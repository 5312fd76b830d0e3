package netsim_test

import (
	"math"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/netsim"
)

// serTime is the serialisation time of b bytes at rateBps, rounded up.
func serTime(b int, rateBps int64) time.Duration {
	return time.Duration((int64(b)*8*int64(time.Second) + rateBps - 1) / rateBps)
}

// oneWay builds a sim with one flow whose left endpoint is src and right
// endpoint dst, over fwd (and an ideal reverse link).
func oneWay(seed uint64, fwd netsim.LinkConfig, src, dst *cbr, opts netsim.FlowOptions) (*netsim.Sim, *netsim.Link) {
	sim := netsim.New(seed)
	l := sim.NewLink(fwd)
	sim.AddFlow(src, dst, l, sim.NewLink(netsim.LinkConfig{}), opts)
	return sim, l
}

func TestLinkRateAndQueueDrops(t *testing.T) {
	tests := []struct {
		name       string
		rateBps    int64
		size       int
		overhead   int
		queueBytes int
		load       float64 // offered / link rate
	}{
		{"1Mbit", 1e6, 1200, 0, 30_000, 1.5},
		{"10Mbit overhead", 10e6, 1400, 28, 100_000, 1.2},
		{"250Mbit", 250e6, 1500, 0, 375_000, 1.1},
		{"50Mbit small datagrams", 50e6, 100, 0, 20_000, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const seed = 1
			wire := tc.size + tc.overhead
			interval := time.Duration(float64(serTime(wire, tc.rateBps)) / tc.load)
			src := &cbr{size: tc.size, interval: interval}
			dst := &cbr{}
			sim, l := oneWay(seed, netsim.LinkConfig{
				RateBps: tc.rateBps, Delay: 10 * time.Millisecond,
				QueueBytes: tc.queueBytes, OverheadBytes: tc.overhead,
			}, src, dst, netsim.FlowOptions{})
			src.stop = sim.Now().Add(3 * time.Second)
			if err := sim.RunFor(time.Second); err != nil {
				t.Fatal(err)
			}
			b0 := dst.bytes
			if err := sim.RunFor(time.Second); err != nil {
				t.Fatal(err)
			}
			gotBps := float64(dst.bytes-b0) * 8 * float64(wire) / float64(tc.size)
			if rel := math.Abs(gotBps/float64(tc.rateBps) - 1); rel > 0.005 {
				t.Errorf("seed %d: delivered %.0f bit/s on the wire, link rate %d (off by %.2f%%)",
					seed, gotBps, tc.rateBps, rel*100)
			}
			if err := sim.RunFor(5 * time.Second); err != nil { // sender stops at 3 s; drain
				t.Fatal(err)
			}
			st := l.Stats()
			if st.QueueDrops == 0 {
				t.Errorf("offered %.1fx the rate into a bounded queue but no drops: %+v", tc.load, st)
			}
			if st.MaxQueueBytes > tc.queueBytes || st.MaxQueueBytes < tc.queueBytes-wire {
				t.Errorf("MaxQueueBytes = %d, want within one packet below %d", st.MaxQueueBytes, tc.queueBytes)
			}
			if uint64(src.sent) != st.OfferedPackets || st.OfferedPackets != st.QueueDrops+st.DeliveredPackets ||
				st.DeliveredPackets != uint64(dst.n) || st.QueueBytes != 0 {
				t.Errorf("counters do not add up: sent %d, received %d, %+v", src.sent, dst.n, st)
			}
			// What got through is what the link serialised in the 3 s the
			// sender ran, plus the full queue left behind at the end.
			want := float64(3*time.Second)/float64(serTime(wire, tc.rateBps)) + float64(tc.queueBytes/wire)
			if got := float64(st.DeliveredPackets); math.Abs(got-want) > 2+want*0.001 {
				t.Errorf("delivered %.0f packets, want %.0f", got, want)
			}
		})
	}
}

func TestDelayExact(t *testing.T) {
	tests := []struct {
		name    string
		cfg     netsim.LinkConfig
		extra   time.Duration
		size    int
		wantOWD time.Duration
	}{
		{"infinite rate", netsim.LinkConfig{Delay: 300 * time.Millisecond}, 0, 1000, 300 * time.Millisecond},
		{"rate adds serialisation", netsim.LinkConfig{RateBps: 250e6, Delay: 300 * time.Millisecond}, 0, 1500,
			300*time.Millisecond + 48*time.Microsecond},
		{"odd rate rounds up", netsim.LinkConfig{RateBps: 3e6, Delay: time.Millisecond}, 0, 16,
			time.Millisecond + 42667*time.Nanosecond},
		{"flow extra delay", netsim.LinkConfig{RateBps: 10e6, Delay: 50 * time.Millisecond}, 25 * time.Millisecond, 1250,
			75*time.Millisecond + time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Packets 100 ms apart never queue; both directions use cfg.
			sim := netsim.New(1)
			a := &cbr{size: tc.size, interval: 100 * time.Millisecond, limit: 20, sink: sink{keep: true}}
			b := &cbr{size: tc.size, interval: 100 * time.Millisecond, limit: 20, sink: sink{keep: true}}
			sim.AddFlow(a, b, sim.NewLink(tc.cfg), sim.NewLink(tc.cfg), netsim.FlowOptions{ExtraDelay: tc.extra})
			if err := sim.RunFor(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			for _, got := range [][]arrival{a.got, b.got} {
				if len(got) != 20 {
					t.Fatalf("received %d datagrams, want 20", len(got))
				}
				for _, r := range got {
					if d := r.at.Sub(r.sentAt); d != tc.wantOWD {
						t.Fatalf("datagram %d took %v, want exactly %v", r.seq, d, tc.wantOWD)
					}
				}
			}
		})
	}
}

func TestQueueDelayPercentiles(t *testing.T) {
	const rate = 100e6
	tests := []struct {
		name       string
		load       float64
		queueBytes int
		want       time.Duration // p50 and p99
	}{
		{"underloaded never queues", 0.5, 100_000, 0},
		// Overloaded 2x: the queue stays full, so every admitted packet
		// waits for a full queue ahead of it, within one packet.
		{"overloaded waits a full queue", 2, 250_000, serTime(250_000, rate)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := &cbr{size: 1000, interval: time.Duration(float64(serTime(1000, rate)) / tc.load)}
			sim, l := oneWay(1, netsim.LinkConfig{RateBps: rate, QueueBytes: tc.queueBytes}, src, &cbr{}, netsim.FlowOptions{})
			// Measure only after the queue has filled.
			sim.At(sim.Now().Add(500*time.Millisecond), l.ResetQueueDelay)
			if err := sim.RunFor(2 * time.Second); err != nil {
				t.Fatal(err)
			}
			qd := l.QueueDelay()
			if qd.Count < 1000 {
				t.Fatalf("only %d samples", qd.Count)
			}
			tol := serTime(1000, rate) + tc.want/100
			for name, got := range map[string]time.Duration{"p50": qd.P50, "p95": qd.P95, "p99": qd.P99, "max": qd.Max} {
				if got < tc.want-tol || got > tc.want+tol {
					t.Errorf("%s = %v, want %v ± %v (%+v)", name, got, tc.want, tol, qd)
				}
			}
		})
	}
}

func TestOutageDropsEverythingInside(t *testing.T) {
	const size, rate = 1000, 100e6
	ser := serTime(size, rate)
	outages := []netsim.Outage{{Start: 200 * time.Millisecond, End: 500 * time.Millisecond},
		{Start: 700 * time.Millisecond, End: 701 * time.Millisecond}}
	src := &cbr{size: size, interval: time.Millisecond, limit: 1000}
	dst := &cbr{sink: sink{keep: true}}
	sim, l := oneWay(1, netsim.LinkConfig{RateBps: rate, Delay: 40 * time.Millisecond, Outages: outages}, src, dst, netsim.FlowOptions{})
	start := sim.Now()
	if err := sim.RunFor(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	inOutage := func(sent time.Duration) bool {
		dep := sent + ser // no queueing: departure is send time plus serialisation
		for _, o := range outages {
			if dep >= o.Start && dep < o.End {
				return true
			}
		}
		return false
	}
	seen := make(map[uint64]bool)
	for _, r := range dst.got {
		seen[r.seq] = true
		if inOutage(r.sentAt.Sub(start)) {
			t.Errorf("datagram %d sent at %v crossed an outage", r.seq, r.sentAt.Sub(start))
		}
	}
	var dropped uint64
	for i := range 1000 {
		sent := time.Duration(i) * time.Millisecond
		if inOutage(sent) {
			dropped++
		} else if !seen[uint64(i)] {
			t.Errorf("datagram %d sent at %v outside the outages was lost", i, sent)
		}
	}
	if st := l.Stats(); st.OutageDrops != dropped || dropped != 301 {
		t.Errorf("OutageDrops = %d, want %d (= 301)", st.OutageDrops, dropped)
	}
}

func TestSetConfigChangesRate(t *testing.T) {
	const size = 1250
	src := &cbr{size: size, interval: serTime(size, 200e6)}
	dst := &cbr{}
	cfg := netsim.LinkConfig{RateBps: 100e6, Delay: 5 * time.Millisecond, QueueBytes: 50_000}
	sim, l := oneWay(1, cfg, src, dst, netsim.FlowOptions{})
	cfg.RateBps = 50e6
	sim.At(sim.Now().Add(time.Second), func() { l.SetConfig(cfg) })
	for _, want := range []float64{100e6, 50e6} {
		if err := sim.RunFor(500 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		b0 := dst.bytes
		if err := sim.RunFor(500 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if got := float64(dst.bytes-b0) * 8 / 0.5; math.Abs(got/want-1) > 0.005 {
			t.Errorf("delivered %.2f Mbit/s, want %.0f", got/1e6, want/1e6)
		}
	}
}
