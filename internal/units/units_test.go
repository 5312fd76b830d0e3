package units

import (
	"strings"
	"testing"
)

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
	}{
		{"50mbit", 50e6}, {"50Mbit", 50e6}, {"50Mbps", 50e6}, {"50mbps", 50e6}, {"50M", 50e6}, {"50m", 50e6},
		{"50Mbit/s", 50e6}, {"50Mb/s", 50e6}, {"50Mb", 50e6}, {"50MBit", 50e6}, {"50 Mbit/s", 50e6}, {" 50Mbit ", 50e6},
		{"1gbit", 1e9}, {"1Gbps", 1e9}, {"1G", 1e9}, {"1.5Gbit", 1.5e9}, {"2.5g", 2.5e9},
		{"800kbit", 800e3}, {"800Kbps", 800e3}, {"800k", 800e3},
		{"1500bit", 1500}, {"1500bps", 1500}, {"1500bit/s", 1500}, {"1500b/s", 1500},
		{"0", 0}, {"0mbit", 0}, {".5mbit", 500e3},
	} {
		if got, err := ParseRate(c.in); err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

// TestParseRateRefuses: a bare number, a byte rate, an unknown unit and
// what is no number at all are refused, each saying why in words, not
// in strconv's.
func TestParseRateRefuses(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"100", "needs a unit, e.g. 100mbit"},
		{"12345", "needs a unit"},
		{"50MB/s", "bytes per second"},
		{"50MBps", "50MBps is 400mbit"},
		{"6MiB/s", "bytes per second"},
		{"1kB/s", "0.008mbit"},
		{"10Bps", "bytes per second"},
		{"5mbyte/s", "bytes per second"},
		{"50Mibit", `unknown unit "Mibit"`},
		{"50furlongs", "unknown unit"},
		{"fast", "not a rate"},
		{"", "not a rate"},
		{"mbit", "not a rate"},
		{"-5mbit", "cannot be negative"},
		{"1.2.3mbit", "not a rate"},
		{"1e30gbit", "unknown unit"},
		{"99999999999gbit", "too large"},
		{"NaN", "not a rate"},
		{"inf", "not a rate"},
		{"0x10mbit", "unknown unit"},
	} {
		got, err := ParseRate(c.in)
		if err == nil {
			t.Errorf("ParseRate(%q) = %d, want an error", c.in, got)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseRate(%q): %q; want it to say %q", c.in, err, c.want)
		}
		if strings.Contains(err.Error(), "strconv") || strings.Contains(err.Error(), "invalid syntax") {
			t.Errorf("ParseRate(%q): %q shows the parser's text", c.in, err)
		}
	}
}
