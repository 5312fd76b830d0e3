package simtcp

// span is the half-open interval [lo, hi).
type span struct{ lo, hi int64 }

// intervalSet is a sorted set of disjoint, non-adjacent half-open intervals.
// Once its slice has grown it allocates nothing.
type intervalSet struct {
	s []span
}

// add inserts [lo, hi) and appends to fresh the sub-intervals that were not
// covered before, in ascending order; it returns the extended fresh.
func (x *intervalSet) add(lo, hi int64, fresh []span) []span {
	if lo >= hi {
		return fresh
	}
	s := x.s
	i, n := 0, len(s) // first span with hi >= lo
	for i < n {
		m := int(uint(i+n) >> 1)
		if s[m].hi < lo {
			i = m + 1
		} else {
			n = m
		}
	}
	j := i
	cur := lo
	nlo, nhi := lo, hi
	for j < len(s) && s[j].lo <= hi {
		if s[j].lo > cur {
			fresh = append(fresh, span{cur, s[j].lo})
		}
		cur = max(cur, s[j].hi)
		nlo, nhi = min(nlo, s[j].lo), max(nhi, s[j].hi)
		j++
	}
	if cur < hi {
		fresh = append(fresh, span{cur, hi})
	}
	switch {
	case j > i: // merge s[i:j] into one span
		s[i] = span{nlo, nhi}
		x.s = append(s[:i+1], s[j:]...)
	default: // insert at i
		s = append(s, span{})
		copy(s[i+1:], s[i:])
		s[i] = span{nlo, nhi}
		x.s = s
	}
	return fresh
}

// trimBelow removes everything below v.
func (x *intervalSet) trimBelow(v int64) {
	s := x.s
	k := 0
	for k < len(s) && s[k].hi <= v {
		k++
	}
	if k > 0 {
		s = append(s[:0], s[k:]...)
	}
	if len(s) > 0 && s[0].lo < v {
		s[0].lo = v
	}
	x.s = s
}

// find returns the index of the span containing v, or -1.
func (x *intervalSet) find(v int64) int {
	for i, sp := range x.s {
		if v >= sp.lo && v < sp.hi {
			return i
		}
	}
	return -1
}

func (x *intervalSet) empty() bool { return len(x.s) == 0 }
