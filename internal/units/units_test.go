package units

import "testing"

func TestParseRate(t *testing.T) {
	for in, want := range map[string]uint64{"250mbit": 250e6, "1gbit": 1e9, "800kbit": 800e3, "1.5M": 1.5e6, "12345": 12345, " 50Mbit ": 50e6} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fast", "-5mbit", "1e30gbit", "mbit"} {
		if got, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %d, want an error", in, got)
		}
	}
}
