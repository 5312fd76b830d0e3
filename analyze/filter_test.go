package analyze

import (
	"net/netip"
	"testing"
)

func TestFilter(t *testing.T) {
	a := netip.MustParseAddrPort("198.18.0.1:40000")
	b := netip.MustParseAddrPort("198.18.0.2:5201")
	for _, tc := range []struct {
		name string
		f    string
		want bool
	}{
		{"flow number", "1", true},
		{"other flow number", "#2", false},
		{"address", "198.18.0.2", true},
		{"other address", "198.18.0.9", false},
		{"port", ":5201", true},
		{"other port", ":80", false},
		{"address and port", "198.18.0.2:5201", true},
		{"address with the other's port", "198.18.0.1:5201", false},
		{"both terms match", "198.18.0.1, :5201", true},
		{"one term fails", "198.18.0.1,:80", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ParseFilter(tc.f)
			if err != nil {
				t.Fatalf("%q: %v", tc.f, err)
			}
			if got := f.Match(1, a, b); got != tc.want {
				t.Errorf("%q: %v", tc.f, got)
			}
		})
	}
	for _, tc := range []struct{ name, f string }{
		{"empty", ""},
		{"word", "x"},
		{"port 0", ":0"},
		{"port too big", ":70000"},
		{"short address", "1.2.3"},
	} {
		t.Run("bad/"+tc.name, func(t *testing.T) {
			if _, err := ParseFilter(tc.f); err == nil {
				t.Errorf("%q accepted", tc.f)
			}
		})
	}
}

func TestAnalyzeFilter(t *testing.T) {
	f, _ := ParseFilter(":9999")
	rep, err := AnalyzeFile("testdata/window-limited.pcap", Options{Filter: f})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Flows) != 0 || rep.Stats.TCPPackets == 0 {
		t.Errorf("filter: %d flows", len(rep.Flows))
	}
}
