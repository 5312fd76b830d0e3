package exp

import (
	"testing"
	"time"
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
	lossy, err := SimTCP(SimOptions{RateBps: 250e6, RTT: 100 * time.Millisecond, LossPct: 1, Streams: 4, BytesPerStream: 2 << 20, CC: "cubic"})
	if err != nil || !lossy.Complete {
		t.Fatalf("lossy SimTCP: %+v, %v", lossy, err)
	}
	if lossy.LinkRatio > 0.2 || lossy.RetransPct < 0.5 {
		t.Errorf("1 %% loss at 100 ms: link_ratio %.3f retrans %.2f%%; plain TCP should collapse and retransmit", lossy.LinkRatio, lossy.RetransPct)
	}
}

// The tunnel must deliver every stream's bytes and beat window-limited
// plain TCP on a long path.
func TestSimTunnelBeatsPlainTCP(t *testing.T) {
	o := SimOptions{RateBps: 100e6, RTT: 200 * time.Millisecond, LossPct: 0.5, Streams: 2, BytesPerStream: 16 << 20}
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
