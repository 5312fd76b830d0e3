package cc

import (
	"testing"
	"time"
)

// TestBBRHeldAcks: the near edge holds its reads of the tunnel's socket
// (tunnel/driver RxHold: 2 ms, up to 4 ms on a long path) and sends one
// ACK per read, so the far edge's BBR sees all of a hold's data acked at
// once. Its window (cwnd gain × BDP, the ACK-aggregation allowance and
// three send quanta) must keep the link busy across a hold, also where
// the hold is ten times the path's RTT, and must not build a standing
// queue beyond what the hold explains. The receiver here acks once per
// hold after the first packet it holds, with the pacer's default and
// grown bursts (the driver grows it on a quiet path). The model leaves
// out the edges' scheduling on a shared machine.
func TestBBRHeldAcks(t *testing.T) {
	const rate = 250e6
	for i, tc := range []struct {
		rtt, hold, burst time.Duration
	}{
		{300 * time.Microsecond, 2 * time.Millisecond, 0},
		{300 * time.Microsecond, 2 * time.Millisecond, minGrownBurst},
		{300 * time.Microsecond, 4 * time.Millisecond, 0},
		{300 * time.Microsecond, 4 * time.Millisecond, minGrownBurst},
		{2 * time.Millisecond, 2 * time.Millisecond, 0},
		{2 * time.Millisecond, 4 * time.Millisecond, minGrownBurst},
		{20 * time.Millisecond, 4 * time.Millisecond, 0},
	} {
		t.Run(tc.rtt.String()+"-hold"+tc.hold.String()+"-burst"+tc.burst.String(), func(t *testing.T) {
			seed := uint64(500 + i)
			cfg := simConfig{rateBps: rate, rtt: tc.rtt, seed: seed, ackEvery: 1 << 30, ackDelay: tc.hold, queueBytes: 1 << 20}
			b := newTestBBR(seed)
			s := newSim(t, cfg, b)
			s.pacer.SetBurstTime(s.now, tc.burst)
			s.run(5*time.Second, nil) // well past Startup
			var srttSum time.Duration
			acks := 0
			s.onAck = func(s *sim) { srttSum += s.rtt.SmoothedRTT(); acks++ }
			share := s.linkShare(10 * time.Second)
			srtt := srttSum / time.Duration(max(acks, 1))
			t.Logf("%.1f%% of the link, mean srtt %v, extra acked %d B, drops %d", 100*share, srtt, b.State().ExtraAckedBytes, s.droppedQueue)
			if share < 0.95 {
				t.Errorf("throughput %.1f%% of the link, want >= 95%%", 100*share)
			}
			// What the path and the hold explain, plus the pacer's burst
			// and a few milliseconds of queue.
			if limit := tc.rtt + tc.hold + max(tc.burst, DefaultPacerBurst) + 3*time.Millisecond; srtt > limit {
				t.Errorf("mean srtt %v, want <= %v: a standing queue beyond the hold", srtt, limit)
			}
		})
	}
}
