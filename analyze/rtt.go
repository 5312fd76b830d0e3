package analyze

import "slices"

// rttStats collects RTT samples: count, extremes, and a bounded,
// deterministic reservoir for the median.
type rttStats struct {
	n        int
	min, max int64
	keep     []int64
}

func (r *rttStats) add(v int64) {
	if r.n == 0 || v < r.min {
		r.min = v
	}
	r.max = max(r.max, v)
	r.n++
	if len(r.keep) < rttKeep {
		r.keep = append(r.keep, v)
	} else {
		r.keep[(uint64(r.n)*2654435761)%rttKeep] = v
	}
}

// median returns the median sample in ns, 0 without samples.
// (The reservoir is sorted in a copy: call it once per report.)
func (r *rttStats) median() int64 {
	if len(r.keep) == 0 {
		return 0
	}
	s := slices.Clone(r.keep)
	slices.Sort(s)
	return s[len(s)/2]
}

// tsRing is how many distinct TSvals of one side wait for their echo.
const tsRing = 64

type tsEntry struct {
	val uint32
	t   int64
}

// tsTrack measures, with RFC 7323 timestamps, how long one side's packets
// take to be echoed by the other: from the capture point to the other side
// and back. The two sides' figures add up to the end-to-end RTT wherever
// the capture was taken.
type tsTrack struct {
	ring    []tsEntry
	head, n int
	last    uint32
	have    bool
	rtt     rttStats
}

// sent records a TSval seen at time t (only new, increasing values).
func (k *tsTrack) sent(val uint32, t int64) {
	if k.have && int32(val-k.last) <= 0 {
		return
	}
	if k.ring == nil {
		k.ring = make([]tsEntry, tsRing)
	}
	if k.n == tsRing {
		k.head = (k.head + 1) % tsRing
		k.n--
	}
	k.ring[(k.head+k.n)%tsRing] = tsEntry{val, t}
	k.n++
	k.last, k.have = val, true
}

// echoed handles a TSecr from the other side seen at time t: the matching
// TSval yields a sample, which it returns (0: none); older ones are dropped.
func (k *tsTrack) echoed(ecr uint32, t int64) (sample int64) {
	for k.n > 0 {
		e := k.ring[k.head]
		if int32(e.val-ecr) > 0 {
			return sample
		}
		k.head = (k.head + 1) % tsRing
		k.n--
		if e.val == ecr && t >= e.t {
			sample = max(t-e.t, 1)
			k.rtt.add(t - e.t)
		}
	}
	return sample
}
