package netsim

import (
	"math"
	"math/bits"
	"time"
)

// Histogram layout: values below histSub nanoseconds have a bucket each;
// above that every power of two is split into histSub buckets, so a bucket
// is at most 1/histSub (0.8 %) of its value wide. Values up to 2^histMaxExp
// ns (about 18 minutes) are kept; larger ones land in the last bucket.
const (
	histSubBits = 7
	histSub     = 1 << histSubBits
	histMaxExp  = 40
	histBuckets = histSub + (histMaxExp-histSubBits)*histSub
)

// delayHist is a log-linear histogram of durations with exact count, sum and
// maximum. Recording is O(1) and allocation-free.
type delayHist struct {
	counts [histBuckets]uint64
	n      uint64
	sum    time.Duration
	max    time.Duration
}

func histIndex(v uint64) int {
	if v < histSub {
		return int(v)
	}
	exp := bits.Len64(v) - histSubBits - 1 // v>>exp is in [histSub, 2*histSub)
	i := histSub + exp*histSub + int(v>>uint(exp)) - histSub
	return min(i, histBuckets-1)
}

// histLow returns the smallest value of bucket i and the bucket's width.
func histLow(i int) (low, width uint64) {
	if i < histSub {
		return uint64(i), 1
	}
	exp := (i - histSub) / histSub
	m := uint64(histSub + (i-histSub)%histSub)
	return m << uint(exp), 1 << uint(exp)
}

func (h *delayHist) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histIndex(uint64(d))]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

func (h *delayHist) reset() { *h = delayHist{} }

// percentile returns the p-th percentile (0 < p <= 100): the middle of the
// bucket holding the sample of rank ceil(p/100*n), capped at the maximum.
func (h *delayHist) percentile(p float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(p / 100 * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			low, w := histLow(i)
			return min(time.Duration(low+(w-1)/2), h.max)
		}
	}
	return h.max
}

// DelayStats summarises a link's queueing delays since its last
// ResetQueueDelay: percentiles within 0.8 %; Count, Mean and Max exact.
type DelayStats struct {
	Count         uint64
	Mean          time.Duration
	P50, P95, P99 time.Duration
	Max           time.Duration
}

func (h *delayHist) stats() DelayStats {
	s := DelayStats{Count: h.n, Max: h.max}
	if h.n > 0 {
		s.Mean = h.sum / time.Duration(h.n)
		s.P50, s.P95, s.P99 = h.percentile(50), h.percentile(95), h.percentile(99)
	}
	return s
}
