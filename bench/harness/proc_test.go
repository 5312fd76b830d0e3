package harness

import (
	"os"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// A command name with spaces and a parenthesis; utime 250 and stime 40
	// ticks are fields 14 and 15.
	stat := "4321 (wan opt) x) S 1 4321 4321 0 -1 4194560 1000 0 0 0 250 40 0 0 20 0 9 0 12345 100000000 2000 18446744073709551615\n"
	got, err := parseProcStat(4321, stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := (CPUTime{User: 2500 * time.Millisecond, System: 400 * time.Millisecond}); got != want {
		t.Errorf("parseProcStat = %+v, want %+v", got, want)
	}
	if got.Total() != 2900*time.Millisecond {
		t.Errorf("Total = %v, want 2.9s", got.Total())
	}
	if d := got.Sub(CPUTime{User: time.Second, System: 100 * time.Millisecond}); d != (CPUTime{User: 1500 * time.Millisecond, System: 300 * time.Millisecond}) {
		t.Errorf("Sub = %+v", d)
	}
	for _, bad := range []string{"4321 no parenthesis", "4321 (x) S 1 2 3", "4321 (x) S 1 4321 4321 0 -1 0 0 0 0 0 a b 0"} {
		if _, err := parseProcStat(4321, bad); err == nil {
			t.Errorf("parseProcStat(%q): no error", bad)
		}
	}
	// This process's own line parses, and its threads have waited (the
	// test runner's goroutines park; their threads sleep).
	c, err := procCPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if c.Wakeups == 0 {
		t.Errorf("procCPUTime(self) = %+v: no voluntary context switches", c)
	}
}

func TestParseSwitches(t *testing.T) {
	status := "Name:\twanopt\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t8533\nnonvoluntary_ctxt_switches:\t  761\n"
	vol, invol, err := parseSwitches(status)
	if err != nil || vol != 8533 || invol != 761 {
		t.Errorf("parseSwitches = %d, %d, %v; want 8533, 761, nil", vol, invol, err)
	}
	for _, bad := range []string{"Name:\tx\n", "voluntary_ctxt_switches:\t1\n", "voluntary_ctxt_switches:\tx\nnonvoluntary_ctxt_switches:\t1\n"} {
		if _, _, err := parseSwitches(bad); err == nil {
			t.Errorf("parseSwitches(%q): no error", bad)
		}
	}
	// Sub counts the switches between two readings, never below zero (a
	// thread that ended took its switches with it).
	a := CPUTime{Wakeups: 100, Preemptions: 50}
	if d := (CPUTime{Wakeups: 130, Preemptions: 40}).Sub(a); d.Wakeups != 30 || d.Preemptions != 0 {
		t.Errorf("Sub = %+v, want 30 wake-ups, 0 preemptions", d)
	}
}

func TestParseProcStatus(t *testing.T) {
	status := "Name:\twanopt\nVmPeak:\t 1300000 kB\nVmHWM:\t   40960 kB\nVmRSS:\t   20480 kB\nThreads:\t9\n"
	got, err := parseProcStatus(status)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Memory{RSSBytes: 20 << 20, PeakBytes: 40 << 20}); got != want {
		t.Errorf("parseProcStatus = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"Name:\tx\n", "VmHWM:\t 12 MB\nVmRSS:\t 1 kB\n", "VmHWM:\t x kB\nVmRSS:\t 1 kB\n"} {
		if _, err := parseProcStatus(bad); err == nil {
			t.Errorf("parseProcStatus(%q): no error", bad)
		}
	}
}

func TestParseTCPExt(t *testing.T) {
	text := "TcpExt: SyncookiesSent TCPSACKDiscard TCPDSACKIgnoredOld\n" +
		"TcpExt: 3 2916 7\n" +
		"IpExt: InNoRoutes TCPSACKDiscard\n" +
		"IpExt: 1 99\n"
	if v, err := parseTCPExt(text, "TCPSACKDiscard"); err != nil || v != 2916 {
		t.Errorf("TCPSACKDiscard = %d, %v; want 2916", v, err)
	}
	if v, err := parseTCPExt(text, "TCPDSACKIgnoredOld"); err != nil || v != 7 {
		t.Errorf("TCPDSACKIgnoredOld = %d, %v; want 7", v, err)
	}
	if _, err := parseTCPExt(text, "InNoRoutes"); err == nil {
		t.Error("found an IpExt counter as a TcpExt one")
	}
	if _, err := parseTCPExt("TcpExt: A B\n", "A"); err == nil {
		t.Error("a header without values gave a value")
	}
}
