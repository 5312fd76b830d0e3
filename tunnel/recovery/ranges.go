package recovery

import "github.com/wanopt/wanopt/tunnel/wire"

// rangeSet is the set of received packet numbers as at most cap(r)
// disjoint, non-adjacent ranges in ascending order (the newest last).
// Packet numbers below floor are treated as already received: they were
// pruned after an acknowledged ACK, or their range was dropped to stay
// within the capacity. It never allocates after newRangeSet.
type rangeSet struct {
	r     []wire.AckRange
	floor uint64
}

func newRangeSet(capacity int) rangeSet {
	return rangeSet{r: make([]wire.AckRange, 0, max(capacity, 1))}
}

// add inserts pn and reports whether it was already in the set (or below
// floor), in which case nothing changed. dropped reports that the oldest
// range was discarded to make room.
func (s *rangeSet) add(pn uint64) (dup, dropped bool) {
	if pn < s.floor {
		return true, false
	}
	r := s.r
	n := len(r)
	if n == 0 || pn > r[n-1].Largest+1 {
		return false, s.insert(n, pn)
	}
	if pn == r[n-1].Largest+1 {
		s.r[n-1].Largest = pn
		return false, false
	}
	for i := n - 1; i >= 0; i-- {
		if pn >= r[i].Smallest && pn <= r[i].Largest {
			return true, false
		}
		if pn > r[i].Largest {
			// pn lies in the gap between ranges i and i+1.
			high := pn == r[i].Largest+1
			low := pn+1 == r[i+1].Smallest
			switch {
			case high && low:
				r[i].Largest = r[i+1].Largest
				s.r = append(r[:i+1], r[i+2:]...)
			case high:
				r[i].Largest = pn
			case low:
				r[i+1].Smallest = pn
			default:
				return false, s.insert(i+1, pn)
			}
			return false, false
		}
	}
	// Below every range.
	if pn+1 == r[0].Smallest {
		r[0].Smallest = pn
		return false, false
	}
	return false, s.insert(0, pn)
}

// insert adds the range [pn, pn] at index i, first dropping the oldest
// range if the set is full. It reports whether a range was dropped.
func (s *rangeSet) insert(i int, pn uint64) (dropped bool) {
	if len(s.r) == cap(s.r) {
		if i == 0 {
			// The new range would be the oldest: drop it at once.
			s.floor = pn + 1
			return true
		}
		s.floor = s.r[0].Largest + 1
		s.r = append(s.r[:0], s.r[1:]...)
		i--
		dropped = true
	}
	s.r = append(s.r, wire.AckRange{})
	copy(s.r[i+1:], s.r[i:])
	s.r[i] = wire.AckRange{Smallest: pn, Largest: pn}
	return dropped
}

// prune forgets every packet number <= pn; later arrivals of them count as
// duplicates.
func (s *rangeSet) prune(pn uint64) {
	if pn == wire.NoPacketNumber || pn < s.floor {
		return
	}
	s.floor = pn + 1
	k := 0
	for k < len(s.r) && s.r[k].Largest <= pn {
		k++
	}
	s.r = append(s.r[:0], s.r[k:]...)
	if len(s.r) > 0 && s.r[0].Smallest <= pn {
		s.r[0].Smallest = pn + 1
	}
}
