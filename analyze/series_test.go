package analyze

import "testing"

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
