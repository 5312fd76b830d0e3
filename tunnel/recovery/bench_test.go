package recovery

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wanopt/wanopt/cc"
	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// loop is a steady-state sender/receiver exchange without a path: every
// lossEvery-th packet is dropped, the receiver acks every second packet,
// and the ACK is processed at once and then itself acknowledged
// (ack-of-ack), as a busy connection would.
type loop struct {
	snd       *Sender
	rcv       *Receiver
	frame     wire.AckFrame
	now       monotime.Time
	lossEvery uint64
	acked     int
	lost      int
	onAcked   func(uint64)
	onLost    func(uint64)
}

func newLoop(ctrl cc.Controller, lossEvery uint64) *loop {
	l := &loop{
		snd:       NewSender(ctrl, cc.NewRTTStats(0), SenderConfig{}),
		rcv:       NewReceiver(ReceiverConfig{}),
		now:       t0,
		lossEvery: lossEvery,
	}
	l.frame.Ranges = make([]wire.AckRange, 0, wire.MaxAckRanges)
	l.onAcked = func(uint64) { l.acked++ }
	l.onLost = func(uint64) { l.lost++ }
	return l
}

// step sends one packet and, when due, delivers an ACK for it.
func (l *loop) step(tb testing.TB) {
	l.now = l.now.Add(10 * time.Microsecond)
	pn := l.snd.NextPacketNumber()
	l.snd.OnPacketSent(l.now, pn, 1200, true, pn)
	if l.lossEvery == 0 || pn%l.lossEvery != l.lossEvery-1 {
		l.rcv.OnPacketReceived(l.now, pn, true)
	}
	if !l.rcv.AckDue(l.now) || !l.rcv.BuildAck(l.now, &l.frame) {
		return
	}
	l.rcv.OnAckSent(l.now)
	if err := l.snd.OnAck(l.now, &l.frame, l.onAcked, l.onLost); err != nil {
		tb.Fatal(err)
	}
	l.rcv.OnAckOfAckReceived(l.frame.Largest())
}

func TestSteadyStateAllocFree(t *testing.T) {
	ctrls := []struct {
		name string
		make func() cc.Controller
	}{
		{"mock", func() cc.Controller { m := newMock(1 << 20); m.record = false; return m }},
		{"bbr", func() cc.Controller { return cc.NewBBR(cc.BBRConfig{Rand: rand.New(rand.NewPCG(1, 2))}) }},
		{"cubic", func() cc.Controller { return cc.NewCubic(0, 0) }},
	}
	for _, c := range ctrls {
		for _, lossEvery := range []uint64{0, 50} {
			l := newLoop(c.make(), lossEvery)
			for range 20_000 { // warm up: ring and slices at full size
				l.step(t)
			}
			allocs := testing.AllocsPerRun(10_000, func() { l.step(t) })
			if allocs != 0 {
				t.Errorf("%s, loss every %d: %.2f allocations per packet", c.name, lossEvery, allocs)
			}
			if l.acked == 0 || lossEvery != 0 && l.lost == 0 {
				t.Errorf("%s: loop did not ack (%d) or lose (%d)", c.name, l.acked, l.lost)
			}
		}
	}
}

func BenchmarkSendAck(b *testing.B) {
	for _, lossEvery := range []uint64{0, 50} {
		name := "lossless"
		if lossEvery != 0 {
			name = "loss2pct"
		}
		b.Run(name, func(b *testing.B) {
			l := newLoop(cc.NewBBR(cc.BBRConfig{Rand: rand.New(rand.NewPCG(1, 2))}), lossEvery)
			for range 10_000 {
				l.step(b)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				l.step(b)
			}
		})
	}
}

func BenchmarkReceiver(b *testing.B) {
	r := NewReceiver(ReceiverConfig{})
	var f wire.AckFrame
	f.Ranges = make([]wire.AckRange, 0, wire.MaxAckRanges)
	now := t0
	pn := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		if pn%100 != 7 { // a gap now and then
			r.OnPacketReceived(now, pn, true)
		}
		pn++
		if r.AckDue(now) && r.BuildAck(now, &f) {
			r.OnAckSent(now)
			if pn%64 == 0 {
				r.OnAckOfAckReceived(f.Largest() - 32)
			}
		}
	}
}
