package harness

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
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

// Output of iperf 2.1.8 'iperf -c 127.0.0.1 -n 10M -P 2 -R -i 0.25 -f m'
// on loopback, the server at 100 Mbit/s and SIGSTOPped for a second: zero
// intervals are the stall, and only the closing [SUM] has sound times.
const iperfStall2 = `------------------------------------------------------------
Client connecting to 127.0.0.1, TCP port 5999
TCP window size: 3.76 MByte (default)
------------------------------------------------------------
[  1] local 127.0.0.1 port 57960 connected with 127.0.0.1 port 5999 (reverse) (icwnd/mss/irtt=319/32741/47)
[  2] local 127.0.0.1 port 57962 connected with 127.0.0.1 port 5999 (reverse) (icwnd/mss/irtt=319/32741/45)
[ ID] Interval       Transfer     Bandwidth
[ *2] 0.0000-0.2500 sec  3.00 MBytes   101 Mbits/sec
[ *1] 0.0000-0.2500 sec  2.99 MBytes   100 Mbits/sec
[SUM] 0.0000--1796127382.2836 sec  5.99 MBytes  -0.000 Mbits/sec
[ *2] 0.2500-0.5000 sec  3.00 MBytes   101 Mbits/sec
[ *1] 0.2500-0.5000 sec  3.00 MBytes   101 Mbits/sec
[SUM] -1796127382.2836--1796127382.0336 sec  6.00 MBytes  0.000 Mbits/sec
[ *2] 0.5000-0.7500 sec  1.12 MBytes  37.7 Mbits/sec
[ *1] 0.5000-0.7500 sec  1.13 MBytes  38.0 Mbits/sec
[SUM] -1796127382.0336--1796127381.7836 sec  2.26 MBytes  0.000 Mbits/sec
[ *2] 0.7500-1.0000 sec  0.000 MBytes  0.000 Mbits/sec
[ *1] 0.7500-1.0000 sec  0.000 MBytes  0.000 Mbits/sec
[SUM] -1796127381.7836--1796127381.5336 sec  0.000 MBytes  0.000 Mbits/sec
[ *2] 1.0000-1.2500 sec  0.000 MBytes  0.000 Mbits/sec
[ *1] 1.0000-1.2500 sec  0.000 MBytes  0.000 Mbits/sec
[SUM] -1796127381.5336--1796127381.2836 sec  0.000 MBytes  0.000 Mbits/sec
[ *2] 1.2500-1.5000 sec  0.000 MBytes  0.000 Mbits/sec
[ *1] 1.2500-1.5000 sec  0.000 MBytes  0.000 Mbits/sec
[SUM] -1796127381.2836--1796127381.0336 sec  0.000 MBytes  0.000 Mbits/sec
[ *2] 1.5000-1.6136 sec  2.88 MBytes   212 Mbits/sec
[ *2] 0.0000-1.6136 sec  10.0 MBytes  52.0 Mbits/sec
[ *1] 1.5000-1.6114 sec  2.88 MBytes   216 Mbits/sec
[ *1] 0.0000-1.6114 sec  10.0 MBytes  52.1 Mbits/sec
[SUM] 0.0000-1.6137 sec  20.0 MBytes   104 Mbits/sec
`

// The same with one stream ('-n 30M -P 1 -i 0.25'), stalled for two
// seconds; its last, short interval is not reported, only the total.
const iperfStall1 = `------------------------------------------------------------
Client connecting to 127.0.0.1, TCP port 5999
TCP window size: 16.0 KByte (default)
------------------------------------------------------------
[  1] local 127.0.0.1 port 58096 connected with 127.0.0.1 port 5999 (reverse) (icwnd/mss/irtt=319/32741/45)
[ ID] Interval       Transfer     Bandwidth
[ *1] 0.0000-0.2500 sec  3.00 MBytes   101 Mbits/sec
[ *1] 0.2500-0.5000 sec  3.00 MBytes   101 Mbits/sec
[ *1] 0.5000-0.7500 sec  3.00 MBytes   101 Mbits/sec
[ *1] 0.7500-1.0000 sec  2.88 MBytes  96.5 Mbits/sec
[ *1] 1.0000-1.2500 sec  0.000 MBytes  0.000 Mbits/sec
[ *1] 1.2500-1.5000 sec  0.000 MBytes  0.000 Mbits/sec
[ *1] 1.5000-1.7500 sec  0.000 MBytes  0.000 Mbits/sec
[ *1] 1.7500-2.0000 sec  0.000 MBytes  0.000 Mbits/sec
[ *1] 2.0000-2.2500 sec  0.000 MBytes  0.000 Mbits/sec
[ *1] 2.2500-2.5000 sec  0.000 MBytes  0.000 Mbits/sec
[ *1] 2.5000-2.7500 sec  0.000 MBytes  0.000 Mbits/sec
[ *1] 2.7500-3.0000 sec  0.000 MBytes  0.000 Mbits/sec
[ *1] 0.0000-3.0075 sec  30.0 MBytes  83.7 Mbits/sec
`

// arrivals stamps each line of out as a run would: a report for an interval
// ending at t at lag after t (more for every second line), others at 0.
func arrivals(out string, lag time.Duration) []timedLine {
	var lines []timedLine
	for i, s := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		l := timedLine{text: s}
		if m := streamLineRE.FindStringSubmatch(s); m != nil {
			to, _ := strconv.ParseFloat(m[3], 64)
			l.at = time.Duration(to*float64(time.Second)) + lag + time.Duration(i%2)*3*time.Millisecond
		}
		lines = append(lines, l)
	}
	return lines
}

func TestIperfIntervals(t *testing.T) {
	const mib = 1 << 20
	mbps := func(mb, secs float64) float64 { return mb * mib * 8 / secs / 1e6 }
	iv := iperfIntervals(arrivals(iperfStall2, 0), 250*time.Millisecond)
	want := []RateInterval{
		{0, 0.25, mbps(5.99, 0.25)}, {0.25, 0.5, mbps(6, 0.25)}, {0.5, 0.75, mbps(2.25, 0.25)},
		{0.75, 1, 0}, {1, 1.25, 0}, {1.25, 1.5, 0},
		{1.5, 1.6136, mbps(5.76, 0.1136)}, // both streams' last, shorter intervals together
	}
	if len(iv) != len(want) {
		t.Fatalf("got %d intervals %+v, want %d", len(iv), iv, len(want))
	}
	for i := range want {
		if math.Abs(iv[i].StartS-want[i].StartS) > 1e-9 || math.Abs(iv[i].EndS-want[i].EndS) > 1e-9 || math.Abs(iv[i].Mbps-want[i].Mbps) > 1e-3 {
			t.Errorf("interval %d = %+v, want %+v", i, iv[i], want[i])
		}
	}
	// The closing reports were not taken for intervals, and the whole
	// transfer still parses from the closing [SUM].
	r, err := parseIperf(iperfStall2, 2, 10<<20)
	if err != nil || math.Abs(r.Seconds-1.6137) > 1e-9 {
		t.Fatalf("parseIperf with -i: %+v, %v", r, err)
	}

	// On the run's clock: iperf's clock started 0.3 s into the run.
	shifted := iperfIntervals(arrivals(iperfStall2, 300*time.Millisecond), 250*time.Millisecond)
	if len(shifted) != len(want) || math.Abs(shifted[0].StartS-0.3) > 1e-9 || math.Abs(shifted[6].EndS-1.9136) > 1e-9 {
		t.Fatalf("with iperf's clock 0.3 s late: %+v", shifted)
	}

	one := iperfIntervals(arrivals(iperfStall1, 0), 250*time.Millisecond)
	if len(one) != 12 || math.Abs(one[3].Mbps-mbps(2.88, 0.25)) > 1e-3 || one[4].Mbps != 0 || one[11].EndS != 3 {
		t.Fatalf("one stream: %+v; want 12 intervals, the closing report left out", one)
	}
	if r, err := parseIperf(iperfStall1, 1, 30<<20); err != nil || math.Abs(r.Seconds-3.0075) > 1e-9 {
		t.Fatalf("parseIperf, one stream with -i: %+v, %v", r, err)
	}
	if iv := iperfIntervals(arrivals(iperfOut4, 0), 500*time.Millisecond); len(iv) != 1 {
		t.Errorf("a transfer shorter than one interval: %+v, want its closing reports as one interval", iv)
	}
}

// A transfer whose streams did not all finish (a connection reset) must
// not pass for a complete one.
func TestParseIperfShortTransfer(t *testing.T) {
	if _, err := parseIperf(iperfStall2, 2, 20<<20); err == nil || !strings.Contains(err.Error(), "moved") {
		t.Fatalf("20 MiB reported for 2 × 20 MiB: err %v, want one saying what moved", err)
	}
}

func TestRecoveryTime(t *testing.T) {
	iv := iperfIntervals(arrivals(iperfStall2, 0), 250*time.Millisecond)
	// The link came back at 1.45 s: the interval ending at 1.6136 s is the
	// first at the bar after it.
	if got := RecoveryTime(iv, 1.45, 80); math.Abs(got-(1.6136-1.45)) > 1e-9 {
		t.Errorf("recovery = %v, want %v", got, 1.6136-1.45)
	}
	// Intervals before the return do not count, however fast.
	if got := RecoveryTime(iv, 1.7, 80); got != NotRecovered {
		t.Errorf("recovery after the transfer's end = %v, want NotRecovered", got)
	}
	if got := RecoveryTime(iv, 1.45, 500); got != NotRecovered {
		t.Errorf("recovery to a bar never reached = %v, want NotRecovered", got)
	}
}

// A lossy link must not make a healthy plain-TCP run look wedged: 4
// streams of 10 MiB at 1 % loss and 100 ms outlast the lossless timeout.
func TestLossyRunTimeout(t *testing.T) {
	const bytes = 4 * 10 << 20
	clean := RunTimeout(bytes, 250e6)
	if clean != LossyRunTimeout(bytes, 250e6, 4, 100*time.Millisecond, 0) {
		t.Fatal("no loss must keep the lossless timeout")
	}
	lossy := LossyRunTimeout(bytes, 250e6, 4, 100*time.Millisecond, 1)
	if clean > 80*time.Second || lossy < 2*65*time.Second {
		t.Errorf("timeout %v lossless, %v at 1 %% loss; want the second well above the 65 s seen", clean, lossy)
	}
	// Near 0 ms the link, not the loss, bounds the rate.
	if got := LossyRunTimeout(bytes, 250e6, 4, 0, 1); got != clean {
		t.Errorf("1 %% loss at 0 ms: %v, want the lossless %v", got, clean)
	}
}

// The output of iperf 2.1.8's server ('iperf -s -f m') for a transfer of
// -P 4 and then one of -P 1: the lines of its threads interleave.
const iperfServerOut = `------------------------------------------------------------
Server listening on TCP port 5999
TCP window size:  128 KByte (default)
------------------------------------------------------------
[  1] local 127.0.0.1 port 5999 connected with 127.0.0.1 port 52728 (icwnd/mss/irtt=320/32768/21)
[ ID] Interval       Transfer     Bandwidth
[  2] 0.0000-0.0101 sec  10.0 MBytes  8328 Mbits/sec
[  3] 0.0000-0.0091 sec  10.0 MBytes  9206 Mbits/sec
[  4] local 127.0.0.1 port 5999 connected with 127.0.0.1 port 52750 (icwnd/mss/irtt=320/32768/7)
[  2] local 127.0.0.1 port 5999 connected with 127.0.0.1 port 52736 (icwnd/mss/irtt=320/32768/23)
[  1] 0.0000-0.0096 sec  10.0 MBytes  8777 Mbits/sec
[  4] 0.0000-0.0061 sec  10.0 MBytes  13729 Mbits/sec
[SUM] 0.0000-0.0111 sec  40.0 MBytes  30229 Mbits/sec
[  3] local 127.0.0.1 port 5999 connected with 127.0.0.1 port 52738 (icwnd/mss/irtt=320/32768/5)
`

const iperfServerOut1 = `[  5] local 127.0.0.1 port 5999 connected with 127.0.0.1 port 52766 (icwnd/mss/irtt=320/32768/19)
[ ID] Interval       Transfer     Bandwidth
[  5] 0.0000-0.0058 sec  10.0 MBytes  14483 Mbits/sec
`

// TestServerReport: an upload's figure is the server's report of the
// transfer after the mark, waited for, never an earlier one's.
func TestServerReport(t *testing.T) {
	ctx := context.Background()
	var s IperfServer
	// An earlier transfer of four streams, already reported.
	s.stdout.Write([]byte(iperfServerOut))
	mark := s.stdout.Len()
	if _, err := s.report(ctx, mark, 4, 50*time.Millisecond); err == nil {
		t.Fatal("the earlier transfer's [SUM] was taken for this one's")
	}
	// This transfer's report arrives in two writes, after the wait began.
	lines := strings.SplitAfter(strings.Replace(iperfServerOut, "[SUM] 0.0000-0.0111 sec  40.0 MBytes", "[SUM] 0.0000-0.0400 sec  40.0 MBytes", 1), "[SUM]")
	go func() {
		s.stdout.Write([]byte(lines[0]))
		time.Sleep(30 * time.Millisecond)
		s.stdout.Write([]byte(lines[1]))
	}()
	out, err := s.report(ctx, mark, 4, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseIperf(out, 4, 10<<20)
	if err != nil || math.Abs(r.Seconds-0.04) > 1e-9 {
		t.Fatalf("four streams: %+v, %v; want the new transfer's 0.04 s", r, err)
	}
	// One stream: its own line is the report.
	mark = s.stdout.Len()
	s.stdout.Write([]byte(iperfServerOut1))
	if out, err = s.report(ctx, mark, 1, time.Second); err != nil {
		t.Fatal(err)
	}
	if r, err = parseIperf(out, 1, 10<<20); err != nil || math.Abs(r.Seconds-0.0058) > 1e-9 {
		t.Fatalf("one stream: %+v, %v", r, err)
	}
}
