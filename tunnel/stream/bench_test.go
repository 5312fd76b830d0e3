package stream

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

const framePayload = 1350

// sendPath is one steady-state round of the send hot path: the application
// writes one frame's worth, the connection pops it, the peer acks it. Every
// 16th frame is lost once and retransmitted before being acked, leaving a
// hole in the acked ranges meanwhile.
type sendPath struct {
	s   *SendStream
	buf []byte
	i   int
}

func newSendPath(t testing.TB) *sendPath {
	cf := newConn(t, Config{}, 0)
	return &sendPath{s: NewSendStream(0, cf, 1<<62-1), buf: pattern(framePayload)}
}

func (p *sendPath) step() {
	p.i++
	if p.s.Write(p.buf) != len(p.buf) {
		panic("send buffer full in steady state")
	}
	for {
		off, data, _, ok := p.s.PopFrame(framePayload)
		if !ok {
			break
		}
		if p.i%16 == 0 {
			p.s.OnLost(off, len(data), false)
			off, data, _, _ = p.s.PopFrame(framePayload)
		}
		p.s.OnAcked(off, len(data), false)
	}
}

// recvPath is one steady-state round of the receive hot path: a frame
// arrives, the application reads it, credit updates are computed. Every 8th
// pair of frames arrives swapped.
type recvPath struct {
	r    *RecvStream
	cf   *ConnFlow
	data []byte
	out  []byte
	off  uint64
	now  monotime.Time
	i    int
}

func newRecvPath(t testing.TB) *recvPath {
	cf := newConn(t, Config{}, 0)
	return &recvPath{r: NewRecvStream(1, cf), cf: cf, data: pattern(2 * framePayload), out: make([]byte, 4*framePayload), now: 1}
}

func (p *recvPath) step() {
	p.i++
	if p.i%8 == 0 { // reordered pair
		p.must(p.r.HandleFrame(p.off+framePayload, p.data[:framePayload], false))
		p.must(p.r.HandleFrame(p.off, p.data[:framePayload], false))
		p.off += 2 * framePayload
	} else {
		p.must(p.r.HandleFrame(p.off, p.data[:framePayload], false))
		p.off += framePayload
	}
	p.r.Read(p.out)
	p.now = p.now.Add(100 * time.Microsecond)
	p.r.ShouldSendMaxStreamData(p.now, 50*time.Millisecond)
	p.cf.ShouldSendMaxData(p.now, 50*time.Millisecond)
}

func (p *recvPath) must(err error) {
	if err != nil {
		panic(err)
	}
}

func TestHotPathAllocs(t *testing.T) {
	sp, rp := newSendPath(t), newRecvPath(t)
	for range 100_000 { // warm up: rings and range sets at full size
		sp.step()
		rp.step()
	}
	if a := testing.AllocsPerRun(10_000, sp.step); a != 0 {
		t.Errorf("send path: %.2f allocations per frame", a)
	}
	if a := testing.AllocsPerRun(10_000, rp.step); a != 0 {
		t.Errorf("receive path: %.2f allocations per frame", a)
	}
}

func BenchmarkSendPath(b *testing.B) { benchFrames(b, newSendPath(b).step) }

func BenchmarkRecvPath(b *testing.B) { benchFrames(b, newRecvPath(b).step) }

// benchFrames runs step, which moves one frame, once per iteration.
func benchFrames(b *testing.B, step func()) {
	b.SetBytes(framePayload)
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
}

func BenchmarkScheduler(b *testing.B) {
	s := NewScheduler(framePayload)
	for id := range uint64(100) {
		s.Add(id * 4)
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Next()
		s.Charge(framePayload)
	}
}
