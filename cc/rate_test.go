package cc

import (
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

func TestRateSamplerSteadyFlow(t *testing.T) {
	// Packets paced at exactly rate, acked one RTT later: every sample
	// must report the pacing rate.
	tests := []struct {
		rateBps uint64
		rtt     time.Duration
	}{
		{10e6, 20 * time.Millisecond},
		{1e9, 100 * time.Millisecond},
	}
	for _, tc := range tests {
		var s RateSampler
		const mss = 1000
		gap := time.Duration(mss * 8 * uint64(time.Second) / tc.rateBps)
		var sent []PacketState
		now := monotime.Time(time.Second)
		inflight := 0
		var last RateSample
		for i := 0; i < int(3*tc.rtt/gap); i++ {
			// Ack what was sent one RTT ago.
			for len(sent) > 0 && !sent[0].SentTime.Add(tc.rtt).After(now) {
				inflight -= mss
				last = s.OnAck(now, sent[:1], nil, tc.rtt)
				sent = sent[1:]
			}
			sent = append(sent, s.OnPacketSent(now, mss, inflight))
			inflight += mss
			now = now.Add(gap)
		}
		if !last.Valid || !within(last.DeliveryRateBps, tc.rateBps, 0.01) {
			t.Fatalf("rate %d: sample %+v", tc.rateBps, last)
		}
		if last.RTT != tc.rtt || last.NewlyAcked != mss || last.IsAppLimited {
			t.Fatalf("rate %d: sample %+v", tc.rateBps, last)
		}
	}
}

func TestRateSamplerIntervalAndAppLimited(t *testing.T) {
	var s RateSampler
	t0 := monotime.Time(time.Second)
	ms := time.Millisecond
	// Two packets sent 1 ms apart from idle, acked together 10 ms later.
	p1 := s.OnPacketSent(t0, 1000, 0)
	p2 := s.OnPacketSent(t0.Add(ms), 1000, 1000)
	if p2.FirstSentTime != t0 || p2.DeliveredTime != t0 || p2.TxInFlight != 2000 || p2.Delivered != 0 {
		t.Fatalf("snapshot %+v", p2)
	}
	rs := s.OnAck(t0.Add(11*ms), []PacketState{p1, p2}, nil, 5*ms)
	// send elapsed 1 ms, ack elapsed 11 ms: interval 11 ms, 2000 bytes.
	if !rs.Valid || rs.Interval != 11*ms || rs.Delivered != 2000 || rs.DeliveryRateBps != rateOf(2000, 11*ms) {
		t.Fatalf("sample %+v", rs)
	}
	// An interval below min RTT is discarded.
	p3 := s.OnPacketSent(t0.Add(12*ms), 1000, 0)
	rs = s.OnAck(t0.Add(13*ms), []PacketState{p3}, nil, 5*ms)
	if rs.Valid || rs.NewlyAcked != 1000 {
		t.Fatalf("short interval accepted: %+v", rs)
	}
	// App-limited marking lasts until the data in flight is delivered.
	s.OnAppLimited(0) // nothing in flight
	p4 := s.OnPacketSent(t0.Add(14*ms), 1000, 0)
	if !p4.IsAppLimited || !s.AppLimited() {
		t.Fatal("packet sent while app-limited not marked")
	}
	rs = s.OnAck(t0.Add(30*ms), []PacketState{p4}, []PacketState{{Bytes: 500, SentTime: t0}}, 5*ms)
	if !rs.IsAppLimited || s.AppLimited() || rs.NewlyLost != 500 || rs.Lost != 500 || s.LostBytes() != 500 {
		t.Fatalf("app-limited/loss accounting: %+v applimited=%v", rs, s.AppLimited())
	}
	if s.Delivered() != 4000 {
		t.Fatalf("delivered %d", s.Delivered())
	}
	// An event with only losses yields no sample.
	if rs := s.OnAck(t0.Add(31*ms), nil, []PacketState{{Bytes: 10}}, 0); rs.Valid || rs.NewlyLost != 10 {
		t.Fatalf("loss-only event %+v", rs)
	}
}
