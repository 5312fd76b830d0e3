package cc

import (
	"testing"
	"time"
)

func TestFixed(t *testing.T) {
	f := NewFixed(100e6, 1000)
	if f.Name() != "fixed" || f.PacingRateBps() != 100e6 {
		t.Fatalf("name %q rate %d", f.Name(), f.PacingRateBps())
	}
	// Before an RTT sample the window is 2 × rate × 333 ms.
	if got, want := f.CongestionWindow(), int(bytesAtRate(100e6, 2*InitialRTT)); got != want {
		t.Fatalf("initial cwnd %d, want %d", got, want)
	}
	rtt := NewRTTStats(0)
	rtt.UpdateRTT(40*time.Millisecond, 0)
	f.OnAck(&AckEvent{RTT: rtt, Lost: []PacketState{{Bytes: 1000}}})
	if got, want := f.CongestionWindow(), 1_000_000; got != want {
		t.Fatalf("cwnd %d, want 2×BDP %d", got, want)
	}
	rtt2 := NewRTTStats(0)
	rtt2.UpdateRTT(10*time.Microsecond, 0)
	f.OnAck(&AckEvent{RTT: rtt2})
	if got := f.CongestionWindow(); got != fixedMinCwndPkts*1000 {
		t.Fatalf("cwnd floor %d", got)
	}
	// Over the simulator it keeps the link at its rate despite loss.
	cfg := simConfig{rateBps: 20e6, rtt: 50 * time.Millisecond, seed: 700, lossProb: 0.02}
	cfg.queueBytes = cfg.bdpBytes()
	s := newSim(t, cfg, NewFixed(cfg.rateBps, DefaultMSS))
	s.run(5*time.Second, nil)
	share := float64(s.rxBytes) * 8 / 5 / float64(cfg.rateBps)
	if share < 0.95 || share > 1.0 {
		t.Fatalf("seed %d: fixed rate delivered %.1f%% of the link", cfg.seed, 100*share)
	}
}
