package cc

import "cmp"

// This file holds Kathleen Nichols' windowed min/max filter (the algorithm
// Linux's lib/win_minmax.c and BBR use): it tracks the best, second-best
// and third-best samples, each from a later sub-window, so the extreme
// over a sliding window is kept in constant space and time.

// filterSample is one (time, value) pair of a windowed filter.
type filterSample[V cmp.Ordered] struct {
	t int64
	v V
}

// windowed is the shared machinery of MaxFilter and MinFilter. better
// reports whether a is at least as good as b (>= for max, <= for min).
type windowed[V cmp.Ordered] struct {
	window int64
	s      [3]filterSample[V]
	set    bool
	isMin  bool
}

func (w *windowed[V]) better(a, b V) bool {
	if w.isMin {
		return a <= b
	}
	return a >= b
}

func (w *windowed[V]) reset(v V, t int64) V {
	w.s = [3]filterSample[V]{{t, v}, {t, v}, {t, v}}
	w.set = true
	return v
}

func (w *windowed[V]) update(v V, t int64) V {
	nv := filterSample[V]{t, v}
	if !w.set || w.better(v, w.s[0].v) || t-w.s[2].t > w.window {
		return w.reset(v, t)
	}
	if w.better(v, w.s[1].v) {
		w.s[1], w.s[2] = nv, nv
	} else if w.better(v, w.s[2].v) {
		w.s[2] = nv
	}
	// Age out the best sample when it left the window, and make sure the
	// second and third choices come from later quarters/halves of it.
	dt := t - w.s[0].t
	switch {
	case dt > w.window:
		w.s[0], w.s[1], w.s[2] = w.s[1], w.s[2], nv
		if t-w.s[0].t > w.window {
			w.s[0], w.s[1], w.s[2] = w.s[1], w.s[2], nv
		}
	case w.s[1].t == w.s[0].t && dt > w.window/4:
		w.s[1], w.s[2] = nv, nv
	case w.s[2].t == w.s[1].t && dt > w.window/2:
		w.s[2] = nv
	}
	return w.s[0].v
}

// MaxFilter tracks the maximum of the values seen over the last Window
// time units. The time unit is the caller's (nanoseconds, round count,
// cycle count), and times passed to Update must not decrease. A sample
// taken at t stays eligible while now-t <= window. The zero value is not
// usable; use NewMaxFilter.
type MaxFilter[V cmp.Ordered] struct{ w windowed[V] }

// NewMaxFilter returns an empty max filter over window time units.
func NewMaxFilter[V cmp.Ordered](window int64) MaxFilter[V] {
	return MaxFilter[V]{windowed[V]{window: window}}
}

// Update adds v measured at t and returns the windowed maximum.
func (f *MaxFilter[V]) Update(v V, t int64) V { return f.w.update(v, t) }

// Reset forgets all samples and starts over with v measured at t.
func (f *MaxFilter[V]) Reset(v V, t int64) { f.w.reset(v, t) }

// Get returns the current windowed maximum (the zero V when empty).
func (f *MaxFilter[V]) Get() V { return f.w.s[0].v }

// MinFilter tracks the minimum of the values seen over the last window
// time units, with the same time rules as MaxFilter. The zero value is not
// usable; use NewMinFilter.
type MinFilter[V cmp.Ordered] struct{ w windowed[V] }

// NewMinFilter returns an empty min filter over window time units.
func NewMinFilter[V cmp.Ordered](window int64) MinFilter[V] {
	return MinFilter[V]{windowed[V]{window: window, isMin: true}}
}

// Update adds v measured at t and returns the windowed minimum.
func (f *MinFilter[V]) Update(v V, t int64) V { return f.w.update(v, t) }

// Reset forgets all samples and starts over with v measured at t.
func (f *MinFilter[V]) Reset(v V, t int64) { f.w.reset(v, t) }

// Get returns the current windowed minimum (the zero V when empty).
func (f *MinFilter[V]) Get() V { return f.w.s[0].v }
