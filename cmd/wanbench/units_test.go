package main

import (
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"250mbit", 250e6, true}, {"1gbit", 1e9, true}, {"1.5Gbit", 1.5e9, true},
		{"800kbit", 800e3, true}, {"1000bit", 1000, true}, {"50M", 50e6, true}, {"50Mbps", 50e6, true},
		{"0", 0, true}, // link's default: no limit
		{"1000", 0, false}, {"fast", 0, false}, {"-3mbit", 0, false}, {"", 0, false}, {"50MB/s", 0, false},
	} {
		got, err := parseRate(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseRate(%q) = %d, %v; want %d ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"100MB", 100 << 20, true}, {"25M", 25 << 20, true}, {"64KB", 64 << 10, true},
		{"1GiB", 1 << 30, true}, {"1500", 1500, true}, {"0MB", 0, false}, {"lots", 0, false},
	} {
		got, err := parseBytes(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestParsePercent(t *testing.T) {
	if v, err := parsePercent("1.5%"); err != nil || v != 1.5 {
		t.Fatalf("parsePercent(1.5%%) = %v, %v", v, err)
	}
	if _, err := parsePercent("101"); err == nil {
		t.Fatal("101% accepted")
	}
}

func TestParseQueue(t *testing.T) {
	for _, c := range []struct {
		in    string
		bytes int
		delay time.Duration
		ok    bool
	}{
		{"2MB", 2 << 20, 0, true}, {"50ms", 0, 50 * time.Millisecond, true}, {"1500", 1500, 0, true},
		{"0s", 0, 0, false}, {"-5ms", 0, 0, false}, {"big", 0, 0, false},
	} {
		b, d, err := parseQueue(c.in)
		if (err == nil) != c.ok || b != c.bytes || d != c.delay {
			t.Errorf("parseQueue(%q) = %d, %v, %v; want %d, %v ok=%v", c.in, b, d, err, c.bytes, c.delay, c.ok)
		}
	}
}
