package analyze

import "testing"

func TestUnwrap(t *testing.T) {
	for _, tc := range []struct {
		name      string
		seq, base uint32
		ref, want int64
	}{
		{"after base", 100, 0, 0, 100},
		{"across wrap", 5, 0xfffffff0, 0, 21},
		{"at base", 0xfffffff0, 0xfffffff0, 0, 0},
		{"near ref beyond 4 GiB", 0xffffff00, 0, 1 << 32, 1<<32 - 256},
		{"past ref beyond 4 GiB", 10, 0, 1<<32 + 5, 1<<32 + 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := unwrap(tc.seq, tc.base, tc.ref); got != tc.want {
				t.Errorf("unwrap(%d,%d,%d) = %d, want %d", tc.seq, tc.base, tc.ref, got, tc.want)
			}
		})
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
