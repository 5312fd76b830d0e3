package driver

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// TestRxHold: the reader holds its next read only while full-size
// datagrams keep coming and its reads empty the socket, for about what
// rxHoldDatagrams (48) take at their spacing, at most the configured
// hold.
func TestRxHold(t *testing.T) {
	full := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = 1452
		}
		return s
	}
	us := func(v float64) monotime.Time { return monotime.Time(1e9 + v*1e3) }

	// 50 Mbit/s: one datagram every 240 µs. The first read is never held;
	// then the hold grows to the 1 ms cap and each read gathers about 4.
	h := rxHolder{max: time.Millisecond, batch: 64}
	if d := h.after(us(0), full(1)); d != 0 {
		t.Fatalf("first read held %v", d)
	}
	var d time.Duration
	at := 0.0
	for range 3 {
		at += 240
		d = h.after(us(at), full(1))
	}
	for range 20 {
		at += float64(d/time.Microsecond) + 10
		d = h.after(us(at), full(4))
	}
	if d != time.Millisecond {
		t.Fatalf("hold at 50 Mbit/s settles at %v, want the 1 ms cap", d)
	}

	// ACKs are never held, however close.
	h = rxHolder{max: time.Millisecond, batch: 64}
	for i := range 10 {
		if d := h.after(us(float64(100*i)), []int{60}); d != 0 {
			t.Fatalf("ACK-sized datagrams held %v", d)
		}
	}

	// A datagram after a pause is not held; full reads are not either.
	h = rxHolder{max: time.Millisecond, batch: 64}
	h.after(us(0), full(1))
	if d := h.after(us(5000), full(1)); d != 0 {
		t.Fatalf("a datagram after a 5 ms pause held %v", d)
	}
	if d := h.after(us(5100), full(64)); d != 0 {
		t.Fatalf("a full read (64 datagrams) held %v", d)
	}

	// 250 Mbit/s (a datagram every 48 µs): reads that emptied the socket
	// are held again, for what 48 take but at most the 2 ms cap. At 1 Gbit/s
	// (12 µs) the hold is what 48 take.
	for _, c := range []struct {
		spacingUs float64
		want      time.Duration
	}{
		{48, 2 * time.Millisecond},
		{12, 48 * 12 * time.Microsecond},
	} {
		h = rxHolder{max: 2 * time.Millisecond, batch: 64}
		at = 0
		h.after(us(at), full(1))
		d = 0
		for range 20 {
			gap := max(float64(d/time.Microsecond), c.spacingUs)
			at += gap
			d = h.after(us(at), full(int(gap/c.spacingUs)))
		}
		if d < c.want*9/10 || d > c.want*11/10 {
			t.Fatalf("hold with a datagram every %v µs: %v, want about %v", c.spacingUs, d, c.want)
		}
	}

	// At high rates the hold would be too short to be worth a sleep: a
	// datagram every 2 µs (6 Gbit/s), so 48 take 96 µs.
	h = rxHolder{max: 2 * time.Millisecond, batch: 64}
	at = 0
	for range 20 {
		at += 6
		if d = h.after(us(at), full(3)); d != 0 {
			t.Fatalf("three datagrams every 6 µs held %v", d)
		}
	}

	// Off.
	h = rxHolder{max: -1, batch: 64}
	h.after(us(0), full(1))
	if d := h.after(us(240), full(1)); d != 0 {
		t.Fatalf("hold off, held %v", d)
	}
}

// TestRxHoldCap: the hold grows with a long path's RTT, to a 32nd of it,
// at most twice the configured hold, and never below it; off stays
// off.
func TestRxHoldCap(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		hold, rtt, want time.Duration
	}{
		{2 * ms, 0, 2 * ms},       // no RTT sample yet
		{2 * ms, 40 * ms, 2 * ms}, // a 32nd is less than the hold
		{2 * ms, 100 * ms, 3125 * time.Microsecond},
		{2 * ms, 200 * ms, 4 * ms}, // capped at 2 × the hold
		{ms, 100 * ms, 2 * ms},     // the same
		{-1, 100 * ms, -1},         // off
	} {
		if got := rxHoldCap(c.hold, c.rtt); got != c.want {
			t.Errorf("rxHoldCap(%v, %v) = %v, want %v", c.hold, c.rtt, got, c.want)
		}
	}

	// At 50 Mbit/s on a 100 ms path the reader settles at the grown cap:
	// about thirteen datagrams a read instead of four.
	h := rxHolder{max: rxHoldCap(2*ms, 100*ms), batch: 64}
	const spacing = 240 * time.Microsecond
	sizes := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = 1452
		}
		return s
	}
	start := monotime.Time(1e9)
	at, arrived := start, 1 // the first datagram wakes the reader
	var d time.Duration
	for range 30 {
		d = h.after(at, sizes(max(1, int(at.Sub(start)/spacing)+1-arrived)))
		arrived = int(at.Sub(start)/spacing) + 1
		if d == 0 {
			d = spacing // waits in the poller for the next one
		}
		at = at.Add(d)
	}
	if d != 3125*time.Microsecond {
		t.Fatalf("hold at 50 Mbit/s on a 100 ms path settles at %v, want 3.125 ms", d)
	}
}

// TestGatherWaitFor: a ReadGather's wait grows with the path's min RTT,
// to a 16th of it, at most twice the wait asked for; below 128 ms (for
// the near edge's 8 ms) and for a zero wait nothing changes.
func TestGatherWaitFor(t *testing.T) {
	const w = 8 * time.Millisecond
	for _, tc := range []struct {
		wait, minRTT, want time.Duration
	}{
		{w, 0, w},
		{w, 40 * time.Millisecond, w},
		{w, 128 * time.Millisecond, w},
		{w, 200 * time.Millisecond, 12500 * time.Microsecond},
		{w, 600 * time.Millisecond, 16 * time.Millisecond},
		{0, 600 * time.Millisecond, 0},
	} {
		if got := gatherWaitFor(tc.wait, tc.minRTT); got != tc.want {
			t.Errorf("gatherWaitFor(%v, %v) = %v, want %v", tc.wait, tc.minRTT, got, tc.want)
		}
	}
}

// TestGatherWaitShared: beyond four streams gathering at once a
// ReadGather's wait grows in proportion to them, at most four times the
// wait asked; a zero wait stays zero.
func TestGatherWaitShared(t *testing.T) {
	const w = 8 * time.Millisecond
	for _, tc := range []struct {
		wait      time.Duration
		gathering int
		want      time.Duration
	}{
		{w, 0, w}, {w, 1, w}, {w, 4, w},
		{w, 5, 10 * time.Millisecond},
		{w, 8, 16 * time.Millisecond},
		{w, 16, 32 * time.Millisecond},
		{w, 1000, 32 * time.Millisecond},
		{0, 1000, 0},
	} {
		if got := gatherWaitShared(tc.wait, tc.gathering); got != tc.want {
			t.Errorf("gatherWaitShared(%v, %d) = %v, want %v", tc.wait, tc.gathering, got, tc.want)
		}
	}
}

// TestGatherQuietFor: a gathering read is answered after twice the
// reader's longest hold without bytes, never sooner than 3 ms (also
// where the hold is off).
func TestGatherQuietFor(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct{ hold, want time.Duration }{
		{-1, 3 * ms}, {0, 3 * ms}, {ms, 3 * ms}, {2 * ms, 4 * ms}, {4 * ms, 8 * ms},
	} {
		if got := gatherQuietFor(tc.hold); got != tc.want {
			t.Errorf("gatherQuietFor(%v) = %v, want %v", tc.hold, got, tc.want)
		}
	}
}

// TestRxHoldTarget: where the cap has grown past the configured hold, a
// hold aims at proportionally more datagrams, at most three quarters of
// a batch (or rxHoldDatagrams, if more).
func TestRxHoldTarget(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		base, max time.Duration
		batch     int
		want      int
	}{
		{2 * ms, 2 * ms, 64, 48},  // a short path: as configured
		{2 * ms, 4 * ms, 64, 48},  // grown twice, three quarters of the batch
		{2 * ms, 4 * ms, 128, 96}, // a larger batch
		{2 * ms, 4 * ms, 8, 48},   // never below 48 (the read is then full, and not held)
		{ms, 3 * ms, 128, 96},     // a configured hold of 1 ms, grown three times
		{-1, -1, 64, 48},          // off: the reader never holds anyway
		{0, 4 * ms, 64, 48},       // no base given
	} {
		h := rxHolder{base: c.base, max: c.max, batch: c.batch}
		if got := h.target(); got != c.want {
			t.Errorf("target with base %v, max %v, batch %d = %d, want %d", c.base, c.max, c.batch, got, c.want)
		}
	}

	h := rxHolder{base: 2 * ms, max: rxHoldCap(2*ms, 200*ms), batch: 64}
	const spacing = 48 * time.Microsecond
	start := monotime.Time(1e9)
	at, arrived := start, 1
	var d time.Duration
	var n int
	for range 50 {
		now := int(at.Sub(start)/spacing) + 1
		n = max(1, now-arrived)
		sizes := make([]int, n)
		for i := range sizes {
			sizes[i] = 1452
		}
		d = h.after(at, sizes)
		arrived = now
		if d == 0 {
			d = spacing
		}
		at = at.Add(d)
	}
	if want := 48 * spacing; d < want*9/10 || d > want*11/10 || n < 40 || n > 56 {
		t.Fatalf("at 250 Mbit/s on a 200 ms path the reader settles at %v and %d datagrams a read, want about %v and 48", d, n, want)
	}
}
