package exp

import (
	"math"
	"testing"
)

// Output of iperf 2.1.8 'iperf -c … -n 10M -P 4 -R -f m' (trimmed).
const iperfOut4 = `------------------------------------------------------------
Client connecting to 198.18.9.2, TCP port 5001
TCP window size: 0.08 MByte (default)
------------------------------------------------------------
[  1] local 198.18.9.1 port 48348 connected with 198.18.9.2 port 5001 (reverse)
[ *3] 0.0000-0.0137 sec  10.0 MBytes  6125 Mbits/sec
[ *2] 0.0000-0.0190 sec  10.0 MBytes  4411 Mbits/sec
[ *1] 0.0000-0.0195 sec  10.0 MBytes  4300 Mbits/sec
[ *4] 0.0000-0.0201 sec  10.0 MBytes  4170 Mbits/sec
[SUM] 0.0000-0.0202 sec  40.0 MBytes  16608 Mbits/sec
`

const iperfOut1 = `[  1] local 198.18.0.1 port 40000 connected with 198.18.0.2 port 5001 (reverse)
[ *1] 0.0000-4.2100 sec  25.0 MBytes  49.8 Mbits/sec
`

func TestParseIperf(t *testing.T) {
	r, err := parseIperf(iperfOut4, 4, 10<<20)
	if err != nil {
		t.Fatal(err)
	}
	if r.Bytes != 40<<20 || math.Abs(r.Seconds-0.0202) > 1e-9 {
		t.Fatalf("got %+v", r)
	}
	if want := float64(40<<20) * 8 / 0.0202 / 1e6; math.Abs(r.Mbps-want) > 1e-6 {
		t.Fatalf("Mbps = %v, want %v", r.Mbps, want)
	}
	r, err = parseIperf(iperfOut1, 1, 25<<20)
	if err != nil || math.Abs(r.Seconds-4.21) > 1e-9 {
		t.Fatalf("single stream: %+v, %v", r, err)
	}
	if _, err := parseIperf("connect failed: Connection refused\n", 4, 1); err == nil {
		t.Fatal("no error for output without a result")
	}
	// With several streams only the [SUM] line counts.
	if _, err := parseIperf("[ *1] 0.0000-1.0000 sec  10.0 MBytes  80 Mbits/sec\n", 4, 10<<20); err == nil {
		t.Fatal("a single stream's line was taken for the sum")
	}
}

func TestTrimmedMean(t *testing.T) {
	runs := []IperfResult{{Mbps: 100, Seconds: 1}, {Mbps: 10, Seconds: 9}, {Mbps: 200, Seconds: 0.5}, {Mbps: 110, Seconds: 2}, {Mbps: 120, Seconds: 3}}
	m, s := trimmedMean(runs)
	if m != 110 || s != 2 {
		t.Fatalf("trimmedMean = %v, %v; want 110, 2 (mean of 100, 110, 120)", m, s)
	}
	if m, _ := trimmedMean(runs[:2]); m != 55 {
		t.Fatalf("two runs are averaged, got %v", m)
	}
}
