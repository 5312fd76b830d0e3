package analyze

import (
	"net/netip"
	"testing"
)

func TestUnwrap(t *testing.T) {
	for _, tc := range []struct {
		seq, base uint32
		ref, want int64
	}{
		{100, 0, 0, 100},
		{5, 0xfffffff0, 0, 21},                // across wrap
		{0xfffffff0, 0xfffffff0, 0, 0},        // at base
		{0xffffff00, 0, 1 << 32, 1<<32 - 256}, // near ref beyond 4 GiB
		{10, 0, 1<<32 + 5, 1<<32 + 10},
	} {
		if got := unwrap(tc.seq, tc.base, tc.ref); got != tc.want {
			t.Errorf("unwrap(%d,%d,%d) = %d, want %d", tc.seq, tc.base, tc.ref, got, tc.want)
		}
	}
}

func TestRangeSet(t *testing.T) {
	var rs rangeSet
	rs.add(10, 20)
	rs.add(30, 40)
	rs.add(20, 25) // adjacent: merges
	if len(rs.s) != 2 || rs.s[0] != (span{10, 25}) {
		t.Fatalf("got %v", rs.s)
	}
	if !rs.covers(12, 25) || rs.covers(24, 31) {
		t.Error("covers")
	}
	if sp, ok := rs.containing(30); !ok || sp != (span{30, 40}) {
		t.Error("containing")
	}
	rs.remove(15, 35)
	if len(rs.s) != 2 || rs.s[0] != (span{10, 15}) || rs.s[1] != (span{35, 40}) {
		t.Fatalf("remove: %v", rs.s)
	}
	rs.pruneBelow(36)
	if len(rs.s) != 1 || rs.s[0] != (span{36, 40}) {
		t.Fatalf("prune: %v", rs.s)
	}
	for i := int64(0); i < 1000; i++ {
		rs.add(100+3*i, 101+3*i)
	}
	if len(rs.s) > maxRanges {
		t.Errorf("set grew to %d", len(rs.s))
	}
}

func TestSeriesCoarsens(t *testing.T) {
	var s series
	s.init(0)
	for i := int64(0); i < 10000; i++ {
		s.at(i * 1e6).ackedBytes += 1000
	}
	if len(s.buckets) > seriesPoints {
		t.Fatalf("%d buckets", len(s.buckets))
	}
	var total int64
	for _, b := range s.buckets {
		total += b.ackedBytes
	}
	if total != 10000*1000 {
		t.Errorf("bytes lost while coarsening: %d", total)
	}
	s.at(1 << 62) // far future: must not loop or overflow
	s.at(-5)      // before the start: bucket 0
}

func TestFilter(t *testing.T) {
	a := netip.MustParseAddrPort("198.18.0.1:40000")
	b := netip.MustParseAddrPort("198.18.0.2:5201")
	for _, tc := range []struct {
		f    string
		want bool
	}{
		{"1", true}, {"#2", false}, {"198.18.0.2", true}, {"198.18.0.9", false},
		{":5201", true}, {":80", false}, {"198.18.0.2:5201", true}, {"198.18.0.1:5201", false},
		{"198.18.0.1, :5201", true}, {"198.18.0.1,:80", false},
	} {
		f, err := ParseFilter(tc.f)
		if err != nil {
			t.Fatalf("%q: %v", tc.f, err)
		}
		if got := f.Match(1, a, b); got != tc.want {
			t.Errorf("%q: %v", tc.f, got)
		}
	}
	for _, bad := range []string{"", "x", ":0", ":70000", "1.2.3"} {
		if _, err := ParseFilter(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
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
