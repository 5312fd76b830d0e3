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
