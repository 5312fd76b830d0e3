package exp

import (
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestMiddleboxEndToEnd runs a short 'wanbench sack': plain TCP must be held near
// the clamp's bound, analysed as such; wanopt must get several times more,
// and an edge must refuse every datagram the device tampered with.
func TestMiddleboxEndToEnd(t *testing.T) {
	out, r, _ := wanbenchEndToEnd[MiddleboxResult](t, "iproute2 iperf tcpdump", []string{"ip", "iperf", "tcpdump"}, "sack",
		"--plain-bytes", "2MB", "--wanopt-bytes", "24MB", "--tamper-udp", "1%")

	// The last line is the JSON's figures.
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	kv := map[string]string{}
	for _, f := range strings.Fields(lines[len(lines)-1]) {
		k, v, _ := strings.Cut(f, "=")
		kv[k] = v
	}
	plain, _ := strconv.ParseFloat(kv["plain_mbps"], 64)
	wan, _ := strconv.ParseFloat(kv["wanopt_mbps"], 64)
	if len(kv) != 3 || math.Abs(plain-r.Plain.Run.Mbps) > 0.005 || math.Abs(wan-r.Wanopt.Run.Mbps) > 0.05 ||
		kv["tampered_dropped"] != strconv.FormatUint(r.Wanopt.TamperedDropped, 10) {
		t.Errorf("last line %q does not match sack.json (plain %.2f, wanopt %.1f, dropped %d)",
			lines[len(lines)-1], r.Plain.Run.Mbps, r.Wanopt.Run.Mbps, r.Wanopt.TamperedDropped)
	}

	// Plain TCP: 16 kB per 40 ms is 3.28 Mbit/s at most.
	if r.ClampBoundMbps < 3.2 || r.ClampBoundMbps > 3.3 {
		t.Fatalf("clamp bound %.2f Mbit/s, want 16384 B / 40 ms = 3.28", r.ClampBoundMbps)
	}
	if p := r.Plain.Run.Mbps; p < 0.5*r.ClampBoundMbps || p > 1.02*r.ClampBoundMbps {
		t.Errorf("plain TCP %.2f Mbit/s, want near the clamp's bound %.2f (50-102 %%)", p, r.ClampBoundMbps)
	}
	pd := r.Plain.Device
	if pd.SACKForged == 0 || pd.WindowsClamped == 0 || pd.UDPTampered != 0 {
		t.Errorf("plain run: the device forged %d SACKs, clamped %d windows, tampered with %d UDP datagrams; want some, some, none",
			pd.SACKForged, pd.WindowsClamped, pd.UDPTampered)
	}
	// The analyser's bound uses the RTT measured at the sender, which a
	// busy host stretches: the window must be the clamp's exactly, the
	// bound at most the clamp's and not absurdly low.
	a := r.Plain.Analysis
	if a.Verdict != "window-limited" || a.WindowBytes != int64(r.WindowClamp) ||
		a.WindowBoundMbps < 0.6*r.ClampBoundMbps || a.WindowBoundMbps > 1.05*r.ClampBoundMbps {
		t.Errorf("analysis: %s, window %d B, bound %.2f Mbit/s; want window-limited at the clamp, %d B, and a bound of 0.6 to 1.05 of %.2f Mbit/s (%s)",
			a.Verdict, a.WindowBytes, a.WindowBoundMbps, r.WindowClamp, r.ClampBoundMbps, a.VerdictSummary)
	}
	// Nearly every forged ACK reaches the capture at the server (the few
	// the server itself sends go the other way).
	if a.SACKUnsent == 0 || uint64(a.SACKUnsent) < pd.SACKForged*9/10 || uint64(a.SACKUnsent) > pd.SACKForged {
		t.Errorf("analysis flagged %d ACKs as sack-unsent-data; the device forged %d", a.SACKUnsent, pd.SACKForged)
	}
	// Linux checks SACK blocks against what it has sent: it must have
	// thrown the forged ones away.
	if r.Plain.SenderSACKDiscards < uint64(a.SACKUnsent)*9/10 {
		t.Errorf("the server's kernel discarded %d SACK blocks; the capture shows %d forged ones reaching it", r.Plain.SenderSACKDiscards, a.SACKUnsent)
	}
	for _, an := range a.Anomalies {
		if an.Name != "sack-unsent-data" {
			t.Errorf("unexpected anomaly %s ×%d: %s", an.Name, an.Count, an.Detail)
		}
	}
	for _, f := range []string{r.Capture, r.AnalysisText} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}

	// wanopt: no TCP on the WAN; every tampered datagram refused.
	w := r.Wanopt
	if w.Device.SACKForged != 0 || w.Device.WindowsClamped != 0 {
		t.Errorf("wanopt run: the device rewrote %d ACKs and %d windows on a WAN that should carry only the tunnel",
			w.Device.SACKForged, w.Device.WindowsClamped)
	}
	if w.Device.UDPTampered == 0 {
		t.Fatal("wanopt run: the device tampered with no datagram at 1 %")
	}
	// A tampered handshake initiation's last byte is mac2, which a far
	// edge not under load does not check: allow a few unrefused.
	if w.TamperedDropped > w.Device.UDPTampered || w.TamperedDropped+3 < w.Device.UDPTampered {
		t.Errorf("the device tampered with %d datagrams; the edges refused %d", w.Device.UDPTampered, w.TamperedDropped)
	}
	if w.Run.Mbps < 5*r.Plain.Run.Mbps {
		t.Errorf("wanopt %.1f Mbit/s, want at least 5× plain TCP's %.2f", w.Run.Mbps, r.Plain.Run.Mbps)
	}
}

// The device is checked before any lab is built: a forged block that could
// cover data in flight, or a link wanem refuses, is an error.
func TestMiddleboxRefusesBadDevice(t *testing.T) {
	for _, tc := range []struct {
		o    MiddleboxOptions
		want string
	}{
		{MiddleboxOptions{Wanopt: "wanopt", WindowClamp: 65536, SACKOffset: 65536}, "not beyond the window clamp"},
		{MiddleboxOptions{Wanopt: "wanopt", SACKOffset: 1 << 30, SACKLength: 1 << 30}, "2^31"},
		{MiddleboxOptions{Wanopt: "wanopt", TamperUDPPct: 150}, "TamperUDPPct"},
		{MiddleboxOptions{}, "no wanopt binary"},
	} {
		_, err := Middlebox(t.Context(), tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one mentioning %q", tc.o, err, tc.want)
		}
	}
}
