package recovery

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/wanopt/wanopt/cc"
	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/wire"
)

func TestAckSinglePacketGivesRTTSample(t *testing.T) {
	s, m, rtt := newTestSender(t)
	s.OnPacketSent(t0, 0, 1200, true, 42)
	if got := s.BytesInFlight(); got != 1200 {
		t.Fatalf("BytesInFlight = %d, want 1200", got)
	}
	var k tokens
	if err := s.OnAck(ms(100), ack(0, [2]uint64{0, 0}), k.ackedFn, k.lostFn); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.acked, []uint64{42}) || len(k.lost) != 0 {
		t.Fatalf("acked %v lost %v, want [42] []", k.acked, k.lost)
	}
	if rtt.LatestRTT() != 100*time.Millisecond || rtt.SmoothedRTT() != 100*time.Millisecond {
		t.Fatalf("latest %v smoothed %v, want 100ms", rtt.LatestRTT(), rtt.SmoothedRTT())
	}
	acks := m.callsOf("ack")
	if len(acks) != 1 {
		t.Fatalf("controller OnAck called %d times, want 1", len(acks))
	}
	c := acks[0]
	if len(c.acked) != 1 || len(c.lost) != 0 || c.prior != 1200 || c.after != 0 || !c.rttHasSample {
		t.Fatalf("OnAck event %+v", c)
	}
	if sent := m.callsOf("sent"); len(sent) != 1 || sent[0].inFlight != 0 {
		t.Fatalf("OnPacketSent calls %+v, want one with 0 in flight", sent)
	}
	if s.BytesInFlight() != 0 || s.NextTimeout() != 0 {
		t.Fatalf("after ack: in flight %d, next timeout %d; want 0, 0", s.BytesInFlight(), s.NextTimeout())
	}
	if s.LargestAcked() != 0 {
		t.Fatalf("LargestAcked = %d, want 0", s.LargestAcked())
	}
}

func TestAckDelay(t *testing.T) {
	// The first sample (100 ms) sets min RTT; the second, 130 ms raw,
	// carries the ack delay under test. RFC 9002 §5.3: the delay is
	// capped at the peer's max ack delay (25 ms) and subtracted only if
	// the result stays at or above min RTT.
	tests := []struct {
		name       string
		latestMs   float64
		delayUs    uint64
		wantAdjust time.Duration
		wantCapped uint64
	}{
		{"no delay", 130, 0, 130 * time.Millisecond, 0},
		{"subtracted", 130, 20_000, 110 * time.Millisecond, 0},
		{"would go below min RTT", 115, 20_000, 115 * time.Millisecond, 0},
		{"capped at max ack delay", 130, 30_000, 105 * time.Millisecond, 1},
		{"capped, then below min RTT", 120, 40_000, 120 * time.Millisecond, 1},
		{"absurd delay", 130, wire.MaxVarint, 105 * time.Millisecond, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _, rtt := newTestSender(t)
			s.OnPacketSent(t0, 0, 1200, true, 0)
			if err := s.OnAck(ms(100), ack(0, [2]uint64{0, 0}), nil, nil); err != nil {
				t.Fatal(err)
			}
			s.OnPacketSent(ms(100), 1, 1200, true, 1)
			if err := s.OnAck(ms(100+tc.latestMs), ack(tc.delayUs, [2]uint64{0, 1}), nil, nil); err != nil {
				t.Fatal(err)
			}
			want := (7*100*time.Millisecond + tc.wantAdjust) / 8
			if got := rtt.SmoothedRTT(); got != want {
				t.Errorf("smoothed RTT = %v, want %v", got, want)
			}
			if rtt.MinRTT() != 100*time.Millisecond {
				t.Errorf("min RTT = %v, want 100ms", rtt.MinRTT())
			}
			if got := s.Stats().AckDelayCapped; got != tc.wantCapped {
				t.Errorf("AckDelayCapped = %d, want %d", got, tc.wantCapped)
			}
		})
	}
}

func TestRTTSampleRules(t *testing.T) {
	// RFC 9002 §5.1: a sample needs the largest acknowledged packet newly
	// acknowledged and at least one newly acknowledged ack-eliciting one.
	tests := []struct {
		name      string
		eliciting []bool // per packet number
		first     *wire.AckFrame
		second    *wire.AckFrame
		want      bool // a sample exists after second
	}{
		{"largest eliciting", []bool{true, true}, nil, ack(0, [2]uint64{0, 1}), true},
		{"largest ack-only, eliciting acked with it", []bool{true, false}, nil, ack(0, [2]uint64{0, 1}), true},
		{"only ack-only packets", []bool{false, false}, nil, ack(0, [2]uint64{0, 1}), false},
		{"largest not newly acked", []bool{true, true, true}, ack(0, [2]uint64{2, 2}), ack(0, [2]uint64{0, 2}), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _, _ := newTestSender(t)
			for pn, e := range tc.eliciting {
				s.OnPacketSent(t0, uint64(pn), 1200, e, uint64(pn))
			}
			rtt := cc.NewRTTStats(0)
			if tc.first != nil {
				if err := s.OnAck(ms(50), tc.first, nil, nil); err != nil {
					t.Fatal(err)
				}
				// Swap in fresh statistics to see only the second frame.
				s.rtt = rtt
				s.ev.RTT = rtt
			} else {
				rtt = s.rtt
			}
			if err := s.OnAck(ms(80), tc.second, nil, nil); err != nil {
				t.Fatal(err)
			}
			if rtt.HasSample() != tc.want {
				t.Fatalf("sample taken = %v, want %v", rtt.HasSample(), tc.want)
			}
		})
	}
}

func TestAckRangesAndPacketThreshold(t *testing.T) {
	// Ten packets sent at t0, one ACK frame at t0+50ms: the time threshold
	// (9/8 × 50 ms) has not expired, so losses come from the packet
	// threshold alone: pn is lost once pn+3 <= largest acknowledged.
	tests := []struct {
		name         string
		frame        *wire.AckFrame
		wantAcked    []uint64
		wantLost     []uint64
		wantInFlight int
		wantLossTime bool
	}{
		{"non-contiguous", ack(0, [2]uint64{7, 9}, [2]uint64{5, 5}, [2]uint64{1, 2}),
			[]uint64{1, 2, 5, 7, 8, 9}, []uint64{0, 3, 4, 6}, 0, false},
		{"prefix", ack(0, [2]uint64{0, 3}), []uint64{0, 1, 2, 3}, nil, 6 * 1200, false},
		{"single in the middle", ack(0, [2]uint64{5, 5}), []uint64{5}, []uint64{0, 1, 2}, 6 * 1200, true},
		{"two later acked is not enough", ack(0, [2]uint64{1, 2}), []uint64{1, 2}, nil, 8 * 1200, true},
		{"three later acked", ack(0, [2]uint64{1, 3}), []uint64{1, 2, 3}, []uint64{0}, 6 * 1200, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, m, _ := newTestSender(t)
			sendN(s, t0, 10)
			var k tokens
			if err := s.OnAck(ms(50), tc.frame, k.ackedFn, k.lostFn); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(k.acked, tc.wantAcked) || !slices.Equal(k.lost, tc.wantLost) {
				t.Fatalf("acked %v lost %v, want %v %v", k.acked, k.lost, tc.wantAcked, tc.wantLost)
			}
			if s.BytesInFlight() != tc.wantInFlight {
				t.Fatalf("BytesInFlight = %d, want %d", s.BytesInFlight(), tc.wantInFlight)
			}
			acks := m.callsOf("ack")
			if len(acks) != 1 {
				t.Fatalf("controller OnAck called %d times, want once", len(acks))
			}
			// The mock's TxInFlight is (pn+1)*1200 here: it identifies
			// the packet and shows the ascending order.
			pns := func(st []cc.PacketState) []uint64 {
				var out []uint64
				for _, p := range st {
					out = append(out, uint64(p.TxInFlight/1200-1))
				}
				return out
			}
			if !slices.Equal(pns(acks[0].acked), tc.wantAcked) || !slices.Equal(pns(acks[0].lost), tc.wantLost) {
				t.Fatalf("controller saw acked %v lost %v", pns(acks[0].acked), pns(acks[0].lost))
			}
			if acks[0].prior != 10*1200 || acks[0].after != tc.wantInFlight {
				t.Fatalf("controller prior/after = %d/%d, want %d/%d", acks[0].prior, acks[0].after, 10*1200, tc.wantInFlight)
			}
			lossTimer := s.lossTime != 0
			if lossTimer != tc.wantLossTime {
				t.Fatalf("loss timer armed = %v, want %v", lossTimer, tc.wantLossTime)
			}
			if tc.wantLossTime && s.NextTimeout() != ms(50*9.0/8) {
				t.Fatalf("NextTimeout = %v, want %v", s.NextTimeout(), ms(50*9.0/8))
			}
		})
	}
}

func TestTimeThresholdLossByTimer(t *testing.T) {
	s, m, _ := newTestSender(t)
	s.OnPacketSent(t0, 0, 1200, true, 0)
	s.OnPacketSent(ms(10), 1, 1200, true, 1)
	var k tokens
	if err := s.OnAck(ms(110), ack(0, [2]uint64{1, 1}), k.ackedFn, k.lostFn); err != nil {
		t.Fatal(err)
	}
	// RTT 100 ms, loss delay 9/8 × 100 ms: pn 0 is lost at t0+112.5ms.
	want := ms(112.5)
	if got := s.NextTimeout(); got != want {
		t.Fatalf("NextTimeout = %v, want %v", got, want)
	}
	if p := s.OnTimeout(ms(112.4), k.lostFn); p != 0 || len(k.lost) != 0 {
		t.Fatalf("early timeout: probes %d lost %v", p, k.lost)
	}
	if p := s.OnTimeout(want, k.lostFn); p != 0 {
		t.Fatalf("loss timeout returned %d probes, want 0", p)
	}
	if !slices.Equal(k.lost, []uint64{0}) {
		t.Fatalf("lost %v, want [0]", k.lost)
	}
	acks := m.callsOf("ack")
	last := acks[len(acks)-1]
	if len(acks) != 2 || len(last.acked) != 0 || len(last.lost) != 1 || last.prior != 1200 || last.after != 0 {
		t.Fatalf("controller events %+v", acks)
	}
	if s.NextTimeout() != 0 || s.BytesInFlight() != 0 {
		t.Fatalf("NextTimeout %v, in flight %d; want 0, 0", s.NextTimeout(), s.BytesInFlight())
	}
}

func TestPTOBackoffAndReset(t *testing.T) {
	m := newMock(100 * 1200)
	// RFC 9002's unbounded backoff; TestPTOBackoffCapped covers the cap.
	s := NewSender(m, cc.NewRTTStats(0), SenderConfig{MaxProbeInterval: time.Hour})
	m.cwnd = 1200
	s.OnPacketSent(t0, 0, 1200, true, 0)
	// No sample: PTO = 333ms + 4 × 166.5ms + 25ms = 1024ms.
	pto := 1024.0
	if got := s.NextTimeout(); got != ms(pto) {
		t.Fatalf("NextTimeout = %v, want %v", got, ms(pto))
	}
	if s.TimeToSend(ms(1)) != 0 {
		t.Fatal("TimeToSend allowed a packet with a full window")
	}
	if p := s.OnTimeout(ms(pto-1), nil); p != 0 {
		t.Fatalf("early PTO gave %d probes", p)
	}
	if p := s.OnTimeout(ms(pto), nil); p != 2 {
		t.Fatalf("PTO gave %d probes, want 2", p)
	}
	if got := s.NextTimeout(); got != ms(2*pto) {
		t.Fatalf("after one PTO NextTimeout = %v, want %v", got, ms(2*pto))
	}
	// Probes bypass the full window.
	for i := range 2 {
		if s.TimeToSend(ms(pto)) != ms(pto) {
			t.Fatalf("probe %d not allowed", i)
		}
		sendN(s, ms(pto), 1)
	}
	if s.TimeToSend(ms(pto)) != 0 || s.ProbesPending() != 0 {
		t.Fatal("window bypass outlived the probes")
	}
	if got := s.NextTimeout(); got != ms(pto+2*pto) {
		t.Fatalf("after probes NextTimeout = %v, want %v", got, ms(3*pto))
	}
	if p := s.OnTimeout(ms(3*pto), nil); p != 2 {
		t.Fatalf("second PTO gave %d probes", p)
	}
	if got := s.NextTimeout(); got != ms(pto+4*pto) {
		t.Fatalf("after two PTOs NextTimeout = %v, want %v", got, ms(5*pto))
	}
	if st := s.Stats(); st.PTOs != 2 || st.PTOBackoff != 2 {
		t.Fatalf("stats PTOs %d backoff %d, want 2 2", st.PTOs, st.PTOBackoff)
	}
	// PTOs are not congestion signals: the controller saw only sends.
	if len(m.callsOf("ack")) != 0 || len(m.callsOf("persistent")) != 0 {
		t.Fatalf("controller calls during PTO: %+v", m.calls)
	}
	if err := s.OnAck(ms(5*pto), ack(0, [2]uint64{2, 2}), nil, nil); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.PTOBackoff != 0 {
		t.Fatalf("backoff after ACK = %d, want 0", st.PTOBackoff)
	}
}

func TestPersistentCongestion(t *testing.T) {
	// After a 100 ms sample (srtt 100, rttvar 50) the persistent
	// congestion duration is 3 × (100 + 200 + 25) ms = 975 ms. Packets
	// 1..10 are sent every spacing ms from t0+100ms, 11 after them, and
	// an ACK of 11 (plus extra) arrives 100 ms later.
	tests := []struct {
		name       string
		spacingMs  float64
		noSample   bool
		extra      [][2]uint64 // more acked ranges, below 11
		wantLost   int
		persistent bool
	}{
		{"long span", 125, false, nil, 10, true},
		{"short span", 50, false, nil, 10, false},
		{"ack in between", 125, false, [][2]uint64{{5, 5}}, 9, false},
		{"sent before first sample", 125, true, nil, 11, false}, // pn 0 too
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, m, rtt := newTestSender(t)
			s.OnPacketSent(t0, 0, 1200, true, 0)
			if !tc.noSample {
				if err := s.OnAck(ms(100), ack(0, [2]uint64{0, 0}), nil, nil); err != nil {
					t.Fatal(err)
				}
			}
			for pn := uint64(1); pn <= 10; pn++ {
				s.OnPacketSent(ms(100+tc.spacingMs*float64(pn-1)), pn, 1200, true, pn)
			}
			last := 100 + tc.spacingMs*10
			s.OnPacketSent(ms(last), 11, 1200, true, 11)
			f := ack(0, [2]uint64{11, 11})
			for _, r := range tc.extra {
				f.Ranges = append(f.Ranges, wire.AckRange{Smallest: r[0], Largest: r[1]})
			}
			var k tokens
			if err := s.OnAck(ms(last+100), f, k.ackedFn, k.lostFn); err != nil {
				t.Fatal(err)
			}
			if len(k.lost) != tc.wantLost {
				t.Fatalf("lost %v, want %d packets", k.lost, tc.wantLost)
			}
			pc := m.callsOf("persistent")
			if (len(pc) == 1) != tc.persistent || len(pc) > 1 {
				t.Fatalf("OnPersistentCongestion calls = %d, want persistent=%v", len(pc), tc.persistent)
			}
			if tc.persistent {
				if m.calls[len(m.calls)-1].kind != "persistent" || m.calls[len(m.calls)-2].kind != "ack" {
					t.Fatal("OnPersistentCongestion not right after OnAck")
				}
				if rtt.MinRTT() != rtt.LatestRTT() || s.Stats().PersistentCongestions != 1 {
					t.Fatal("persistent congestion did not reset min RTT or count")
				}
			}
		})
	}
}

func TestBadAckChangesNothing(t *testing.T) {
	tests := []struct {
		name  string
		frame *wire.AckFrame
		want  error
	}{
		{"unsent largest", ack(0, [2]uint64{5, 5}), ErrAckUnsent},
		{"unsent far beyond", ack(0, [2]uint64{0, wire.MaxVarint}), ErrAckUnsent},
		{"ascending ranges", ack(0, [2]uint64{0, 0}, [2]uint64{2, 2}), ErrAckInvalid},
		{"adjacent ranges", ack(0, [2]uint64{2, 2}, [2]uint64{1, 1}), ErrAckInvalid},
		{"empty range", ack(0, [2]uint64{2, 1}), ErrAckInvalid},
		{"no ranges", &wire.AckFrame{}, ErrAckInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, m, rtt := newTestSender(t)
			sendN(s, t0, 4)
			if err := s.OnAck(ms(40), ack(0, [2]uint64{0, 0}), nil, nil); err != nil {
				t.Fatal(err)
			}
			before, calls, next, srtt := s.Stats(), len(m.calls), s.NextTimeout(), rtt.SmoothedRTT()
			var k tokens
			err := s.OnAck(ms(60), tc.frame, k.ackedFn, k.lostFn)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			after := s.Stats()
			after.BadAcks--
			if after != before || len(m.calls) != calls || s.NextTimeout() != next ||
				rtt.SmoothedRTT() != srtt || len(k.acked)+len(k.lost) != 0 {
				t.Fatalf("state changed: %+v -> %+v, tokens %v %v", before, after, k.acked, k.lost)
			}
		})
	}
}

func TestDuplicateAndReorderedAcksAreHarmless(t *testing.T) {
	s, m, rtt := newTestSender(t)
	sendN(s, t0, 6)
	newer := ack(0, [2]uint64{0, 5})
	older := ack(0, [2]uint64{0, 3})
	var k tokens
	if err := s.OnAck(ms(50), newer, k.ackedFn, k.lostFn); err != nil {
		t.Fatal(err)
	}
	before, calls, srtt := s.Stats(), len(m.calls), rtt.SmoothedRTT()
	for i, f := range []*wire.AckFrame{older, newer, older} {
		if err := s.OnAck(ms(60+float64(i)), f, k.ackedFn, k.lostFn); err != nil {
			t.Fatal(err)
		}
	}
	if s.Stats() != before || len(m.calls) != calls || rtt.SmoothedRTT() != srtt {
		t.Fatalf("repeated frames changed state: %+v -> %+v", before, s.Stats())
	}
	if len(k.acked) != 6 || len(k.lost) != 0 {
		t.Fatalf("tokens acked %v lost %v", k.acked, k.lost)
	}
}

func TestSpuriousLossCounted(t *testing.T) {
	s, m, _ := newTestSender(t)
	sendN(s, t0, 5)
	var k tokens
	if err := s.OnAck(ms(50), ack(0, [2]uint64{1, 4}), k.ackedFn, k.lostFn); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.lost, []uint64{0}) {
		t.Fatalf("lost %v, want [0]", k.lost)
	}
	calls := len(m.calls)
	for range 2 {
		if err := s.OnAck(ms(55), ack(0, [2]uint64{0, 4}), k.ackedFn, k.lostFn); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.SpuriousLosses != 1 || st.PacketsLost != 1 || st.PacketsAcked != 4 {
		t.Fatalf("stats %+v, want 1 spurious, 1 lost, 4 acked", st)
	}
	if len(k.acked) != 4 || len(m.calls) != calls {
		t.Fatal("a spurious loss reported its token or the controller again")
	}
}

func TestAckOnlyPacketsTracked(t *testing.T) {
	s, m, _ := newTestSender(t)
	s.OnPacketSent(t0, 0, 50, false, 100)
	s.OnPacketSent(t0, 1, 1200, true, 101)
	s.OnPacketSent(t0, 2, 50, false, 102)
	if s.BytesInFlight() != 1200 || len(m.callsOf("sent")) != 1 {
		t.Fatalf("ACK-only packets counted in flight: %d, %d sent calls", s.BytesInFlight(), len(m.callsOf("sent")))
	}
	var k tokens
	if err := s.OnAck(ms(30), ack(0, [2]uint64{2, 2}, [2]uint64{0, 0}), k.ackedFn, k.lostFn); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.acked, []uint64{100, 102}) {
		t.Fatalf("acked %v, want [100 102]", k.acked)
	}
	if len(m.callsOf("ack")) != 0 {
		t.Fatal("controller told about ACK-only packets")
	}
	if s.rtt.HasSample() {
		t.Fatal("RTT sample from ACK-only packets")
	}
}

func TestECNCounts(t *testing.T) {
	s, m, _ := newTestSender(t)
	sendN(s, t0, 4)
	f := ack(0, [2]uint64{0, 1})
	f.ECN, f.CE = true, 1
	if err := s.OnAck(ms(30), f, nil, nil); err != nil {
		t.Fatal(err)
	}
	g := ack(0, [2]uint64{0, 3})
	g.ECN, g.CE = true, 1<<60 // absurd jump: bounded by the 2 packets newly acked
	if err := s.OnAck(ms(31), g, nil, nil); err != nil {
		t.Fatal(err)
	}
	acks := m.callsOf("ack")
	if len(acks) != 2 || acks[0].ecnCE != 1 || acks[1].ecnCE != 2 {
		t.Fatalf("ECN-CE increments %+v", acks)
	}
}

func TestTimeToSendAndPacing(t *testing.T) {
	s, m, _ := newTestSender(t)
	m.cwnd = 4 * 1200
	m.rateBps = 12_000_000 // 1.5 MB/s: one 1200-byte packet per 800 µs
	if s.TimeToSend(t0) != t0 || !s.CanSend(t0) {
		t.Fatal("first packet not allowed")
	}
	sendN(s, t0, 3) // the burst (2 × MSS = 2700 bytes) is spent
	next := s.TimeToSend(t0)
	if !next.After(t0) {
		t.Fatalf("pacer let a 4th packet go at once")
	}
	// The debt (900 bytes) and the pacer's quantum (half its burst: one
	// MSS, 1350 bytes) at 1.5 MB/s: 1.5 ms.
	if d := next.Sub(t0); d > 1500*time.Microsecond {
		t.Fatalf("pacing delay %v, want at most 1.5ms", d)
	}
	if s.TimeToSend(next) != next {
		t.Fatal("not allowed at the pacer's own time")
	}
	sendN(s, next, 1)
	if s.TimeToSend(next.Add(time.Second)) != 0 {
		t.Fatal("TimeToSend allowed sending with a full window")
	}
	s.OnAppLimited(next)
	if al := m.callsOf("applimited"); len(al) != 1 || al[0].inFlight != 4*1200 {
		t.Fatalf("OnAppLimited calls %+v", al)
	}
	if st := s.Stats(); st.PacingRateBps != 12_000_000 || st.CongestionWindow != 4*1200 || st.BytesInFlight != 4*1200 {
		t.Fatalf("stats %+v", st)
	}
}

func TestOutOfOrderSendPanics(t *testing.T) {
	s, _, _ := newTestSender(t)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a skipped packet number")
		}
	}()
	s.OnPacketSent(t0, 1, 1200, true, 0)
}

func TestRingGrowsAndKeepsRecords(t *testing.T) {
	m := newMock(1 << 30)
	s := NewSender(m, cc.NewRTTStats(0), SenderConfig{InitialCapacity: 16})
	sendN(s, t0, 100)
	var k tokens
	if err := s.OnAck(ms(10), ack(0, [2]uint64{50, 99}, [2]uint64{0, 48}), k.ackedFn, k.lostFn); err != nil {
		t.Fatal(err)
	}
	if len(k.acked) != 99 || !slices.Equal(k.lost, []uint64{49}) || s.BytesInFlight() != 0 {
		t.Fatalf("acked %d lost %v in flight %d", len(k.acked), k.lost, s.BytesInFlight())
	}
	if st := s.Stats(); st.TrackedPackets != 0 {
		t.Fatalf("TrackedPackets = %d after everything resolved", st.TrackedPackets)
	}
}

// TestPTOBackoffCapped: during an outage the backed-off PTO stops growing at
// max(MaxProbeInterval, two un-backed-off PTOs), so the path's return is
// noticed within about half a second whatever the outage's length.
func TestPTOBackoffCapped(t *testing.T) {
	s, m, rtt := newTestSender(t)
	m.cwnd = 1200
	rtt.UpdateRTT(20*time.Millisecond, 0)
	base := s.ptoPeriod()
	if base >= DefaultMaxProbeInterval/2 {
		t.Fatalf("base PTO %v too long for this test", base)
	}
	s.OnPacketSent(t0, 0, 1200, true, 0)
	now := t0
	var gaps []time.Duration
	for range 12 {
		next := s.NextTimeout()
		gaps = append(gaps, next.Sub(now))
		now = next
		if p := s.OnTimeout(now, nil); p == 0 {
			t.Fatalf("PTO at %v gave no probes", now)
		}
		sendN(s, now, 1)
	}
	// The first gap runs from t0; each later one from the probe's sending.
	for i, g := range gaps {
		want := base << i
		if want > DefaultMaxProbeInterval {
			want = DefaultMaxProbeInterval
		}
		if g != want {
			t.Errorf("PTO %d after %v, want %v (base %v)", i+1, g, want, base)
		}
	}
	// A path whose un-backed-off PTO exceeds half the cap still backs off
	// once.
	s2, m2, rtt2 := newTestSender(t)
	m2.cwnd = 1200
	rtt2.UpdateRTT(900*time.Millisecond, 0)
	base2 := s2.ptoPeriod()
	s2.OnPacketSent(t0, 0, 1200, true, 0)
	s2.OnTimeout(s2.NextTimeout(), nil)
	sendN(s2, s2.NextTimeout(), 1)
	at := s2.NextTimeout()
	s2.OnTimeout(at, nil)
	sendN(s2, at, 1)
	if got := s2.NextTimeout().Sub(at); got != 2*base2 {
		t.Errorf("long path: third PTO after %v, want 2 x %v", got, base2)
	}
}

// TestPacketThresholdAdaptsToReordering: a packet overtaken by 40 others
// is declared lost by the packet threshold (3); once its ACK shows the
// loss was spurious, the threshold rises past 40, so the next packet
// overtaken by as many is not declared lost before its ACK comes, while
// the time threshold still declares a real loss.
func TestPacketThresholdAdaptsToReordering(t *testing.T) {
	m := newMock(1000 * 1200)
	s := NewSender(m, cc.NewRTTStats(0), SenderConfig{})
	var k tokens
	sendN(s, t0, 41) // 0..40
	if err := s.OnAck(ms(100), ack(0, [2]uint64{1, 40}), k.ackedFn, k.lostFn); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.lost, []uint64{0}) {
		t.Fatalf("lost %v, want [0] (overtaken by 40 > threshold 3)", k.lost)
	}
	if err := s.OnAck(ms(101), ack(0, [2]uint64{0, 40}), k.ackedFn, k.lostFn); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.SpuriousLosses != 1 || st.PacketThreshold != 41 {
		t.Fatalf("after the spurious loss: %d spurious, packet threshold %d; want 1 and 41", st.SpuriousLosses, st.PacketThreshold)
	}
	k = tokens{}
	sendN(s, ms(101), 41) // 41..81
	if err := s.OnAck(ms(201), ack(0, [2]uint64{42, 81}), k.ackedFn, k.lostFn); err != nil {
		t.Fatal(err)
	}
	if len(k.lost) != 0 {
		t.Fatalf("a packet overtaken by 40 declared lost with threshold 41: %v", k.lost)
	}
	// Never acknowledged: the time threshold declares it lost.
	for now := ms(201); len(k.lost) == 0 && now < ms(1000); now = now.Add(time.Millisecond) {
		s.OnTimeout(now, k.lostFn)
	}
	if !slices.Equal(k.lost, []uint64{41}) {
		t.Fatalf("lost %v, want [41] by the time threshold", k.lost)
	}
}

// TestRateCap: a cap below the controller's rate paces the packets at the
// cap and marks them application-limited for the controller; a cap above
// it, or none, changes nothing.
func TestRateCap(t *testing.T) {
	s, m, _ := newTestSender(t)
	m.rateBps = 100e6
	sendN(s, ms(0), 1)
	s.SetRateCap(ms(0), 10e6)
	if got := s.Stats().PacingRateBps; got != 10e6 {
		t.Fatalf("pacing at %d bit/s under a 10 Mbit/s cap, want the cap", got)
	}
	m.calls = nil
	sendN(s, ms(0), 1)
	if n := len(m.callsOf("applimited")); n != 1 {
		t.Errorf("a packet sent under a binding cap made %d OnAppLimited calls, want 1", n)
	}
	// 1200 bytes at 10 Mbit/s take 0.96 ms: the next packet waits for that.
	sendN(s, ms(0), 4) // spend the burst credit
	if next := s.TimeToSend(ms(0)); !next.After(ms(0)) {
		t.Errorf("under the cap the next send is at %v, want later than now", next)
	}

	s.SetRateCap(ms(10), 1e9)
	m.calls = nil
	sendN(s, ms(10), 1)
	if got := s.Stats().PacingRateBps; got != 100e6 {
		t.Errorf("pacing at %d bit/s under a cap above the controller's 100 Mbit/s, want the controller's", got)
	}
	if n := len(m.callsOf("applimited")); n != 0 {
		t.Errorf("a cap that does not bind made %d OnAppLimited calls, want 0", n)
	}
	s.SetRateCap(ms(10), 0)
	if st := s.Stats(); st.RateCapBps != 0 || st.PacingRateBps != 100e6 {
		t.Errorf("after lifting the cap: cap %d, pacing %d; want 0 and the controller's 100 Mbit/s", st.RateCapBps, st.PacingRateBps)
	}
}

// TestPacerBurstQuiet: the pacer's burst grows with the path's RTT only
// after burstQuietRTTs smoothed RTTs with no packet declared lost, counted
// from the first RTT sample: never in a connection's first round trips
// (its startup), nor on a path that keeps losing.
func TestPacerBurstQuiet(t *testing.T) {
	s, _, rtt := newTestSender(t)
	rtt.UpdateRTT(100*time.Millisecond, 0)
	grown := cc.PacerBurstFor(100 * time.Millisecond)
	if grown <= cc.DefaultPacerBurst {
		t.Fatalf("PacerBurstFor(100 ms) = %v, not above the default", grown)
	}
	at := func(d time.Duration) monotime.Time { return t0.Add(d) }
	if got := s.pacerBurst(at(0)); got != cc.DefaultPacerBurst {
		t.Errorf("before any RTT sample: %v, want %v", got, cc.DefaultPacerBurst)
	}
	s.firstRTTSampleAt = at(0)
	for _, tc := range []struct {
		what   string
		lossAt time.Duration // 0: none
		now    time.Duration
		want   time.Duration
	}{
		{"7 RTTs after the first sample", 0, 700 * time.Millisecond, cc.DefaultPacerBurst},
		{"8 RTTs after the first sample", 0, 800 * time.Millisecond, grown},
		{"a loss 1 RTT ago", 900 * time.Millisecond, time.Second, cc.DefaultPacerBurst},
		{"8 RTTs after the last loss", 900 * time.Millisecond, 1700 * time.Millisecond, grown},
	} {
		if tc.lossAt != 0 {
			s.lastLossAt = at(tc.lossAt)
		}
		if got := s.pacerBurst(at(tc.now)); got != tc.want {
			t.Errorf("%s: burst %v, want %v", tc.what, got, tc.want)
		}
	}
}
