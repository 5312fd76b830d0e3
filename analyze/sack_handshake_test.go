package analyze

import (
	"path/filepath"
	"strings"
	"testing"
)

// A middlebox that forges a SACK block into every pure ACK also forges one
// into an ACK the receiver sends before the first data (here a window
// update right after the handshake, as the handshake's last ACK is when
// the receiver is the client). The sender's SYN fixes the highest
// sequence it has sent (its ISN + 1), so that block is already for data
// never sent: it must be reported as such, and not enter the SACK
// scoreboard, where the cumulative ACK passing it later would read as
// reneging.
func TestSACKBeforeFirstDataIsUnsent(t *testing.T) {
	pk := simulate(simParams{total: 256 << 10, mss: 1428, rtt: 40 * ms1, rateBps: 100e6, rcvBuf: 16384, wscale: -1, cwnd: 1 << 22, sack: true})
	if len(pk) < 4 || pk[2].flags != flagACK || !pk[2].fromCli || pk[3].n == 0 {
		t.Fatalf("the simulated flow does not start with the handshake then data: %+v", pk[:min(len(pk), 4)])
	}
	forged := simPkt{t: (pk[2].t + pk[3].t) / 2, seq: sISN + 1, ack: cISN + 1, flags: flagACK, win: 16384,
		sack: [][2]uint32{{cISN + 1 + 65536, cISN + 1 + 65536 + 14480}}}
	pk = append(pk[:3], append([]simPkt{forged}, pk[3:]...)...)
	path := filepath.Join(t.TempDir(), "sack-before-data.pcap")
	if err := writeCapture(path, capSpec{link: linkIPv4, client: cli4, server: srv4}, pk); err != nil {
		t.Fatal(err)
	}
	rep, err := AnalyzeFile(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Flows) != 1 {
		t.Fatalf("%d flows, want 1", len(rep.Flows))
	}
	f := rep.Flows[0]
	var unsent *Anomaly
	for i, a := range f.Anomalies {
		switch a.Name {
		case "sack-unsent-data":
			unsent = &f.Anomalies[i]
		case "sack-reneging":
			t.Errorf("reneging reported for a forged block the cumulative ACK passed: %s", a.Detail)
		}
	}
	if unsent == nil {
		t.Fatalf("no sack-unsent-data for the block before the first data (anomalies %+v)", f.Anomalies)
	}
	if unsent.Count != 1 || unsent.Packets[0] != 4 || !strings.Contains(unsent.Detail, "had sent only up to 1:") {
		t.Errorf("sack-unsent-data ×%d at packets %v, detail %q: want once, at packet 4, before anything was sent",
			unsent.Count, unsent.Packets, unsent.Detail)
	}
	if f.Verdict.Name != VerdictWindowLimited {
		t.Errorf("verdict %s, want %s: %s", f.Verdict.Name, VerdictWindowLimited, f.Verdict.Summary)
	}
}
