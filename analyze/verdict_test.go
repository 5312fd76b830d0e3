package analyze

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/gopacket/pcapgo"
)

// TestVerdicts analyses every hand-built capture and checks the verdict and
// the anomalies it was built to show.
func TestVerdicts(t *testing.T) {
	for _, tc := range testCaptures {
		t.Run(tc.file, func(t *testing.T) {
			rep, err := AnalyzeFile(filepath.Join("testdata", tc.file), Options{})
			if err != nil {
				t.Fatal(err)
			}
			var text bytes.Buffer
			if err := WriteText(&text, rep); err != nil {
				t.Fatal(err)
			}
			t.Logf("\n%s", text.String())
			if len(rep.Flows) != 1 {
				t.Fatalf("got %d flows, want 1", len(rep.Flows))
			}
			f := rep.Flows[0]
			if tc.verdict != "" && f.Verdict.Name != tc.verdict {
				t.Errorf("verdict %q, want %q (%s)", f.Verdict.Name, tc.verdict, f.Verdict.Summary)
			}
			var names []string
			for _, a := range f.Anomalies {
				names = append(names, a.Name)
			}
			for _, want := range tc.anomalies {
				if !slices.Contains(names, want) {
					t.Errorf("anomaly %s not found (got %v)", want, names)
				}
			}
			if len(tc.anomalies) == 0 && len(names) > 0 {
				t.Errorf("unexpected anomalies %v", names)
			}
			if !strings.Contains(text.String(), "verdict: "+f.Verdict.Name+" ") {
				t.Errorf("text report lacks the verdict line")
			}
		})
	}
}

// TestMidStreamCapture drops the handshake from a lab capture: the RTT then
// comes from data/ACK pairs and timestamps, and the verdict must hold.
func TestMidStreamCapture(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "lab-window-limited.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w := pcapgo.NewWriter(&out)
	w.WriteFileHeader(65535, r.LinkType())
	for i := 0; ; i++ {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			break
		}
		if i >= 50 {
			w.WritePacket(ci, data)
		}
	}
	rep, err := Analyze(&out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	fl := rep.Flows[0]
	if fl.Handshake.SYNSeen || fl.Handshake.TSRTTms < 35 || fl.Verdict.Name != VerdictWindowLimited {
		t.Errorf("handshake %+v, verdict %s: %s", fl.Handshake, fl.Verdict.Name, fl.Verdict.Summary)
	}
}

// TestVerdictEvidence checks that the verdicts resting on the plateau carry
// the figures behind them, and that those figures are the ones the
// captures were made to show.
func TestVerdictEvidence(t *testing.T) {
	for _, tc := range []struct {
		file  string
		check func(v Verdict) bool
		text  []string
	}{
		// The field case: flat flight far below the window, RTT flat at its
		// minimum, no loss — not the path.
		{"lab-send-buffer-limited.pcap", func(v Verdict) bool {
			return v.RTTPlateauMs-v.RTTMinMs < 1 && v.PlateauRetrans == 0 && v.FlightBytes > 0 && v.FlightBytes < v.PlateauWindow/4
		}, []string{"bytes in flight flat", "receiver's", "RTT", "SO_SNDBUF"}},
		{"lab-path-limited.pcap", func(v Verdict) bool { return v.RTTPlateauMs > 1.1*v.RTTMinMs }, []string{"RTT rose from", "queueing"}},
		{"path-limited.pcap", func(v Verdict) bool { return v.RTTPlateauMs > 1.1*v.RTTMinMs }, []string{"RTT rose from", "queueing"}},
		// Near the receiver the queueing shows in the sender's echoes.
		{"lab-path-limited-rx.pcap", func(v Verdict) bool { return v.RTTPlateauMs > 1.1*v.RTTMinMs && v.PlateauRetrans == 0 }, []string{"RTT rose from"}},
		{"lab-app-limited.pcap", func(v Verdict) bool { return v.PauseShare >= 0.2 && v.IdleShare < 0.2 }, []string{"paused with room to send", "application's clock"}},
		{"lab-opportunity-limited.pcap", func(v Verdict) bool { return v.LossRate == 0 }, []string{"round trips", "slow start"}},
		{"lab-send-buffer-limited-rx.pcap", func(v Verdict) bool { return v.RTTMinMs > 0 }, []string{"no test matched", "near the receiver", "RTT"}},
	} {
		rep, err := AnalyzeFile(filepath.Join("testdata", tc.file), Options{})
		if err != nil {
			t.Fatal(err)
		}
		v := rep.Flows[0].Verdict
		if !tc.check(v) {
			t.Errorf("%s: evidence %+v", tc.file, v)
		}
		for _, s := range tc.text {
			if !strings.Contains(v.Summary, s) {
				t.Errorf("%s: summary lacks %q: %s", tc.file, s, v.Summary)
			}
		}
	}
}

// TestSimulatedLimits runs the simulator through limits no committed
// capture shows, without writing them to testdata.
func TestSimulatedLimits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       simParams
		verdict string
	}{
		// The field case as the simulator makes it: 37 kB in flight
		// (a clamped window, which looks the same on the wire) on a 40 ms,
		// 100 Mbit/s path, 300 kB receive window, no loss.
		{"field-case", simParams{total: 2 << 20, mss: 1448, rtt: 40 * ms1, rateBps: 100e6, rcvBuf: 300000, wscale: 7, cwnd: 37000, sack: true},
			VerdictSendBufferLimited},
		// Reno congestion avoidance from 10 segments, without loss: the
		// window opens one segment per round trip to the end.
		{"congestion-avoidance", simParams{total: 2 << 20, mss: 1448, rtt: 40 * ms1, rateBps: 100e6, rcvBuf: 4 << 20, wscale: 7, cwnd: 10 * 1448, aimd: true, sack: true},
			VerdictTransportLimited},
		// A window larger than the path's BDP queues at the bottleneck.
		{"bottleneck", simParams{total: 2 << 20, mss: 1448, rtt: 20 * ms1, rateBps: 20e6, rcvBuf: 4 << 20, wscale: 7, cwnd: 80000, sack: true},
			VerdictPathLimited},
	} {
		path := filepath.Join(t.TempDir(), tc.name+".pcap")
		if err := writeCapture(path, capSpec{link: linkRaw, client: cli4, server: srv4}, simulate(tc.p)); err != nil {
			t.Fatal(err)
		}
		rep, err := AnalyzeFile(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if v := rep.Flows[0].Verdict; v.Name != tc.verdict {
			t.Errorf("%s: verdict %s, want %s: %s", tc.name, v.Name, tc.verdict, v.Summary)
		} else {
			t.Logf("%s: %s %s", tc.name, v.Name, v.Summary)
		}
	}
}
