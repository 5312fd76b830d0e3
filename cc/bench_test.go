package cc

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// steadyLoop sends one packet and acks the packet sent a window earlier,
// as a loss/ack layer would in steady state, reusing one AckEvent.
type steadyLoop struct {
	ctl    Controller
	rtt    *RTTStats
	ring   []PacketState
	next   int
	now    monotime.Time
	ev     AckEvent
	acked  [1]PacketState
	window int
}

func newSteadyLoop(ctl Controller) *steadyLoop {
	l := &steadyLoop{ctl: ctl, rtt: NewRTTStats(0), ring: make([]PacketState, 1024), now: monotime.Time(time.Second), window: 1024}
	l.rtt.UpdateRTT(50*time.Millisecond, 0)
	return l
}

func (l *steadyLoop) step() {
	const mss = DefaultMSS
	const gap = 50 * time.Millisecond / 1024
	l.now = l.now.Add(gap)
	i := l.next % l.window
	inflight := min(l.next, l.window-1) * mss
	if l.next >= l.window {
		l.acked[0] = l.ring[i]
		l.ev = AckEvent{Now: l.now, Acked: l.acked[:], PriorInFlight: inflight + mss, BytesInFlight: inflight, RTT: l.rtt}
		l.ctl.OnAck(&l.ev)
	}
	l.ring[i] = l.ctl.OnPacketSent(l.now, mss, inflight)
	l.next++
}

func benchmarkController(b *testing.B, ctl Controller) {
	l := newSteadyLoop(ctl)
	for range 4096 {
		l.step()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		l.step()
	}
}

func BenchmarkBBRSendAck(b *testing.B)   { benchmarkController(b, newTestBBR(1)) }
func BenchmarkCubicSendAck(b *testing.B) { benchmarkController(b, NewCubic(0, 0)) }

func BenchmarkPacer(b *testing.B) {
	p := NewPacer(DefaultMSS)
	now := monotime.Time(time.Second)
	p.SetRate(now, 250e6)
	b.ReportAllocs()
	for b.Loop() {
		now = p.NextSendTime(now)
		p.OnSent(now, DefaultMSS)
	}
}

func TestSendAckDoesNotAllocate(t *testing.T) {
	for _, ctl := range []Controller{newTestBBR(1), NewCubic(0, 0), NewFixed(1e8, 0)} {
		l := newSteadyLoop(ctl)
		for range 4096 {
			l.step()
		}
		if n := testing.AllocsPerRun(1000, l.step); n != 0 {
			t.Errorf("%s: %.1f allocations per OnPacketSent+OnAck", ctl.Name(), n)
		}
	}
}
