package stream

// byteRange is the half-open range of stream offsets [start, end).
type byteRange struct{ start, end uint64 }

// rangeSet is a set of stream offsets kept as sorted, disjoint,
// non-adjacent ranges. Its slice is reused, so a set that stays small (the
// usual case: a few holes from losses or reordering) does not allocate in
// steady state. Operations are linear in the number of ranges.
type rangeSet struct {
	r []byteRange
}

func (s *rangeSet) empty() bool { return len(s.r) == 0 }

// first returns the lowest range; the set must not be empty.
func (s *rangeSet) first() byteRange { return s.r[0] }

// bytes returns the number of offsets in the set.
func (s *rangeSet) bytes() uint64 {
	var n uint64
	for _, r := range s.r {
		n += r.end - r.start
	}
	return n
}

// add inserts [start, end), merging it with ranges it overlaps or touches.
func (s *rangeSet) add(start, end uint64) {
	if start >= end {
		return
	}
	// i: first range that ends at or after start (may merge).
	i := 0
	for i < len(s.r) && s.r[i].end < start {
		i++
	}
	// j: first range that starts after end (cannot merge).
	j := i
	for j < len(s.r) && s.r[j].start <= end {
		j++
	}
	if i == j { // no overlap: insert at i
		s.r = append(s.r, byteRange{})
		copy(s.r[i+1:], s.r[i:])
		s.r[i] = byteRange{start, end}
		return
	}
	s.r[i] = byteRange{min(start, s.r[i].start), max(end, s.r[j-1].end)}
	s.r = append(s.r[:i+1], s.r[j:]...)
}

// remove deletes [start, end) from the set, splitting a range if needed.
func (s *rangeSet) remove(start, end uint64) {
	if start >= end {
		return
	}
	for i := 0; i < len(s.r); i++ {
		r := s.r[i]
		if r.end <= start {
			continue
		}
		if r.start >= end {
			return
		}
		switch {
		case r.start >= start && r.end <= end: // covered: drop
			s.r = append(s.r[:i], s.r[i+1:]...)
			i--
		case r.start < start && r.end > end: // split
			s.r = append(s.r, byteRange{})
			copy(s.r[i+2:], s.r[i+1:])
			s.r[i] = byteRange{r.start, start}
			s.r[i+1] = byteRange{end, r.end}
			return
		case r.start < start: // cut the tail
			s.r[i].end = start
		default: // cut the head
			s.r[i].start = end
			return
		}
	}
}

// removeBelow deletes every offset below x.
func (s *rangeSet) removeBelow(x uint64) {
	i := 0
	for i < len(s.r) && s.r[i].end <= x {
		i++
	}
	if i > 0 {
		s.r = append(s.r[:0], s.r[i:]...)
	}
	if len(s.r) > 0 && s.r[0].start < x {
		s.r[0].start = x
	}
}

// clear empties the set, keeping its storage.
func (s *rangeSet) clear() { s.r = s.r[:0] }
