package exp

import (
	"testing"

	"github.com/wanopt/wanopt/bench/harness"
)

func TestTrimmedMean(t *testing.T) {
	runs := []harness.IperfResult{{Mbps: 100, Seconds: 1}, {Mbps: 10, Seconds: 9}, {Mbps: 200, Seconds: 0.5}, {Mbps: 110, Seconds: 2}, {Mbps: 120, Seconds: 3}}
	m, s := trimmedMean(runs)
	if m != 110 || s != 2 {
		t.Fatalf("trimmedMean = %v, %v; want 110, 2 (mean of 100, 110, 120)", m, s)
	}
	if m, _ := trimmedMean(runs[:2]); m != 55 {
		t.Fatalf("two runs are averaged, got %v", m)
	}
}
