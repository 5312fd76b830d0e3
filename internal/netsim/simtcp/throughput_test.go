package simtcp_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/netsim"
	"github.com/wanopt/wanopt/internal/netsim/simtcp"
)

const (
	mss      = 1448
	wireSize = 1500
)

// payloadShare is the payload fraction of a link's rate for full-size segments.
const payloadShare = float64(mss) / wireSize

func TestThroughputIsMinOfLinkAndWindow(t *testing.T) {
	tests := []struct {
		rateBps int64
		rtt     time.Duration
		bufSize int
		ctl     string
	}{
		{250e6, 200 * time.Millisecond, 3 << 20, "cubic"}, // window-limited: ~126 Mbit/s
		{250e6, 200 * time.Millisecond, 3 << 20, "reno"},
		{10e6, 100 * time.Millisecond, 64 << 10, "cubic"},  // window-limited: ~5.2 Mbit/s
		{50e6, 40 * time.Millisecond, 3 << 20, "cubic"},    // link-limited
		{50e6, 40 * time.Millisecond, 3 << 20, "reno"},     // link-limited
		{100e6, 20 * time.Millisecond, 400 << 10, "cubic"}, // window above BDP: link-limited
	}
	for _, tc := range tests {
		name := fmt.Sprintf("%dMbit %v %dKiB %s", tc.rateBps/1e6, tc.rtt, tc.bufSize>>10, tc.ctl)
		t.Run(name, func(t *testing.T) {
			const seed = 5
			var ctl simtcp.WindowController = simtcp.NewCubic(mss)
			if tc.ctl == "reno" {
				ctl = simtcp.NewReno(mss)
			}
			cfg := simtcp.Config{SendBufferBytes: tc.bufSize, ReceiveBufferBytes: tc.bufSize, Controller: ctl}
			// A queue of one BDP keeps a loss-based flow at the link rate.
			sim, _, flows := newSim(seed, symmetric(tc.rateBps, tc.rtt, 1, 0), cfg)
			got := goodputBps(t, sim, flows, 2500*time.Millisecond, 7500*time.Millisecond)[0]
			windowBps := float64(tc.bufSize) * 8 / tc.rtt.Seconds()
			want := min(float64(tc.rateBps)*payloadShare, windowBps)
			if math.Abs(got/want-1) > 0.10 {
				t.Errorf("seed %d: goodput %.1f Mbit/s, want %.1f ±10%% (link %.0f, window/RTT %.1f); sender %+v",
					seed, got/1e6, want/1e6, float64(tc.rateBps)/1e6, windowBps/1e6, flows[0].snd.Stats())
			}
			t.Logf("goodput %.1f Mbit/s, want %.1f", got/1e6, want/1e6)
		})
	}
}

// TestLossCripplesStandardTCP checks that 1 % loss at 100 ms limits Reno and
// CUBIC to roughly the Mathis et al. rate, 1.22·MSS/(RTT·√p).
func TestLossCripplesStandardTCP(t *testing.T) {
	const rate, rtt, loss = 250e6, 100 * time.Millisecond, 1.0
	mathis := 1.22 * mss * 8 / (rtt.Seconds() * math.Sqrt(loss/100))
	for _, ctl := range []string{"reno", "cubic"} {
		t.Run(ctl, func(t *testing.T) {
			const seed = 9
			var c simtcp.WindowController = simtcp.NewCubic(mss)
			if ctl == "reno" {
				c = simtcp.NewReno(mss)
			}
			cfg := simtcp.Config{SendBufferBytes: 64 << 20, ReceiveBufferBytes: 64 << 20, Controller: c}
			sim, _, flows := newSim(seed, symmetric(rate, rtt, 1, loss), cfg)
			got := goodputBps(t, sim, flows, 10*time.Second, 130*time.Second)[0]
			t.Logf("%s: %.2f Mbit/s, Mathis model %.2f Mbit/s, %+v", ctl, got/1e6, mathis/1e6, flows[0].snd.Stats())
			if got > 0.05*rate {
				t.Errorf("seed %d: %.1f Mbit/s with 1%% loss, want far below the %.0f Mbit/s link", seed, got/1e6, rate/1e6)
			}
			if got < 0.5*mathis || got > 2*mathis {
				t.Errorf("seed %d: %.2f Mbit/s, want within a factor 2 of the model's %.2f", seed, got/1e6, mathis/1e6)
			}
		})
	}
}

func TestTwoCubicFlowsShareFairly(t *testing.T) {
	const rate = 40e6
	tests := []struct {
		name    string
		seed    uint64
		lateBy  time.Duration // second flow starts this much later
		minJain float64
	}{
		{"together", 13, 0, 0.95},
		{"late joiner converges", 14, 5 * time.Second, 0.9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := simtcp.Config{SendBufferBytes: 16 << 20, ReceiveBufferBytes: 16 << 20}
			sim, links, flows := newSim(tc.seed, symmetric(rate, 40*time.Millisecond, 1, 0), cfg)
			cfg.Controller = simtcp.NewCubic(mss)
			s, r := simtcp.NewPair(cfg)
			sim.At(sim.Now().Add(tc.lateBy), func() {
				sim.AddFlow(s, r, links[0], links[1], netsim.FlowOptions{})
			})
			flows = append(flows, flowRun{snd: s, rcv: r})
			got := goodputBps(t, sim, flows, 15*time.Second, 45*time.Second)
			total := got[0] + got[1]
			jain := total * total / (2 * (got[0]*got[0] + got[1]*got[1]))
			t.Logf("flows %.1f and %.1f Mbit/s, Jain index %.3f", got[0]/1e6, got[1]/1e6, jain)
			if total < 0.9*rate*payloadShare {
				t.Errorf("seed %d: together %.1f Mbit/s, want ≥ 90%% of the link", tc.seed, total/1e6)
			}
			if jain < tc.minJain {
				t.Errorf("seed %d: shares %.1f and %.1f Mbit/s, Jain index %.3f < %.2f",
					tc.seed, got[0]/1e6, got[1]/1e6, jain, tc.minJain)
			}
		})
	}
}

// TestHyStartTamesSlowStart checks that HyStart++ leaves slow start before
// an overshoot on a 250 Mbit/s, 100 ms path with one BDP of queue.
func TestHyStartTamesSlowStart(t *testing.T) {
	const seed = 3
	run := func(hystart bool) simtcp.SenderStats {
		c := simtcp.NewCubic(mss)
		c.HyStart = hystart
		cfg := simtcp.Config{SendBufferBytes: 64 << 20, ReceiveBufferBytes: 64 << 20, Controller: c}
		sim, _, flows := newSim(seed, symmetric(250e6, 100*time.Millisecond, 1, 0), cfg)
		if err := sim.RunFor(4 * time.Second); err != nil {
			t.Fatal(err)
		}
		return flows[0].snd.Stats()
	}
	with, without := run(true), run(false)
	t.Logf("with HyStart++: %d retransmits, %d RTOs; without: %d, %d",
		with.Retransmits, with.RTOs, without.Retransmits, without.RTOs)
	if with.RTOs != 0 || 3*with.Retransmits > without.Retransmits || without.RTOs == 0 {
		t.Errorf("seed %d: with HyStart++ %d retransmits and %d RTOs, without %d and %d; want far fewer with it",
			seed, with.Retransmits, with.RTOs, without.Retransmits, without.RTOs)
	}
}
