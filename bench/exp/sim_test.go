package exp

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/harness"
)

// Plain TCP with 3 MiB buffers on 250 Mbit/s × 200 ms is window-limited to
// about 3 MiB per RTT per connection; with 1 % loss at 100 ms it collapses.
func TestSimTCPBaseline(t *testing.T) {
	r, err := SimTCP(SimOptions{RateBps: 250e6, RTT: 200 * time.Millisecond, Streams: 1, BytesPerStream: 40 << 20, CC: "cubic"})
	if err != nil || !r.Complete {
		t.Fatalf("SimTCP: %+v, %v", r, err)
	}
	window := float64(3<<20) * 8 / 0.2 / 1e6 // Mbit/s the window allows
	if r.GoodputMbps > window*1.02 || r.GoodputMbps < window*0.6 {
		t.Errorf("one flow, 3 MiB window, 200 ms: %.1f Mbit/s, want at most the window's %.1f and not far below", r.GoodputMbps, window)
	}
	lossy, err := SimTCP(SimOptions{RateBps: 250e6, RTT: 100 * time.Millisecond, LinkImpairments: LinkImpairments{LossPct: 1}, Streams: 4, BytesPerStream: 2 << 20, CC: "cubic"})
	if err != nil || !lossy.Complete {
		t.Fatalf("lossy SimTCP: %+v, %v", lossy, err)
	}
	if lossy.LinkRatio > 0.2 || lossy.RetransPct < 0.5 {
		t.Errorf("1 %% loss at 100 ms: link_ratio %.3f retrans %.2f%%; plain TCP should collapse and retransmit", lossy.LinkRatio, lossy.RetransPct)
	}
}

// The tunnel must deliver every byte and beat window-limited plain TCP.
func TestSimTunnelBeatsPlainTCP(t *testing.T) {
	o := SimOptions{RateBps: 100e6, RTT: 200 * time.Millisecond, LinkImpairments: LinkImpairments{LossPct: 0.5}, Streams: 2, BytesPerStream: 16 << 20}
	tun, err := SimTunnel(o)
	if err != nil || !tun.Complete {
		t.Fatalf("SimTunnel: %+v, %v", tun, err)
	}
	o.CC = "cubic"
	tcp, err := SimTCP(o)
	if err != nil || !tcp.Complete {
		t.Fatalf("SimTCP: %+v, %v", tcp, err)
	}
	t.Logf("tunnel with 0.5%% loss: %s", tun.Line())
	t.Logf("plain TCP with 0.5%% loss: %s", tcp.Line())
	if tun.LinkRatio < 0.5 {
		t.Errorf("warm tunnel link ratio %.3f with 0.5%% loss, want >= 0.5 (the project bar is tested in package tunnel)", tun.LinkRatio)
	}
	if tcp.LinkRatio >= tun.LinkRatio {
		t.Errorf("plain TCP (%.3f) matched the tunnel (%.3f) on a lossy long path", tcp.LinkRatio, tun.LinkRatio)
	}
}

func TestSimRampAndShare(t *testing.T) {
	o := SimOptions{RateBps: 100e6, RTT: 100 * time.Millisecond}
	rtts, err := SimRamp(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("new stream on a warm connection: 80%% of the link after %.2f RTTs", rtts)
	if rtts > 2 {
		t.Errorf("ramp took %.2f RTTs, want <= 2 (no per-flow slow start)", rtts)
	}
	a, b, err := SimShare(o, "tunnel", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("two tunnels: %.2f / %.2f", a, b)
	if a < 0.3 || b < 0.3 {
		t.Errorf("two tunnels share %.2f / %.2f; each should get a fair part", a, b)
	}
	a, b, err = SimShare(o, "cubic", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tunnel vs plain CUBIC: %.2f / %.2f", a, b)
}

// TestSimOutage: the twin of the lab's outage starts OutageAt after the warm
// transfer starts, stalls both paths, and both report it and their recovery.
func TestSimOutage(t *testing.T) {
	o := SimOptions{RateBps: 100e6, RTT: 50 * time.Millisecond, Streams: 2, BytesPerStream: 16 << 20,
		LinkImpairments: LinkImpairments{OutageAt: time.Second, OutageFor: 2 * time.Second}}
	clean := o
	clean.LinkImpairments = LinkImpairments{}
	for _, run := range []struct {
		name string
		f    func(SimOptions) (SimResult, error)
	}{{"tunnel", SimTunnel}, {"plain TCP", func(o SimOptions) (SimResult, error) { o.CC = "cubic"; return SimTCP(o) }}} {
		base, err := run.f(clean)
		if err != nil || !base.Complete || base.OutageEndS != 0 || base.RecoveryS != 0 {
			t.Fatalf("%s without an outage: %+v, %v", run.name, base, err)
		}
		r, err := run.f(o)
		if err != nil || !r.Complete {
			t.Fatalf("%s with an outage: %+v, %v", run.name, r, err)
		}
		t.Logf("%s: %.2f s without the outage, %.2f s with it; recovered %.2f s after it", run.name, base.Seconds, r.Seconds, r.RecoveryS)
		if r.OutageStartS != 1 || r.OutageEndS != 3 {
			t.Errorf("%s: outage %v-%v s, want 1-3 s after the transfer started", run.name, r.OutageStartS, r.OutageEndS)
		}
		// Had the outage hit the warm-up instead, the transfer would not
		// have lost its two seconds.
		if r.Seconds < base.Seconds+1.5 {
			t.Errorf("%s: %.2f s with a 2 s outage against %.2f s without: the outage missed the transfer", run.name, r.Seconds, base.Seconds)
		}
		// Plain CUBIC restarts from a tiny window after its backed-off
		// timeouts and may not reach the bar before the end (NotRecovered);
		// the tunnel must.
		if r.RecoveryS == harness.NotRecovered && run.name == "plain TCP" {
			continue
		}
		if r.RecoveryS <= 0 || r.RecoveryS > r.Seconds-r.OutageEndS+0.001 {
			t.Errorf("%s: recovery %v s, want a positive time before the transfer ended (%.2f s)", run.name, r.RecoveryS, r.Seconds)
		}
	}
	late := o
	late.OutageAt = time.Hour
	if r, err := SimTunnel(late); err != nil || r.OutageEndS != 0 || r.RecoveryS != 0 {
		t.Errorf("an outage after the transfer's end was reported: %+v, %v", r, err)
	}
}

// TestSimShares: tunnels sharing a bottleneck get fair shares when they
// start together, and, started apart, when a hub told the link's rate
// evens them out (without it: 'wanbench sim --share-tunnels 3 --stagger
// 300ms --rtt 100ms --queue 2000000').
func TestSimShares(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stagger  time.Duration
		hubShare bool
	}{
		{"together", 0, false},
		{"staggered, hub share", 300 * time.Millisecond, true},
		{"staggered 2 s, hub share", 2 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := SimOptions{RateBps: 250e6, RTT: 100 * time.Millisecond, CC: "bbr", Seed: 1, QueueBytes: 2_000_000, HubShare: tc.hubShare}
			mbps, err := SimShares(o, 3, tc.stagger, 20*time.Second, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var total float64
			for _, m := range mbps {
				total += m
			}
			if total < 0.9*250 {
				t.Errorf("total %.1f Mbit/s of a 250 Mbit/s link, want at least 0.9 of it", total)
			}
			for k, m := range mbps {
				if s := m * 3 / total; s < 0.8 || s > 1.25 {
					t.Errorf("tunnel %d: %.2f of the fair share (%v Mbit/s)", k+1, s, mbps)
				}
			}
		})
	}
}

// TestSimTunnelReproducible: a scenario run again gives the same result
// but the CPU it took, through a cold start with four streams and loss.
func TestSimTunnelReproducible(t *testing.T) {
	o := SimOptions{RateBps: 50e6, RTT: 600 * time.Millisecond, LinkImpairments: LinkImpairments{LossPct: 0.5},
		Streams: 4, BytesPerStream: 4 << 20, Cold: true, Seed: 1}
	var first SimResult
	for i := range 4 {
		r, err := SimTunnel(o)
		if err != nil || !r.Complete {
			t.Fatalf("SimTunnel: %+v, %v", r, err)
		}
		r.CPUSeconds = 0
		if i == 0 {
			first = r
		} else if r != first {
			t.Fatalf("run %d differs from the first:\n%+v\n%+v", i+1, r, first)
		}
	}
}
