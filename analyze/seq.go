package analyze

// unwrap maps the 32-bit sequence number seq to a 64-bit offset from base,
// choosing the value nearest to ref (a recent offset in the same direction).
// This keeps arithmetic correct across sequence-number wrap-around.
func unwrap(seq, base uint32, ref int64) int64 {
	rel := seq - base
	d := int32(rel - uint32(ref))
	return ref + int64(d)
}

// maxRanges bounds a rangeSet. A real SACK scoreboard rarely holds more than
// a handful of holes; a hostile capture must not grow it without bound.
const maxRanges = 64

// span is a half-open sequence range [l, r).
type span struct{ l, r int64 }

// rangeSet is a small sorted set of disjoint, non-adjacent spans.
type rangeSet struct {
	s []span
}

// add inserts [l, r), merging overlaps. When the set is full the highest
// span is dropped.
func (rs *rangeSet) add(l, r int64) {
	if l >= r {
		return
	}
	out := rs.s[:0:0]
	placed := false
	for _, x := range rs.s {
		switch {
		case x.r < l:
			out = append(out, x)
		case r < x.l:
			if !placed {
				out = append(out, span{l, r})
				placed = true
			}
			out = append(out, x)
		default: // overlap or adjacency: absorb
			l, r = min(l, x.l), max(r, x.r)
		}
	}
	if !placed {
		out = append(out, span{l, r})
	}
	if len(out) > maxRanges {
		out = out[:maxRanges]
	}
	rs.s = out
}

// pruneBelow drops everything below a (cumulatively acknowledged).
func (rs *rangeSet) pruneBelow(a int64) {
	i := 0
	for _, x := range rs.s {
		if x.r <= a {
			continue
		}
		if x.l < a {
			x.l = a
		}
		rs.s[i] = x
		i++
	}
	rs.s = rs.s[:i]
}

// covers reports whether [l, r) lies entirely inside one span.
func (rs *rangeSet) covers(l, r int64) bool {
	for _, x := range rs.s {
		if x.l <= l && r <= x.r {
			return true
		}
	}
	return false
}

// containing returns the span holding point a, if any.
func (rs *rangeSet) containing(a int64) (span, bool) {
	for _, x := range rs.s {
		if x.l <= a && a < x.r {
			return x, true
		}
	}
	return span{}, false
}

// overlaps reports whether [l, r) intersects any span.
func (rs *rangeSet) overlaps(l, r int64) bool {
	for _, x := range rs.s {
		if x.l < r && l < x.r {
			return true
		}
	}
	return false
}

// remove deletes [l, r) from the set.
func (rs *rangeSet) remove(l, r int64) {
	if l >= r || !rs.overlaps(l, r) {
		return
	}
	var out []span
	for _, x := range rs.s {
		if x.r <= l || r <= x.l {
			out = append(out, x)
			continue
		}
		if x.l < l {
			out = append(out, span{x.l, l})
		}
		if r < x.r {
			out = append(out, span{r, x.r})
		}
	}
	if len(out) > maxRanges {
		out = out[:maxRanges]
	}
	rs.s = out
}
