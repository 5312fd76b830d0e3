package cc

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// Tests of BBR's reaction to random (non-congestive) loss, the min-RTT
// refresh tolerance and the ProbeBW UP exit on an estimated queue.

// TestBBRStartupIgnoresRandomLoss: 1 % random loss must not end Startup
// before the bandwidth plateaus, however the losses fall; Startup ends
// at the path's bandwidth with inflight_hi, if set, at least one BDP.
func TestBBRStartupIgnoresRandomLoss(t *testing.T) {
	const rate = 100e6
	for seed := uint64(600); seed < 630; seed++ {
		cfg := simConfig{rateBps: rate, rtt: 100 * time.Millisecond, seed: seed, lossProb: 0.01}
		cfg.queueBytes = 2 * cfg.bdpBytes()
		b := newTestBBR(seed)
		s := newSim(t, cfg, b)
		s.run(30*time.Second, func(s *sim) bool { return b.State().FilledPipe })
		st := b.State()
		if !st.FilledPipe {
			t.Fatalf("seed %d: Startup did not end: %+v", seed, st)
		}
		if !within(st.MaxBwBps, rate, 0.05) {
			t.Errorf("seed %d: Startup ended at %.1f Mbit/s (round %d), want the path's %d Mbit/s ±5%%",
				seed, float64(st.MaxBwBps)/1e6, st.RoundCount, int(rate/1e6))
		}
		if st.InflightHiBytes != 0 && st.InflightHiBytes < cfg.bdpBytes() {
			t.Errorf("seed %d: inflight_hi %d below one BDP (%d) at Startup exit", seed, st.InflightHiBytes, cfg.bdpBytes())
		}
	}
}

// TestBBRStartupStillExitsOnQueueOverflow: with a shallow buffer the
// loss-based exit still ends Startup once the plateau begins, before the
// 3-round plateau test would, with inflight_hi set.
func TestBBRStartupStillExitsOnQueueOverflow(t *testing.T) {
	const seed = 620
	cfg := simConfig{rateBps: 100e6, rtt: 50 * time.Millisecond, seed: seed}
	cfg.queueBytes = cfg.bdpBytes() / 10
	b := newTestBBR(seed)
	s := newSim(t, cfg, b)
	s.run(30*time.Second, func(s *sim) bool { return b.State().FilledPipe })
	st := b.State()
	if !st.FilledPipe || st.InflightHiBytes == 0 {
		t.Fatalf("seed %d: Startup did not end on loss: %+v", seed, st)
	}
	if !within(st.MaxBwBps, cfg.rateBps, 0.05) {
		t.Errorf("seed %d: bw at Startup exit %d, want %d ±5%%", seed, st.MaxBwBps, cfg.rateBps)
	}
}

// lossyProbeBW starts BBR on a 100 Mbit/s 100 ms path with a 2-BDP queue
// that drops lossProb of the packets at random, and runs it into ProbeBW.
func lossyProbeBW(t *testing.T, seed uint64, lossProb float64) (simConfig, *BBR, *sim) {
	cfg := simConfig{rateBps: 100e6, rtt: 100 * time.Millisecond, seed: seed, lossProb: lossProb}
	cfg.queueBytes = 2 * cfg.bdpBytes()
	b := newTestBBR(seed)
	s := newSim(t, cfg, b)
	s.run(30*time.Second, func(s *sim) bool { return b.State().Mode.IsProbeBW() })
	return cfg, b, s
}

// TestBBRRandomLossKeepsModel: 1 % random loss never lowers the model:
// over 20 s in ProbeBW on a 100 Mbit/s 100 ms path, inflight_hi stays
// unset or at least 0.9 BDP, bw_lo unset or above 90 % of the link, and
// throughput above 90 % of the link. Several seeds.
func TestBBRRandomLossKeepsModel(t *testing.T) {
	for seed := uint64(700); seed < 706; seed++ {
		cfg, b, s := lossyProbeBW(t, seed, 0.01)
		minHi, minBwLo := math.MaxInt, uint64(math.MaxUint64)
		s.onAck = func(s *sim) {
			st := b.State()
			if st.InflightHiBytes != 0 {
				minHi = min(minHi, st.InflightHiBytes)
			}
			if st.BwLoBps != 0 {
				minBwLo = min(minBwLo, st.BwLoBps)
			}
		}
		share := s.linkShare(20 * time.Second)
		t.Logf("seed %d: %.1f%% of the link, random drops %d, min inflight_hi %d, min bw_lo %d", seed, 100*share, s.droppedRand, minHi, minBwLo)
		if minHi != math.MaxInt && minHi < cfg.bdpBytes()*9/10 {
			t.Errorf("seed %d: random loss lowered inflight_hi to %d (BDP %d)", seed, minHi, cfg.bdpBytes())
		}
		// A round may exceed 2 % by chance; bw_lo then follows that
		// round's delivery rate, which random loss barely lowers.
		if minBwLo != math.MaxUint64 && float64(minBwLo) < 0.9*float64(cfg.rateBps) {
			t.Errorf("seed %d: random loss cut bw_lo to %d", seed, minBwLo)
		}
		if share < 0.9 {
			t.Errorf("seed %d: %.1f%% of the link with 1%% random loss, want >= 90%%", seed, 100*share)
		}
	}
}

// TestBBRLearnsHighRandomLoss: on a path that loses 3 % of packets at
// random, above the draft's 2 % congestion threshold, BBR learns the
// path's loss from its quiet rounds and keeps the link busy instead of
// cutting its bounds every round. Several seeds.
func TestBBRLearnsHighRandomLoss(t *testing.T) {
	for seed := uint64(900); seed < 904; seed++ {
		cfg, b, s := lossyProbeBW(t, seed, 0.03)
		s.run(10*time.Second, nil) // learn
		share := s.linkShare(20 * time.Second)
		st := b.State()
		t.Logf("seed %d: %.1f%% of the link, learnt random loss %.2f%%, inflight_hi %d, bw_lo %d (BDP %d) %+v",
			seed, 100*share, 100*st.RandomLoss, st.InflightHiBytes, st.BwLoBps, cfg.bdpBytes(), st)
		if st.RandomLoss < 0.02 || st.RandomLoss > 0.04 {
			t.Errorf("seed %d: learnt random loss %.2f%%, want about 3%%", seed, 100*st.RandomLoss)
		}
		if share < 0.85 {
			t.Errorf("seed %d: %.1f%% of the link with 3%% random loss, want >= 85%%", seed, 100*share)
		}
	}
}

// warmBBR returns a BBR in ProbeBW with a model of a 100 Mbit/s, 40 ms
// path, and that path's simulator (idle: the application has no data
// after 4 s).
func warmBBR(t *testing.T, seed uint64) (*BBR, *sim) {
	t.Helper()
	cfg := simConfig{rateBps: 100e6, rtt: 40 * time.Millisecond, seed: seed,
		hasData: func(e time.Duration) bool { return e < 4*time.Second }}
	cfg.queueBytes = 2 * cfg.bdpBytes()
	b := newTestBBR(seed)
	s := newSim(t, cfg, b)
	s.run(5*time.Second, nil)
	if st := b.State(); !st.Mode.IsProbeBW() || st.InflightHiBytes != 0 {
		t.Fatalf("seed %d: warm-up left %+v", seed, st)
	}
	return b, s
}

// sendFlight reports n packets of DefaultMSS sent at now on top of
// inflight bytes and returns their states.
func sendFlight(b *BBR, now monotime.Time, inflight, n int) []PacketState {
	ps := make([]PacketState, n)
	for i := range ps {
		ps[i] = b.OnPacketSent(now, DefaultMSS, inflight)
		inflight += DefaultMSS
	}
	return ps
}

// TestBBRRecoveryOnlyOnCongestiveLoss: one loss in a flight of 400
// packets (0.25 %) neither enters recovery nor pins cwnd to the bytes in
// flight; 5 % of a flight lost does.
func TestBBRRecoveryOnlyOnCongestiveLoss(t *testing.T) {
	b, s := warmBBR(t, 800)
	rtt := s.rtt
	now := s.now.Add(time.Second)
	flight := sendFlight(b, now, 0, 400)
	cwnd0 := b.CongestionWindow()
	now = now.Add(40 * time.Millisecond)
	// The first 100 packets are acked, the 101st is lost (packet
	// threshold), 299 remain in flight.
	inflight := 299 * DefaultMSS
	b.OnAck(&AckEvent{Now: now, Acked: flight[:100], Lost: flight[100:101], RTT: rtt,
		PriorInFlight: 400 * DefaultMSS, BytesInFlight: inflight})
	if st := b.State(); st.InRecovery || st.CwndBytes < cwnd0 {
		t.Errorf("a 0.25 %% loss entered recovery or cut cwnd: cwnd %d -> %d, %+v", cwnd0, st.CwndBytes, st)
	}
	// Now 20 packets of the same flight are lost (5 %): congestion.
	now = now.Add(time.Millisecond)
	inflight -= 20*DefaultMSS + 10*DefaultMSS
	b.OnAck(&AckEvent{Now: now, Acked: flight[121:131], Lost: flight[101:121], RTT: rtt,
		PriorInFlight: inflight + 30*DefaultMSS, BytesInFlight: inflight})
	st := b.State()
	if !st.InRecovery {
		t.Fatalf("a 5 %% loss did not enter recovery: %+v", st)
	}
	if st.CwndBytes > inflight+10*DefaultMSS {
		t.Errorf("recovery cwnd %d, want about the %d bytes in flight", st.CwndBytes, inflight)
	}
}

// TestBBRAppLimitedLossRoundKeepsBwLo: a loss round whose samples were
// application-limited (a trickle after idle) does not cut bw_lo or
// inflight_lo, even at a loss rate above 2 %; a bulk round does.
func TestBBRAppLimitedLossRoundKeepsBwLo(t *testing.T) {
	for _, appLimited := range []bool{true, false} {
		b, s := warmBBR(t, 810)
		maxBw := b.State().MaxBwBps
		now := s.now.Add(time.Second)
		b.setMode(BBRProbeBWCruise)
		b.cycleStamp, b.roundsSinceProbe = now, 0 // no probe due
		b.resetCongestionSignals()
		b.lossRoundDelivered = b.rs.Delivered() + 1 // the next flight is one round
		b.rs.appLimitedEnd = 0                      // the warm-up ended idle
		if appLimited {
			b.OnAppLimited(now, 0)
		}
		// Round 1: 50 packets, 3 lost (6 %).
		flight := sendFlight(b, now, 0, 50)
		now = now.Add(40 * time.Millisecond)
		b.OnAck(&AckEvent{Now: now, Acked: flight[3:], Lost: flight[:3], RTT: s.rtt,
			PriorInFlight: 50 * DefaultMSS, BytesInFlight: 0})
		// Round 2 closes round 1.
		next := sendFlight(b, now, 0, 1)
		now = now.Add(40 * time.Millisecond)
		b.OnAck(&AckEvent{Now: now, Acked: next, RTT: s.rtt, PriorInFlight: DefaultMSS})
		st := b.State()
		if appLimited && (st.BwLoBps != 0 || st.InflightLoBytes != 0) {
			t.Errorf("app-limited round with 6 %% loss cut the lower bounds: bw_lo %d (max bw %d), inflight_lo %d",
				st.BwLoBps, maxBw, st.InflightLoBytes)
		}
		if !appLimited && st.BwLoBps == 0 {
			t.Errorf("bulk round with 6 %% loss did not set bw_lo: %+v", st)
		}
	}
}

// TestBBRMinRTTToleranceSkipsProbeRTT: an RTT sample within the tolerance
// (see minRTTTolerance) of the min RTT refreshes the ProbeRTT timer,
// keeping the lower min RTT; a sample beyond it does not.
func TestBBRMinRTTToleranceSkipsProbeRTT(t *testing.T) {
	b, s := warmBBR(t, 820)
	st := b.State()
	serialisation := time.Duration(float64(DefaultMSS*8) / float64(st.BwBps) * float64(time.Second))
	want := func(minRTT time.Duration) time.Duration { return max(serialisation, minRTT/minRTTToleranceDiv) }
	if got, w := b.minRTTTolerance(), want(st.MinRTT); got < w-time.Microsecond || got > w+time.Microsecond {
		t.Fatalf("tolerance %v at min RTT %v and %d bit/s, want %v", got, st.MinRTT, st.BwBps, w)
	}
	t0 := s.now.Add(time.Second)
	small := st.MinRTT - time.Millisecond // a small packet sets a new min
	b.updateMinRTT(t0, &RateSample{RTT: small})
	if b.State().MinRTT != small {
		t.Fatalf("min RTT %v, want %v", b.State().MinRTT, small)
	}
	tol := want(small)
	// Samples within the tolerance for 12 s: no ProbeRTT due, min RTT kept
	// at the small packet's value.
	for now := t0; now < t0.Add(12*time.Second); now = now.Add(500 * time.Millisecond) {
		b.updateMinRTT(now, &RateSample{RTT: small + tol*9/10})
		if b.probeRTTExpired {
			t.Fatalf("ProbeRTT due at %v although min RTT was matched within tolerance", now.Sub(t0))
		}
	}
	if got := b.State().MinRTT; got != small {
		t.Errorf("min RTT %v after tolerant refreshes, want %v", got, small)
	}
	// Samples just beyond the tolerance do not refresh: ProbeRTT is due
	// 5 s after the last match.
	last := t0.Add(12 * time.Second)
	for now := last; now < last.Add(6*time.Second); now = now.Add(500 * time.Millisecond) {
		b.updateMinRTT(now, &RateSample{RTT: small + 2*tol})
		if b.probeRTTExpired {
			if d := now.Sub(last); d < bbrProbeRTTInterval {
				t.Errorf("ProbeRTT due %v after the last match, want %v", d, bbrProbeRTTInterval)
			}
			return
		}
	}
	t.Errorf("samples above the tolerance refreshed the ProbeRTT timer")
}

// TestBBRProbeUpBoundsQueue: on a deep buffer without loss, ProbeBW UP
// ends once 1.25 BDP is in flight, so each probe queues about a quarter
// BDP (not the ~1 BDP of three plateau rounds) and DOWN drains it within
// the cycle: the min RTT is re-measured and ProbeRTT never runs.
func TestBBRProbeUpBoundsQueue(t *testing.T) {
	const seed = 830
	cfg := simConfig{rateBps: 250e6, rtt: 250 * time.Millisecond, seed: seed}
	cfg.queueBytes = 3 * cfg.bdpBytes()
	b := newTestBBR(seed)
	s := newSim(t, cfg, b)
	s.run(30*time.Second, func(s *sim) bool { return b.State().Mode.IsProbeBW() })
	s.run(3*time.Second, nil) // let the Startup queue drain
	maxQ, ups := 0, 0
	last := b.State().Mode
	s.onAck = func(s *sim) {
		st := b.State()
		maxQ = max(maxQ, s.backlogBytes())
		if st.Mode == BBRProbeBWUp && last != BBRProbeBWUp {
			ups++
		}
		last = st.Mode
	}
	s.run(30*time.Second, nil)
	t.Logf("seed %d: %d probes, max queue %.2f BDP, ProbeRTTs %d", seed, ups, float64(maxQ)/float64(cfg.bdpBytes()), b.State().ProbeRTTCount)
	if ups < 5 {
		t.Errorf("seed %d: %d bandwidth probes in 30 s", seed, ups)
	}
	if maxQ > cfg.bdpBytes()*2/5 {
		t.Errorf("seed %d: max queue %d bytes, want <= 0.4 BDP (%d)", seed, maxQ, cfg.bdpBytes()*2/5)
	}
	if n := b.State().ProbeRTTCount; n != 0 {
		t.Errorf("seed %d: %d ProbeRTT episodes", seed, n)
	}
}

// TestBBRInitialBw: told the path's rate (BBRConfig.InitialBwBps), BBR
// skips Startup on a 600 ms, 50 Mbit/s path and fills the link from the
// second round trip; told four times the rate, it sends too much at first
// and then corrects its model to the measured rate.
func TestBBRInitialBw(t *testing.T) {
	for _, tc := range []struct {
		name        string
		hint        uint64
		firstWindow time.Duration // the window measured from the start
		minShare    float64
	}{
		// The first RTT sample comes at 0.6 s and the data sent then
		// arrives 0.3 s later: 2.1 s of the first 3 at most, 70 %.
		{"exact", 50e6, 3 * time.Second, 0.65},
		{"none", 0, 3 * time.Second, 0},
		{"4x too high", 200e6, 3 * time.Second, 0},
	} {
		cfg := simConfig{rateBps: 50e6, rtt: 600 * time.Millisecond, seed: 950}
		cfg.queueBytes = 2_000_000
		b := NewBBR(BBRConfig{Rand: rand.New(rand.NewPCG(950, 7)), InitialBwBps: tc.hint})
		s := newSim(t, cfg, b)
		s.run(tc.firstWindow, nil)
		first := float64(s.rxBytes) * 8 / tc.firstWindow.Seconds() / float64(cfg.rateBps)
		const later = 20 * time.Second
		after := s.linkShare(later)
		st := b.State()
		t.Logf("%s: first %v %.0f%% of the link, next %v %.0f%%; bw %.1f Mbit/s, mode %v, lost %d B",
			tc.name, tc.firstWindow, 100*first, later, 100*after, float64(st.BwBps)/1e6, st.Mode, st.LostBytes)
		if first < tc.minShare {
			t.Errorf("%s: %.0f%% of the link in the first %v, want >= %.0f%%", tc.name, 100*first, tc.firstWindow, 100*tc.minShare)
		}
		if after < 0.85 {
			t.Errorf("%s: %.0f%% of the link after the start, want >= 85%%", tc.name, 100*after)
		}
		if !within(st.BwBps, cfg.rateBps, 0.1) {
			t.Errorf("%s: bandwidth estimate %.1f Mbit/s after %v, want the link's 50", tc.name, float64(st.BwBps)/1e6, tc.firstWindow+later)
		}
	}
}
