package stream

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// segment is a piece of a stream for the receive tests.
type segment struct {
	off uint64
	n   int
	fin bool
}

func TestRecvReassembly(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := newRand(t, seed)
		size := 1 + rng.IntN(300_000)
		src := randBytes(rng, size)
		cf := newConn(t, Config{ChunkBytes: 4096, InitialStreamWindow: 512 << 10, InitialConnWindow: 512 << 10}, 0)
		r := NewRecvStream(1, cf)

		// Random segmentation, with some overlapping and duplicated segments.
		var segs []segment
		for off := 0; off < size; {
			n := min(1+rng.IntN(3000), size-off)
			segs = append(segs, segment{uint64(off), n, off+n == size})
			if rng.IntN(4) == 0 { // an overlap straddling this segment's end
				o := off + rng.IntN(n)
				segs = append(segs, segment{uint64(o), min(rng.IntN(2000)+1, size-o), false})
			}
			off += n
		}
		for range len(segs) / 5 {
			segs = append(segs, segs[rng.IntN(len(segs))])
		}
		rng.Shuffle(len(segs), func(i, j int) { segs[i], segs[j] = segs[j], segs[i] })

		var got []byte
		buf := make([]byte, 1+rng.IntN(5000))
		fin := false
		for _, sg := range segs {
			if err := r.HandleFrame(sg.off, src[sg.off:sg.off+uint64(sg.n)], sg.fin); err != nil {
				t.Fatalf("seed %d: HandleFrame(%d, %d): %v", seed, sg.off, sg.n, err)
			}
			if rng.IntN(3) == 0 {
				n, f := r.Read(buf)
				got, fin = append(got, buf[:n]...), f
			}
		}
		for !fin {
			n, f := r.Read(buf)
			if n == 0 && !f {
				t.Fatalf("seed %d: stuck at %d of %d bytes", seed, len(got), size)
			}
			got, fin = append(got, buf[:n]...), f
		}
		if sha256.Sum256(got) != sha256.Sum256(src) {
			t.Fatalf("seed %d: reassembled %d bytes differ from the %d sent", seed, len(got), size)
		}
		if !r.Done() || cf.Pool().InUse() != 0 || cf.Budget().Used() != 0 {
			t.Fatalf("seed %d: Done=%v chunks %d budget %d", seed, r.Done(), cf.Pool().InUse(), cf.Budget().Used())
		}
	}
}

// TestRecvReadInto: a reader that lends its buffer between reads gets
// the stream whole and in order whatever the segments' order, overlaps
// and repeats; in-order data needs no chunk; what does not fit in the lent
// buffer, or comes after a gap, waits in the stream's buffer.
func TestRecvReadInto(t *testing.T) {
	cfg := Config{ChunkBytes: 4096, InitialStreamWindow: 512 << 10, InitialConnWindow: 512 << 10}
	t.Run("cases", func(t *testing.T) {
		src := pattern(10_000)
		cf := newConn(t, cfg, 0)
		r := NewRecvStream(1, cf)
		lent := make([]byte, 3000)
		r.ReadInto(lent)
		must := func(off, n int, fin bool) {
			t.Helper()
			if err := r.HandleFrame(uint64(off), src[off:off+n], fin); err != nil {
				t.Fatal(err)
			}
		}
		must(0, 1000, false) // in order: straight into the lent buffer
		if r.Taken() != 1000 || r.Readable() != 0 || cf.Pool().InUse() != 0 {
			t.Fatalf("in order: taken %d, readable %d, chunks %d; want 1000, 0, 0", r.Taken(), r.Readable(), cf.Pool().InUse())
		}
		must(2000, 1000, false) // after a gap: buffered
		must(500, 1500, false)  // fills the gap (and overlaps): its new bytes go to the lent buffer
		if r.Taken() != 2000 || r.Readable() != 1000 {
			t.Fatalf("gap filled: taken %d, readable %d; want 2000, 1000", r.Taken(), r.Readable())
		}
		must(3000, 2000, false) // bytes wait to be read: buffered, even with room lent
		if r.Taken() != 2000 || r.Readable() != 3000 {
			t.Fatalf("behind readable bytes: taken %d, readable %d; want 2000, 3000", r.Taken(), r.Readable())
		}
		if k := r.ReadInto(nil); k != 2000 || !bytes.Equal(lent[:k], src[:k]) {
			t.Fatalf("ReadInto(nil) = %d; want 2000 bytes of the stream", k)
		}
		buf := make([]byte, 10_000)
		if n, fin := r.Read(buf); n != 3000 || fin || !bytes.Equal(buf[:n], src[2000:5000]) {
			t.Fatalf("Read = %d, %v; want bytes 2000-5000", n, fin)
		}
		lent = make([]byte, 3000)
		r.ReadInto(lent)
		must(5000, 5000, true) // more than the lent buffer holds: the rest is buffered
		if k := r.ReadInto(nil); k != 3000 || !bytes.Equal(lent, src[5000:8000]) {
			t.Fatalf("ReadInto(nil) = %d; want bytes 5000-8000", k)
		}
		if n, fin := r.Read(buf); n != 2000 || !fin || !bytes.Equal(buf[:n], src[8000:]) {
			t.Fatalf("Read = %d, %v; want bytes 8000-10000 and the FIN", n, fin)
		}
		if !r.Done() || cf.Pool().InUse() != 0 || cf.Budget().Used() != 0 || cf.recv.consumed != 10_000 {
			t.Fatalf("Done=%v chunks %d budget %d consumed %d", r.Done(), cf.Pool().InUse(), cf.Budget().Used(), cf.recv.consumed)
		}
	})
	t.Run("random", func(t *testing.T) {
		for seed := uint64(1); seed <= 20; seed++ {
			rng := newRand(t, seed)
			size := 1 + rng.IntN(300_000)
			src := randBytes(rng, size)
			cf := newConn(t, cfg, 0)
			r := NewRecvStream(1, cf)
			var segs []segment
			for off := 0; off < size; {
				n := min(1+rng.IntN(3000), size-off)
				segs = append(segs, segment{uint64(off), n, off+n == size})
				if rng.IntN(4) == 0 {
					o := off + rng.IntN(n)
					segs = append(segs, segment{uint64(o), min(rng.IntN(2000)+1, size-o), false})
				}
				off += n
			}
			for range len(segs) / 5 {
				segs = append(segs, segs[rng.IntN(len(segs))])
			}
			// Mostly in order, some segments moved later, as a lossy path delivers them.
			for i := range segs {
				if j := i + rng.IntN(8); rng.IntN(10) == 0 && j < len(segs) {
					segs[i], segs[j] = segs[j], segs[i]
				}
			}
			var got []byte
			lent := make([]byte, rng.IntN(5000))
			r.ReadInto(lent)
			buf := make([]byte, 1+rng.IntN(5000))
			fin, taken := false, 0
			read := func() {
				k := r.ReadInto(nil)
				got, taken = append(got, lent[:k]...), taken+k
				n, f := r.Read(buf)
				got, fin = append(got, buf[:n]...), f
				lent = make([]byte, rng.IntN(5000))
				r.ReadInto(lent)
			}
			for _, sg := range segs {
				if err := r.HandleFrame(sg.off, src[sg.off:sg.off+uint64(sg.n)], sg.fin); err != nil {
					t.Fatalf("seed %d: HandleFrame(%d, %d): %v", seed, sg.off, sg.n, err)
				}
				if rng.IntN(3) == 0 {
					read()
				}
			}
			for !fin {
				before := len(got)
				read()
				if len(got) == before && !fin {
					t.Fatalf("seed %d: stuck at %d of %d bytes", seed, len(got), size)
				}
			}
			if k := r.ReadInto(nil); k != 0 {
				t.Fatalf("seed %d: %d bytes taken after the FIN", seed, k)
			}
			if sha256.Sum256(got) != sha256.Sum256(src) {
				t.Fatalf("seed %d: reassembled %d bytes differ from the %d sent", seed, len(got), size)
			}
			if taken == 0 {
				t.Errorf("seed %d: no byte taken through the lent buffer", seed)
			}
			if !r.Done() || cf.Pool().InUse() != 0 || cf.Budget().Used() != 0 {
				t.Fatalf("seed %d: Done=%v chunks %d budget %d", seed, r.Done(), cf.Pool().InUse(), cf.Budget().Used())
			}
		}
	})
}

func TestRecvErrors(t *testing.T) {
	type op struct {
		reset bool
		off   uint64
		n     int
		fin   bool
	}
	tests := []struct {
		name string
		ops  []op // all but the last must succeed
		want error
	}{
		{"beyond stream credit", []op{{off: 256<<10 - 10, n: 11}}, ErrFlowControl},
		{"at stream credit is fine, one more byte is not", []op{{off: 256<<10 - 10, n: 10}, {off: 256 << 10, n: 1}}, ErrFlowControl},
		{"beyond connection credit", []op{{off: 0, n: 200 << 10}, {off: 0, n: 100 << 10}}, ErrFlowControl}, // second stream, see below
		{"data beyond final size", []op{{off: 0, n: 100, fin: true}, {off: 100, n: 1}}, ErrFinalSize},
		{"final size changed", []op{{off: 0, n: 100, fin: true}, {off: 0, n: 50, fin: true}}, ErrFinalSize},
		{"FIN below data received", []op{{off: 1000, n: 100}, {off: 0, n: 50, fin: true}}, ErrFinalSize},
		{"reset changes final size", []op{{off: 0, n: 100, fin: true}, {reset: true, off: 101}}, ErrFinalSize},
		{"reset below data received", []op{{off: 0, n: 100}, {reset: true, off: 99}}, ErrFinalSize},
		{"reset beyond credit", []op{{reset: true, off: 256<<10 + 1}}, ErrFlowControl},
		{"data after reset beyond final size", []op{{reset: true, off: 10}, {off: 5, n: 6}}, ErrFinalSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cf := newConn(t, Config{InitialStreamWindow: 256 << 10, InitialConnWindow: 256 << 10}, 0)
			r := NewRecvStream(0, cf)
			other := NewRecvStream(4, cf)
			data := make([]byte, 300<<10)
			do := func(i int, o op) error {
				if o.reset {
					return r.OnResetStream(3, o.off)
				}
				s := r
				if tt.name == "beyond connection credit" && i == 1 {
					s = other
				}
				return s.HandleFrame(o.off, data[:o.n], o.fin)
			}
			for i, o := range tt.ops[:len(tt.ops)-1] {
				if err := do(i, o); err != nil {
					t.Fatalf("op %d: %v", i, err)
				}
			}
			before := *r
			err := do(len(tt.ops)-1, tt.ops[len(tt.ops)-1])
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if r.highest != before.highest || r.finalSize != before.finalSize || r.finalKnown != before.finalKnown {
				t.Fatal("state changed on error")
			}
			if c := CloseCode(err); c == 1 {
				t.Fatalf("CloseCode(%v) = internal error", err)
			}
		})
	}
}

func TestRecvCreditThreshold(t *testing.T) {
	const win = 256 << 10
	cf := newConn(t, Config{InitialStreamWindow: win}, 0)
	r := NewRecvStream(0, cf)
	if err := r.HandleFrame(0, make([]byte, win), false); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, win/4-1)
	r.Read(buf)
	if _, ok := r.ShouldSendMaxStreamData(1, 0); ok {
		t.Fatal("update before a quarter of the window was read")
	}
	r.Read(buf[:1])
	m, ok := r.ShouldSendMaxStreamData(1, 0)
	if !ok || m != win/4+win {
		t.Fatalf("update = %d, %v; want %d", m, ok, win/4+win)
	}
	if _, ok := r.ShouldSendMaxStreamData(1, 0); ok {
		t.Fatal("second update without reading")
	}
	if err := r.HandleFrame(win, make([]byte, win/4), true); err != nil {
		t.Fatalf("data within the new credit: %v", err)
	}
	r.Read(make([]byte, win))
	if _, ok := r.ShouldSendMaxStreamData(1, 0); ok {
		t.Fatal("update after the final size is known")
	}
}

// simulateReader drives one stream whose sender always uses all its credit
// and whose credit updates reach the sender one rtt later. The application
// reads at most readBytesPerRTT per rtt. It returns the stream window after
// rounds round trips.
func simulateReader(t *testing.T, cfg Config, rtt time.Duration, readBytesPerRTT uint64, rounds int) (windowBytes uint64, r *RecvStream, cf *ConnFlow) {
	t.Helper()
	cf = newConn(t, cfg, 0)
	r = NewRecvStream(0, cf)
	now := monotime.Time(1)
	var sent uint64
	buf := make([]byte, 64<<10)
	for range rounds {
		// The peer sends everything its credit allows, in 64 KiB frames.
		_, limit := r.RecvWindow()
		for sent < limit {
			n := min(limit-sent, uint64(len(buf)))
			if err := r.HandleFrame(sent, buf[:n], false); err != nil {
				t.Fatal(err)
			}
			sent += n
		}
		// The application reads, in 16 steps over the RTT; credit
		// updates go out as they are due.
		for i := range 16 {
			want := readBytesPerRTT / 16
			for want > 0 {
				n, _ := r.Read(buf[:min(want, uint64(len(buf)))])
				if n == 0 {
					break
				}
				want -= uint64(n)
			}
			r.ShouldSendMaxStreamData(now.Add(rtt*time.Duration(i)/16), rtt)
			cf.ShouldSendMaxData(now.Add(rtt*time.Duration(i)/16), rtt)
		}
		now = now.Add(rtt)
	}
	w, _ := r.RecvWindow()
	return w, r, cf
}

func TestRecvAutoTune(t *testing.T) {
	const rtt = 600 * time.Millisecond
	tests := []struct {
		name          string
		readPerRTT    uint64
		minWin, maxWn uint64
	}{
		// 250 Mbit/s x 600 ms = 18.75 MB per RTT: the window must reach
		// beyond the BDP, which needs the 32 MiB maximum.
		{"fast reader grows to the maximum", 250e6 / 8 * 6 / 10, 32 << 20, 32 << 20},
		// 3 MiB per RTT: the window settles between 2 and 4 times that.
		{"moderate reader grows to 2-4 times its rate x RTT", 3 << 20, 6 << 20, 16 << 20},
		// 1 Mbit/s: 75 KB per RTT, well within the initial 256 KiB.
		{"slow reader keeps the initial window", 1e6 / 8 * 6 / 10, 256 << 10, 256 << 10},
		{"stalled reader keeps the initial window", 0, 256 << 10, 256 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, _, cf := simulateReader(t, Config{}, rtt, tt.readPerRTT, 40)
			if w < tt.minWin || w > tt.maxWn {
				t.Fatalf("window %d, want in [%d, %d]", w, tt.minWin, tt.maxWn)
			}
			if cw, _ := cf.RecvWindow(); cw < w {
				t.Fatalf("connection window %d below the stream window %d", cw, w)
			}
		})
	}
	t.Run("no RTT sample: no growth", func(t *testing.T) {
		if w, _, _ := simulateReader(t, Config{}, 0, 10<<20, 10); w != 256<<10 {
			t.Fatalf("window %d", w)
		}
	})
}

func TestRecvStopSending(t *testing.T) {
	cf := newConn(t, Config{}, 0)
	r := NewRecvStream(0, cf)
	r.HandleFrame(1000, make([]byte, 1000), false)
	r.HandleFrame(0, make([]byte, 500), false)
	if !r.StopSending(5) {
		t.Fatal("StopSending says not to send STOP_SENDING")
	}
	if r.StopSending(5) {
		t.Fatal("second StopSending")
	}
	if cf.Pool().InUse() != 0 || cf.Budget().Used() != 0 {
		t.Fatalf("chunks %d, budget %d after StopSending", cf.Pool().InUse(), cf.Budget().Used())
	}
	if err := r.HandleFrame(2000, make([]byte, 100), true); err != nil {
		t.Fatal(err)
	}
	if n, fin := r.Read(make([]byte, 10)); n != 0 || fin {
		t.Fatal("Read after StopSending returned data")
	}
	if !r.Done() {
		t.Fatal("not Done: stopped with final size known")
	}
	// Discarded bytes were returned to the connection's credit.
	if cf.recv.consumed != 2100 || cf.received != 2100 {
		t.Fatalf("connection consumed %d received %d, want 2100", cf.recv.consumed, cf.received)
	}
}

func TestRecvReset(t *testing.T) {
	cf := newConn(t, Config{}, 0)
	r := NewRecvStream(0, cf)
	r.HandleFrame(0, []byte("hello"), false)
	if err := r.OnResetStream(42, 3000); err != nil {
		t.Fatal(err)
	}
	if code, ok := r.ResetCode(); !ok || code != 42 || !r.Done() {
		t.Fatalf("ResetCode = %d, %v, Done=%v", code, ok, r.Done())
	}
	if err := r.HandleFrame(5, bytes.Repeat([]byte{1}, 100), false); err != nil {
		t.Fatalf("late data within the final size: %v", err)
	}
	if err := r.OnResetStream(42, 3000); err != nil {
		t.Fatalf("repeated reset: %v", err)
	}
	if cf.recv.consumed != 3000 || cf.received != 3000 || cf.Budget().Used() != 0 || cf.Pool().InUse() != 0 {
		t.Fatalf("consumed %d received %d budget %d chunks %d", cf.recv.consumed, cf.received, cf.Budget().Used(), cf.Pool().InUse())
	}
}

func TestRecvGrowWindow(t *testing.T) {
	const init, maxWin, budget = 64 << 10, 1 << 20, 2 << 20
	cfg := Config{ChunkBytes: 4096, InitialStreamWindow: init, MaxStreamWindow: maxWin,
		InitialConnWindow: 256 << 10, BudgetBytes: budget}
	tests := []struct {
		name       string
		window     uint64
		maxReserve uint64
		wantLimit  uint64 // 0: ok false
	}{
		{"below the initial window", init / 2, budget, 0},
		{"grows to the target", 512 << 10, budget, 512 << 10},
		{"bounded by MaxStreamWindow", 8 << 20, budget, maxWin},
		{"bounded by maxReserve", 512 << 10, 100 << 10, init + 100<<10},
		{"nothing to reserve", 512 << 10, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cf := newConn(t, cfg, 0)
			r := NewRecvStream(1, cf)
			connBefore, _ := cf.RecvWindow()
			limit, ok := r.GrowWindow(tt.window, tt.maxReserve)
			if ok != (tt.wantLimit != 0) || limit != tt.wantLimit {
				t.Fatalf("GrowWindow(%d, %d) = %d, %v; want %d", tt.window, tt.maxReserve, limit, ok, tt.wantLimit)
			}
			win, adv := r.RecvWindow()
			if !ok {
				if win != init || adv != init || cf.Budget().Used() != init {
					t.Fatalf("unchanged stream: window %d limit %d budget %d", win, adv, cf.Budget().Used())
				}
				return
			}
			if win != limit || adv != limit || cf.Budget().Used() != limit {
				t.Fatalf("window %d, limit %d, budget used %d; want all %d", win, adv, cf.Budget().Used(), limit)
			}
			if connWin, _ := cf.RecvWindow(); connWin < max(connBefore, limit+limit/2) {
				t.Fatalf("connection window %d, want >= 1.5 x %d", connWin, limit)
			}
			// The connection credit follows at once, and the peer may use the
			// whole stream credit.
			if connLimit, ok := cf.ShouldSendMaxData(monotime.Time(1), 0); ok && connLimit < limit {
				t.Fatalf("MAX_DATA %d below the stream credit %d", connLimit, limit)
			}
			if err := r.HandleFrame(0, make([]byte, limit), false); err != nil {
				t.Fatalf("data up to the granted credit: %v", err)
			}
		})
	}

	t.Run("budget shared and released", func(t *testing.T) {
		cf := newConn(t, cfg, 0)
		var rs []*RecvStream
		for i := range 8 {
			r := NewRecvStream(uint64(4*i+1), cf)
			r.GrowWindow(maxWin, cf.Budget().Available()/2)
			rs = append(rs, r)
		}
		if used := cf.Budget().Used(); used > budget+8*init {
			t.Fatalf("budget used %d, want <= %d + floors %d", used, budget, 8*init)
		}
		for _, r := range rs {
			if _, ok := r.GrowWindow(maxWin, budget); ok && cf.Budget().Used() > budget+8*init {
				t.Fatalf("budget used %d beyond its limit", cf.Budget().Used())
			}
			r.StopSending(0)
		}
		if cf.Budget().Used() != 0 {
			t.Fatalf("budget used %d after every stream stopped", cf.Budget().Used())
		}
	})

	t.Run("final size known", func(t *testing.T) {
		cf := newConn(t, cfg, 0)
		r := NewRecvStream(1, cf)
		if err := r.HandleFrame(0, make([]byte, 10), true); err != nil {
			t.Fatal(err)
		}
		if _, ok := r.GrowWindow(maxWin, budget); ok {
			t.Fatal("GrowWindow granted credit after the FIN")
		}
	})
}
