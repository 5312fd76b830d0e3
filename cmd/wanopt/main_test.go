package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testCapture = "../../analyze/testdata/sack-unsent-data.pcap"

func run(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := dispatch(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestDispatch(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{nil, 2, ""},
		{[]string{"help"}, 0, "analyze"},
		{[]string{"frobnicate"}, 2, ""},
		{[]string{"analyze"}, 2, ""},
		{[]string{"analyze", "--bogus", testCapture}, 2, ""},
		{[]string{"analyze", "--flow", "not-a-filter", testCapture}, 2, ""},
		{[]string{"analyze", "--plot-format", "gif", "--plot", "x", testCapture}, 2, ""},
		{[]string{"analyze", "/nonexistent.pcap"}, 1, ""},
		{[]string{"analyze", testCapture}, 0, "verdict: window-limited"},
		{[]string{"analyze", "--flow", ":5201", testCapture}, 0, "anomaly: sack-unsent-data"},
		{[]string{"analyze", "--flow", ":80", testCapture}, 0, "no TCP flows"},
	} {
		code, out, errs := run(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("%v: code %d (want %d), output %q, stderr %q", tc.args, code, tc.code, out, errs)
		}
	}
}

func TestAnalyzeJSONAndPlot(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := run("analyze", "--json", "--series", "--plot", dir, "--plot-format", "svg", testCapture)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errs)
	}
	var rep struct {
		Flows []struct {
			Verdict   struct{ Name string }
			Anomalies []struct {
				Name    string
				Packets []int
			}
			Directions [2]struct{ Series []any }
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("JSON: %v", err)
	}
	f := rep.Flows[0]
	if f.Verdict.Name != "window-limited" || f.Anomalies[0].Name != "sack-unsent-data" || len(f.Anomalies[0].Packets) == 0 || len(f.Directions[0].Series) == 0 {
		t.Errorf("unexpected report %+v", f)
	}
	if _, err := os.Stat(filepath.Join(dir, "flow1.svg")); err != nil {
		t.Errorf("plot not written: %v", err)
	}
}
