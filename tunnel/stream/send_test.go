package stream

import (
	"bytes"
	"testing"
)

// checkFrame fails if f does not carry src[f.offset:] correctly.
func checkFrame(t *testing.T, f frame, src []byte) {
	t.Helper()
	if !bytes.Equal(f.data, src[f.offset:f.offset+uint64(len(f.data))]) {
		t.Fatalf("frame at %d (%d bytes): wrong data", f.offset, len(f.data))
	}
}

func TestSendInOrder(t *testing.T) {
	cf := newConn(t, Config{ChunkBytes: 4096}, 0)
	s := NewSendStream(4, cf, 1<<20)
	src := pattern(10000)
	if n := s.Write(src); n != len(src) {
		t.Fatalf("Write took %d of %d", n, len(src))
	}
	var next uint64
	for _, f := range popAll(s, 1350) {
		if f.offset != next || f.fin {
			t.Fatalf("frame at %d fin=%v, want offset %d without fin", f.offset, f.fin, next)
		}
		if f.offset/4096 != (f.offset+uint64(len(f.data))-1)/4096 {
			t.Fatalf("frame at %d (%d bytes) spans two chunks", f.offset, len(f.data))
		}
		checkFrame(t, f, src)
		next += uint64(len(f.data))
		s.OnAcked(f.offset, len(f.data), false)
	}
	if next != 10000 || s.Buffered() != 0 {
		t.Fatalf("sent %d, buffered %d; want 10000 and 0", next, s.Buffered())
	}
	if cf.Budget().Used() != 0 || cf.Pool().InUse() != 1 { // the chunk holding offset 10000 stays until Done
		t.Fatalf("after acking all: budget used %d, chunks in use %d", cf.Budget().Used(), cf.Pool().InUse())
	}
	if s.HasData() || s.Done() {
		t.Fatal("HasData or Done before CloseWrite")
	}
	s.CloseWrite()
	if n := s.Write([]byte{1}); n != 0 {
		t.Fatalf("Write after CloseWrite took %d", n)
	}
	f, ok := pop(s, 1350)
	if !ok || !f.fin || f.offset != 10000 || len(f.data) != 0 {
		t.Fatalf("want FIN-only frame at 10000, got %+v ok=%v", f, ok)
	}
	if _, ok := pop(s, 1350); ok || s.Done() {
		t.Fatal("a second FIN, or Done before the FIN was acked")
	}
	s.OnAcked(10000, 0, true)
	if !s.Done() || cf.Pool().InUse() != 0 {
		t.Fatalf("Done=%v, %d chunks in use after FIN acked", s.Done(), cf.Pool().InUse())
	}
}

func TestSendLossAndAck(t *testing.T) {
	const mtu = 1000
	type ev struct {
		lost  bool
		frame int // index of a frame popped before
		off   uint64
		n     int // partial range (n>0) instead of the whole frame
	}
	tests := []struct {
		name string
		evs  []ev
		// next frames popped after the events (offset, length), before new data at 5000
		want [][2]uint64
	}{
		{"middle frames lost, requeued first", []ev{{lost: true, frame: 2}, {lost: true, frame: 3}}, [][2]uint64{{2000, 1000}, {3000, 1000}, {5000, 1000}}},
		{"lost then acked: requeue cancelled", []ev{{lost: true, frame: 2}, {lost: true, frame: 3}, {frame: 2}}, [][2]uint64{{3000, 1000}, {5000, 1000}}},
		{"acked then reported lost: ignored", []ev{{frame: 1}, {lost: true, frame: 1}}, [][2]uint64{{5000, 1000}}},
		{"loss reported twice: once", []ev{{lost: true, frame: 4}, {lost: true, frame: 4}}, [][2]uint64{{4000, 1000}, {5000, 1000}}},
		{"partial ack inside a lost range", []ev{{off: 1200, n: 300}, {lost: true, frame: 1}}, [][2]uint64{{1000, 200}, {1500, 500}, {5000, 1000}}},
		{"partial ack after loss", []ev{{lost: true, frame: 1}, {off: 1200, n: 300}}, [][2]uint64{{1000, 200}, {1500, 500}, {5000, 1000}}},
		{"lost ranges in offset order", []ev{{lost: true, frame: 3}, {lost: true, frame: 0}}, [][2]uint64{{0, 1000}, {3000, 1000}, {5000, 1000}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cf := newConn(t, Config{}, 0)
			s := NewSendStream(0, cf, 1<<20)
			src := pattern(8000)
			s.Write(src)
			var sent []frame
			for range 5 {
				f, _ := pop(s, mtu)
				sent = append(sent, f)
			}
			for _, e := range tt.evs {
				off, n := e.off, e.n
				if n == 0 {
					off, n = sent[e.frame].offset, len(sent[e.frame].data)
				}
				if e.lost {
					s.OnLost(off, n, false)
				} else {
					s.OnAcked(off, n, false)
				}
			}
			for i, w := range tt.want {
				f, ok := pop(s, mtu)
				if !ok || f.offset != w[0] || uint64(len(f.data)) != w[1] {
					t.Fatalf("pop %d: got offset %d len %d ok=%v, want %d len %d", i, f.offset, len(f.data), ok, w[0], w[1])
				}
				checkFrame(t, f, src)
			}
		})
	}
}

func TestSendDuplicateAcks(t *testing.T) {
	cf := newConn(t, Config{}, 0)
	s := NewSendStream(0, cf, 1<<20)
	s.Write(pattern(5000))
	fs := popAll(s, 1000)
	for range 3 {
		s.OnAcked(fs[2].offset, len(fs[2].data), false) // out of order, repeated
	}
	if s.Buffered() != 5000 || cf.Budget().Used() != 5000 {
		t.Fatalf("ack above a hole freed bytes: buffered %d, budget %d", s.Buffered(), cf.Budget().Used())
	}
	for range 2 {
		for _, f := range fs[:2] {
			s.OnAcked(f.offset, len(f.data), false)
		}
	}
	if s.Buffered() != 2000 || cf.Budget().Used() != 2000 {
		t.Fatalf("buffered %d, budget %d; want 2000", s.Buffered(), cf.Budget().Used())
	}
	s.OnAcked(0, 5000, false)
	s.OnAcked(0, 5000, false)
	if s.Buffered() != 0 || cf.Budget().Used() != 0 {
		t.Fatalf("buffered %d, budget %d after acking all twice", s.Buffered(), cf.Budget().Used())
	}
}

func TestSendFin(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, s *SendStream)
	}{
		{"FIN rides on the last data frame", func(t *testing.T, s *SendStream) {
			s.Write(pattern(1500))
			s.CloseWrite()
			fs := popAll(s, 1000)
			if len(fs) != 2 || fs[0].fin || !fs[1].fin || fs[1].offset != 1000 {
				t.Fatalf("frames %+v", fs)
			}
			s.OnAcked(1000, 500, true)
			if s.Done() {
				t.Fatal("Done with bytes 0-1000 unacked")
			}
			s.OnAcked(0, 1000, false)
			if !s.Done() {
				t.Fatal("not Done")
			}
		}},
		{"empty stream: FIN-only at 0", func(t *testing.T, s *SendStream) {
			s.CloseWrite()
			if !s.HasData() {
				t.Fatal("no HasData with a FIN due")
			}
			f, ok := pop(s, 0)
			if !ok || !f.fin || f.offset != 0 {
				t.Fatalf("got %+v ok=%v", f, ok)
			}
			s.OnAcked(0, 0, true)
			if !s.Done() {
				t.Fatal("not Done")
			}
		}},
		{"lost FIN-only frame is resent", func(t *testing.T, s *SendStream) {
			s.Write(pattern(100))
			popAll(s, 1000)
			s.CloseWrite()
			f, _ := pop(s, 1000)
			s.OnAcked(0, 100, false)
			s.OnLost(f.offset, 0, true)
			f, ok := pop(s, 1000)
			if !ok || !f.fin || f.offset != 100 || len(f.data) != 0 {
				t.Fatalf("got %+v ok=%v", f, ok)
			}
			s.OnLost(100, 0, true) // lost again, then acked late
			s.OnAcked(100, 0, true)
			if s.HasData() || !s.Done() {
				t.Fatalf("HasData=%v Done=%v after FIN acked", s.HasData(), s.Done())
			}
		}},
		{"lost data+FIN is resent with FIN", func(t *testing.T, s *SendStream) {
			s.Write(pattern(1500))
			s.CloseWrite()
			fs := popAll(s, 1000)
			s.OnLost(fs[1].offset, len(fs[1].data), true)
			f, ok := pop(s, 1000)
			if !ok || !f.fin || f.offset != 1000 || len(f.data) != 500 {
				t.Fatalf("got %+v ok=%v", f, ok)
			}
		}},
		{"FIN acked before data: not Done", func(t *testing.T, s *SendStream) {
			s.Write(pattern(1500))
			s.CloseWrite()
			fs := popAll(s, 1000)
			s.OnAcked(fs[1].offset, len(fs[1].data), true)
			s.OnLost(fs[0].offset, len(fs[0].data), false)
			if s.Done() || !s.HasData() {
				t.Fatal("Done with data lost")
			}
			f, _ := pop(s, 1000)
			if f.fin || f.offset != 0 {
				t.Fatalf("resent %+v", f)
			}
			s.OnAcked(0, 1000, false)
			if !s.Done() {
				t.Fatal("not Done")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t, NewSendStream(0, newConn(t, Config{}, 0), 1<<20))
		})
	}
}

func TestSendFlowControl(t *testing.T) {
	t.Run("stream credit", func(t *testing.T) {
		cf := newConn(t, Config{}, 0)
		s := NewSendStream(8, cf, 3000)
		s.Write(pattern(10000))
		var n int
		for _, f := range popAll(s, 1350) {
			n += len(f.data)
		}
		if n != 3000 || s.HasData() {
			t.Fatalf("sent %d with credit 3000, HasData=%v", n, s.HasData())
		}
		if lim, ok := s.Blocked(); !ok || lim != 3000 {
			t.Fatalf("Blocked = %d, %v; want 3000", lim, ok)
		}
		if _, ok := s.Blocked(); ok {
			t.Fatal("Blocked reported twice for one limit")
		}
		s.OnLost(0, 1350, false) // retransmissions need no credit
		if f, ok := pop(s, 1350); !ok || f.offset != 0 {
			t.Fatalf("retransmission blocked by credit: %+v %v", f, ok)
		}
		if s.OnMaxStreamData(2000) || !s.OnMaxStreamData(5000) {
			t.Fatal("OnMaxStreamData: lower value must be ignored, higher applied")
		}
		n = 0
		for _, f := range popAll(s, 1350) {
			n += len(f.data)
		}
		if n != 2000 {
			t.Fatalf("sent %d more after credit 5000, want 2000", n)
		}
		if lim, ok := s.Blocked(); !ok || lim != 5000 {
			t.Fatalf("Blocked = %d, %v; want 5000", lim, ok)
		}
	})
	t.Run("connection credit", func(t *testing.T) {
		cf := newConn(t, Config{}, 2500)
		a, b := NewSendStream(0, cf, 1<<20), NewSendStream(4, cf, 1<<20)
		a.Write(pattern(2000))
		b.Write(pattern(2000))
		na, nb := len(popAll(a, 3000)[0].data), len(popAll(b, 3000)[0].data)
		if na != 2000 || nb != 500 || b.HasData() {
			t.Fatalf("sent %d + %d with connection credit 2500", na, nb)
		}
		if lim, ok := cf.Blocked(); !ok || lim != 2500 {
			t.Fatalf("ConnFlow.Blocked = %d, %v; want 2500", lim, ok)
		}
		if _, ok := cf.Blocked(); ok {
			t.Fatal("reported twice")
		}
		if _, ok := b.Blocked(); ok {
			t.Fatal("stream reports STREAM_DATA_BLOCKED while it has stream credit")
		}
		cf.OnMaxData(10000)
		if _, ok := cf.Blocked(); ok || !b.HasData() {
			t.Fatal("still blocked after MAX_DATA")
		}
	})
}

func TestSendBufferBound(t *testing.T) {
	cf := newConn(t, Config{SendBufferBytes: 64 << 10, MinSendBufferBytes: 16 << 10, BudgetBytes: 100 << 10}, 0)
	s := NewSendStream(0, cf, 1<<30)
	big := pattern(1 << 20)
	if n := s.Write(big); n != 64<<10 {
		t.Fatalf("Write took %d, want the buffer size %d", n, 64<<10)
	}
	if n := s.Write(big); n != 0 {
		t.Fatalf("Write on a full buffer took %d", n)
	}
	s.PopFrame(10000)
	s.OnAcked(0, 10000, false)
	if w := s.Writable(); w != 10000 {
		t.Fatalf("Writable after acking 10000 = %d", w)
	}
	// A second stream meets the budget (100 KiB - 54 KiB used) but keeps its floor.
	s2 := NewSendStream(4, cf, 1<<30)
	if n := s2.Write(big); n != 100<<10-(64<<10-10000) {
		t.Fatalf("second stream took %d, want the rest of the budget", n)
	}
	s3 := NewSendStream(8, cf, 1<<30)
	if n := s3.Write(big); n != 16<<10 {
		t.Fatalf("third stream took %d, want its floor %d", n, 16<<10)
	}
	if _, ok := s.Reset(7); !ok {
		t.Fatal("Reset refused")
	}
	s2.Reset(7)
	s3.Reset(7)
	if cf.Budget().Used() != 0 || cf.Pool().InUse() != 0 {
		t.Fatalf("after resets: budget %d, chunks %d", cf.Budget().Used(), cf.Pool().InUse())
	}
}

// TestSendCap: under ConnFlow.SetSendCap a stream holds an equal share of
// the cap among the streams holding bytes, never less than its floor; a
// stream counts as holding from its first byte written until the last is
// acknowledged or it is reset.
func TestSendCap(t *testing.T) {
	cf := newConn(t, Config{SendBufferBytes: 1 << 20, MinSendBufferBytes: 16 << 10, BudgetBytes: 4 << 20}, 0)
	cf.SetSendCap(256 << 10)
	big := pattern(1 << 20)
	a := NewSendStream(0, cf, 1<<30)
	if n := a.Write(big); n != 256<<10 {
		t.Fatalf("the only stream took %d, want the whole cap %d", n, 256<<10)
	}
	b := NewSendStream(4, cf, 1<<30)
	if w := b.Writable(); w != 128<<10 {
		t.Fatalf("a second stream may write %d, want half the cap %d", w, 128<<10)
	}
	if n := b.Write(big); n != 128<<10 {
		t.Fatalf("the second stream took %d", n)
	}
	if w := a.Writable(); w != 0 {
		t.Fatalf("the first stream, over its half, may write %d", w)
	}
	// Acknowledged bytes make room within the share only (sent ones do
	// not: the share bounds what is held until acknowledged).
	popAll(a, 1400)
	a.OnAcked(0, 200<<10, false)
	if w := a.Writable(); w != 128<<10-(56<<10) {
		t.Fatalf("after 200 KiB acknowledged the first stream may write %d, want %d", w, 128<<10-(56<<10))
	}
	// Four holders: the share (64 KiB) is above the floor; eight: the
	// floor (16 KiB) rules.
	c, d := NewSendStream(8, cf, 1<<30), NewSendStream(12, cf, 1<<30)
	c.Write(big[:1])
	if w := d.Writable(); w != 64<<10 {
		t.Fatalf("a fourth stream may write %d, want a quarter of the cap", w)
	}
	cf.SetSendCap(64 << 10)
	if w := d.Writable(); w != 16<<10 {
		t.Fatalf("under a cap of 64 KiB a fourth stream may write %d, want its floor", w)
	}
	// Resets and full acknowledgment end the holding.
	c.Reset(7)
	popAll(b, 1400)
	b.OnAcked(0, 128<<10, false)
	cf.SetSendCap(256 << 10)
	if w := d.Writable(); w != 128<<10 {
		t.Fatalf("with one other holder left a stream may write %d, want half the cap", w)
	}
	cf.SetSendCap(0)
	if w := d.Writable(); w != 1<<20 {
		t.Fatalf("without a cap a stream may write %d, want its buffer", w)
	}
}

// TestSendCapBlockedStreams: a stream the peer's credit blocks (new bytes
// waiting, no credit to send them) takes no share of the send cap, and
// under a cap a stream holds at most its floor beyond that credit: its
// bytes wait for the peer's reader, not for the path.
func TestSendCapBlockedStreams(t *testing.T) {
	cf := newConn(t, Config{SendBufferBytes: 1 << 20, MinSendBufferBytes: 16 << 10, BudgetBytes: 4 << 20}, 0)
	cf.SetSendCap(256 << 10)
	big := pattern(1 << 20)
	paused := NewSendStream(0, cf, 64<<10) // a reader that will not read past 64 KiB
	if n := paused.Write(big); n != 64<<10+16<<10 {
		t.Fatalf("a stream with 64 KiB of credit took %d, want its credit and its floor %d", n, 64<<10+16<<10)
	}
	live := NewSendStream(4, cf, 1<<30)
	if w := live.Writable(); w != 128<<10 {
		t.Fatalf("beside a stream that can still send, a stream may write %d, want half the cap %d", w, 128<<10)
	}
	popAll(paused, 1400) // its credit used: blocked, 16 KiB unsent
	if w := live.Writable(); w != 256<<10 {
		t.Fatalf("beside a blocked stream a stream may write %d, want the whole cap %d", w, 256<<10)
	}
	if w := paused.Writable(); w != 0 {
		t.Fatalf("the blocked stream may write %d more", w)
	}
	live.Write(big)
	if cf.holding != 1 {
		t.Fatalf("%d streams share the cap, want 1 (the live one)", cf.holding)
	}
	// New credit: the paused stream can send again and shares the cap
	// again (half of it, less the 80 KiB it holds).
	paused.OnMaxStreamData(128 << 10)
	if w := paused.Writable(); w != 128<<10-80<<10 {
		t.Fatalf("with new credit the stream may write %d, want %d", w, 128<<10-80<<10)
	}
	if cf.holding != 2 {
		t.Fatalf("%d streams share the cap, want 2", cf.holding)
	}
}

func TestSendReset(t *testing.T) {
	cf := newConn(t, Config{}, 0)
	s := NewSendStream(0, cf, 1<<20)
	s.Write(pattern(5000))
	popAll(s, 1000)
	s.Write(pattern(100))
	size, ok := s.OnStopSending(9)
	if !ok || size != 5000 {
		t.Fatalf("OnStopSending = %d, %v; want final size 5000", size, ok)
	}
	if code, ok := s.ResetCode(); !ok || code != 9 {
		t.Fatalf("ResetCode = %d, %v", code, ok)
	}
	if _, ok := s.Reset(1); ok {
		t.Fatal("second reset accepted")
	}
	s.OnLost(0, 1000, false)
	s.OnAcked(0, 1000, false)
	if s.HasData() || s.Write([]byte{1}) != 0 || s.Done() {
		t.Fatal("reset stream still sends, writes or is Done before the reset is acked")
	}
	s.OnResetAcked()
	if !s.Done() || cf.Budget().Used() != 0 || cf.Pool().InUse() != 0 {
		t.Fatalf("Done=%v budget %d chunks %d", s.Done(), cf.Budget().Used(), cf.Pool().InUse())
	}
}

// TestSendLimit: a stream names what holds its bytes: nothing, the peer's
// credit, the congestion control (bytes with credit, or a buffer full of
// bytes in flight), or the memory budget.
func TestSendLimit(t *testing.T) {
	cf := newConn(t, Config{ChunkBytes: 4096, SendBufferBytes: 64 << 10, MinSendBufferBytes: 4096, BudgetBytes: 1 << 20}, 0)
	s := NewSendStream(4, cf, 8000) // the peer's credit: 8000 bytes
	if l := s.Limit(); l != SendFree {
		t.Fatalf("empty stream: %v", l)
	}
	s.Write(pattern(20000))
	if l := s.Limit(); l != SendCongestion {
		t.Fatalf("bytes with credit, unsent: %v; want congestion", l)
	}
	popAll(s, 1350)
	if l := s.Limit(); l != SendPeerWindow {
		t.Fatalf("credit used up with bytes left: %v; want peer-window", l)
	}
	s.OnMaxStreamData(1 << 30)
	popAll(s, 1350)
	s.Write(pattern(64 << 10))
	popAll(s, 1350)
	if s.Writable() != 0 {
		t.Fatalf("buffer not full: %d writable", s.Writable())
	}
	if l := s.Limit(); l != SendCongestion {
		t.Fatalf("buffer full of bytes in flight: %v; want congestion", l)
	}
	// A second stream at its floor with the budget spent by the first.
	cf2 := newConn(t, Config{ChunkBytes: 4096, SendBufferBytes: 64 << 10, MinSendBufferBytes: 4096, BudgetBytes: 16 << 10}, 0)
	a, b := NewSendStream(0, cf2, 1<<30), NewSendStream(4, cf2, 1<<30)
	a.Write(pattern(64 << 10))
	b.Write(pattern(64 << 10))
	popAll(b, 1350)
	if l := b.Limit(); l != SendMemory {
		t.Fatalf("at its floor with the budget spent: %v; want memory", l)
	}
}

// fill writes src into the lent slices and returns how many bytes fit.
func fill(lent [][]byte, src []byte) int {
	n := 0
	for _, b := range lent {
		n += copy(b, src[n:])
	}
	return n
}

func TestSendLendCommit(t *testing.T) {
	cf := newConn(t, Config{ChunkBytes: 4096}, 0)
	s := NewSendStream(4, cf, 1<<20)
	src := pattern(20000)
	if n := s.Write(src[:1000]); n != 1000 {
		t.Fatalf("Write took %d", n)
	}
	lent := s.Lend(nil, 9000) // 3096 in the first chunk, 4096, 1808
	if len(lent) != 3 || len(lent[0]) != 3096 || len(lent[1]) != 4096 || len(lent[2]) != 1808 {
		t.Fatalf("lent %d slices: %v", len(lent), lens(lent))
	}
	if n := s.Write(src[1000:]); n != 0 {
		t.Fatalf("Write while lent took %d", n)
	}
	if again := s.Lend(nil, 100); len(again) != 0 {
		t.Fatal("a second Lend before Commit lent room")
	}
	if used := cf.Budget().Used(); used != 10000 {
		t.Fatalf("budget used %d while 1000 written and 9000 lent, want 10000", used)
	}
	fill(lent, src[1000:])
	if n := s.Commit(5000); n != 5000 {
		t.Fatalf("Commit took %d of 5000", n)
	}
	if s.Buffered() != 6000 || cf.Budget().Used() != 6000 {
		t.Fatalf("after Commit: buffered %d, budget used %d, want 6000 and 6000", s.Buffered(), cf.Budget().Used())
	}
	// The rest of the stream through a second lend, then the whole stream
	// comes out in order.
	lent = s.Lend(lent, 14000)
	if k := fill(lent, src[6000:]); k != 14000 {
		t.Fatalf("lent %d bytes, want 14000", k)
	}
	if n := s.Commit(14000); n != 14000 {
		t.Fatalf("Commit took %d", n)
	}
	var next uint64
	for _, f := range popAll(s, 1350) {
		if f.offset != next {
			t.Fatalf("frame at %d, want %d", f.offset, next)
		}
		checkFrame(t, f, src)
		next += uint64(len(f.data))
		s.OnAcked(f.offset, len(f.data), false)
	}
	if next != 20000 || cf.Budget().Used() != 0 {
		t.Fatalf("sent %d, budget used %d; want 20000 and 0", next, cf.Budget().Used())
	}
}

func lens(bs [][]byte) []int {
	var n []int
	for _, b := range bs {
		n = append(n, len(b))
	}
	return n
}

func TestSendLendLimits(t *testing.T) {
	cf := newConn(t, Config{ChunkBytes: 4096, SendBufferBytes: 8192, MinSendBufferBytes: 4096}, 0)
	s := NewSendStream(4, cf, 1<<20)
	if k := fill(s.Lend(nil, 1<<20), pattern(1<<20)); k != 8192 {
		t.Fatalf("lent %d bytes with an 8192-byte buffer", k)
	}
	if s.Writable() != 0 {
		t.Fatalf("Writable %d with the whole buffer lent", s.Writable())
	}
	s.Commit(0)
	if s.Buffered() != 0 || cf.Budget().Used() != 0 || s.Writable() != 8192 {
		t.Fatalf("after Commit(0): buffered %d, budget %d, writable %d", s.Buffered(), cf.Budget().Used(), s.Writable())
	}
	if n := s.Commit(100); n != 0 {
		t.Fatalf("Commit without Lend took %d", n)
	}
}

// A stream ended while its room is lent: nothing lent is sent or recycled
// to another stream, the budget is returned, and the stream finishes only
// after Commit.
func TestSendLendThenEnd(t *testing.T) {
	t.Run("reset", func(t *testing.T) {
		cf := newConn(t, Config{ChunkBytes: 4096}, 0)
		s := NewSendStream(4, cf, 1<<20)
		s.Write(pattern(100))
		lent := s.Lend(nil, 5000)
		s.Reset(7)
		if cf.Pool().InUse() != 0 || cf.Budget().Used() != 0 {
			t.Fatalf("after Reset: %d chunks in use, budget %d", cf.Pool().InUse(), cf.Budget().Used())
		}
		// Another stream's chunks are not the lent ones.
		o := NewSendStream(8, cf, 1<<20)
		o.Write(pattern(8192))
		for _, f := range popAll(o, 4096) {
			for _, b := range lent {
				if &f.data[0] == &b[0] {
					t.Fatal("a lent chunk was given to another stream")
				}
			}
		}
		fill(lent, pattern(5000))
		if n := s.Commit(5000); n != 0 {
			t.Fatalf("Commit after Reset took %d", n)
		}
	})
	t.Run("closed", func(t *testing.T) {
		cf := newConn(t, Config{ChunkBytes: 4096}, 0)
		s := NewSendStream(4, cf, 1<<20)
		s.Write(pattern(100))
		lent := s.Lend(nil, 5000)
		s.CloseWrite()
		for _, f := range popAll(s, 1350) {
			s.OnAcked(f.offset, len(f.data), f.fin)
		}
		if s.Done() {
			t.Fatal("Done while room is lent")
		}
		fill(lent, pattern(5000))
		if n := s.Commit(5000); n != 0 {
			t.Fatalf("Commit after CloseWrite took %d", n)
		}
		if !s.Done() || s.Buffered() != 0 || cf.Budget().Used() != 0 || cf.Pool().InUse() != 0 {
			t.Fatalf("after Commit: Done %v, buffered %d, budget %d, %d chunks in use",
				s.Done(), s.Buffered(), cf.Budget().Used(), cf.Pool().InUse())
		}
	})
}
