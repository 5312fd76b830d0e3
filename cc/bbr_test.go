package cc

import (
	"math/rand/v2"
	"testing"
	"time"
)

// newTestBBR returns a BBR with a seeded random source.
func newTestBBR(seed uint64) *BBR {
	return NewBBR(BBRConfig{Rand: rand.New(rand.NewPCG(seed, 7))})
}

// within reports whether got is within frac of want.
func within(got, want uint64, frac float64) bool {
	return float64(got) >= float64(want)*(1-frac) && float64(got) <= float64(want)*(1+frac)
}

func TestBBRStartup(t *testing.T) {
	tests := []struct {
		name  string
		rate  uint64
		rtt   time.Duration
		queue float64 // in BDPs
	}{
		{"100M-50ms", 100e6, 50 * time.Millisecond, 1.25},
		{"20M-100ms", 20e6, 100 * time.Millisecond, 1.25},
		{"250M-200ms", 250e6, 200 * time.Millisecond, 1.25},
		{"1G-10ms", 1e9, 10 * time.Millisecond, 1.5},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seed := uint64(100 + i)
			cfg := simConfig{rateBps: tc.rate, rtt: tc.rtt, seed: seed}
			cfg.queueBytes = int(tc.queue * float64(cfg.bdpBytes()))
			b := newTestBBR(seed)
			s := newSim(t, cfg, b)
			plateauRound := int64(-1)
			var exit BBRState
			var exitDrops int
			var drainAt, probeAt time.Duration
			s.onAck = func(s *sim) {
				st := b.State()
				if st.Mode == BBRDrain && drainAt == 0 {
					drainAt = s.elapsed()
				}
				if st.Mode.IsProbeBW() && probeAt == 0 {
					probeAt = s.elapsed()
				}
				if plateauRound < 0 && float64(st.MaxBwBps)*bbrFullBwThresh >= float64(tc.rate) {
					plateauRound = st.RoundCount
				}
				if st.Mode == BBRDrain && exit.Mode == BBRStartup {
					exit = st
					exitDrops = s.droppedQueue
				}
			}
			s.run(30*time.Second, func(s *sim) bool { return b.State().Mode.IsProbeBW() })
			st := b.State()
			if !st.Mode.IsProbeBW() {
				t.Fatalf("seed %d: not in ProbeBW after %v: %+v", seed, s.elapsed(), st)
			}
			if exit.RoundCount == 0 || plateauRound < 0 {
				t.Fatalf("seed %d: startup exit not seen (plateau round %d)", seed, plateauRound)
			}
			// The bw cannot grow 25 % beyond the plateau round; the plateau
			// test needs 3 rounds, plus one for the samples to arrive.
			if d := exit.RoundCount - plateauRound; d < 3 || d > 4 {
				t.Errorf("seed %d: startup exit %d rounds after the plateau, want 3..4", seed, d)
			}
			if !within(exit.MaxBwBps, tc.rate, 0.05) {
				t.Errorf("seed %d: bw at startup exit %d, want %d ±5%%", seed, exit.MaxBwBps, tc.rate)
			}
			if exit.LostBytes != 0 || exitDrops != 0 {
				t.Errorf("seed %d: loss in startup: %d bytes lost, %d drops", seed, exit.LostBytes, exitDrops)
			}
			// Drain at 0.35× empties a one-BDP queue in about 1.5 RTT (of
			// the queue-inflated RTT).
			if d := probeAt - drainAt; d > 4*tc.rtt {
				t.Errorf("seed %d: Drain lasted %v (RTT %v)", seed, d, tc.rtt)
			}
			// Drain must leave a small queue: at most a few packets.
			if q := s.backlogBytes(); q > cfg.bdpBytes()/20+4*cfg.mss {
				t.Errorf("seed %d: queue after drain %d bytes (BDP %d)", seed, q, cfg.bdpBytes())
			}
		})
	}
}

func TestBBRSteadyState(t *testing.T) {
	tests := []struct {
		name      string
		rate      uint64
		rtt       time.Duration
		queue     float64 // in BDPs
		loss      float64
		ackEvery  int
		measure   time.Duration
		minShare  float64 // of the link, over measure after startup
		bwTol     float64 // max bw estimate error after startup
		wantProbe bool    // all four ProbeBW phases must be seen
	}{
		{"250M-200ms-2BDP", 250e6, 200 * time.Millisecond, 2, 0, 1, 20 * time.Second, 0.95, 0.03, true},
		{"100M-50ms-ack2", 100e6, 50 * time.Millisecond, 2, 0, 2, 10 * time.Second, 0.95, 0.03, true},
		{"100M-2ms-shallow", 100e6, 2 * time.Millisecond, 4, 0, 1, 5 * time.Second, 0.95, 0.03, true},
		{"100M-100ms-1%loss", 100e6, 100 * time.Millisecond, 2, 0.01, 1, 20 * time.Second, 0.85, 0.05, false},
		{"50M-600ms-0.5%loss", 50e6, 600 * time.Millisecond, 1, 0.005, 2, 20 * time.Second, 0.85, 0.05, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seed := uint64(200 + i)
			cfg := simConfig{rateBps: tc.rate, rtt: tc.rtt, seed: seed, lossProb: tc.loss, ackEvery: tc.ackEvery}
			cfg.queueBytes = max(int(tc.queue*float64(cfg.bdpBytes())), 20*DefaultMSS)
			b := newTestBBR(seed)
			s := newSim(t, cfg, b)
			s.run(60*time.Second, func(s *sim) bool { return b.State().Mode.IsProbeBW() })
			if !b.State().Mode.IsProbeBW() {
				t.Fatalf("seed %d: startup did not end", seed)
			}
			seen := map[BBRMode]bool{}
			var worstBw uint64
			worstErr := 0.0
			s.onAck = func(s *sim) {
				st := b.State()
				seen[st.Mode] = true
				if st.Mode.IsProbeBW() {
					e := float64(st.MaxBwBps)/float64(tc.rate) - 1
					if e < 0 {
						e = -e
					}
					if e > worstErr {
						worstErr, worstBw = e, st.MaxBwBps
					}
				}
			}
			share := s.linkShare(tc.measure)
			t.Logf("seed %d: %.1f%% of the link, worst bw error %.2f%%, drops queue=%d random=%d, probe_rtt=%d",
				seed, 100*share, 100*worstErr, s.droppedQueue, s.droppedRand, b.State().ProbeRTTCount)
			if share < tc.minShare {
				t.Errorf("seed %d: throughput %.1f%% of the link, want >= %.0f%%", seed, 100*share, 100*tc.minShare)
			}
			if worstErr > tc.bwTol {
				t.Errorf("seed %d: max bw estimate %d off by %.1f%% (> %.0f%%)", seed, worstBw, 100*worstErr, 100*tc.bwTol)
			}
			if tc.wantProbe {
				for _, m := range []BBRMode{BBRProbeBWDown, BBRProbeBWCruise, BBRProbeBWRefill, BBRProbeBWUp} {
					if !seen[m] {
						t.Errorf("seed %d: ProbeBW phase %v never seen", seed, m)
					}
				}
			}
		})
	}
}

// probeRTTEpisodes records the ProbeRTT episodes a run goes through.
type probeRTTEpisodes struct {
	starts, ends []time.Duration
	last         BBRMode
}

func (p *probeRTTEpisodes) observe(s *sim, st BBRState) {
	if st.Mode == BBRProbeRTT && p.last != BBRProbeRTT {
		p.starts = append(p.starts, s.elapsed())
	}
	if st.Mode != BBRProbeRTT && p.last == BBRProbeRTT {
		p.ends = append(p.ends, s.elapsed())
	}
	p.last = st.Mode
}

func TestBBRProbeRTTSkippedWhenMinRTTRefreshes(t *testing.T) {
	for i, rtt := range []time.Duration{40 * time.Millisecond, 250 * time.Millisecond} {
		seed := uint64(300 + i)
		cfg := simConfig{rateBps: 50e6, rtt: rtt, seed: seed}
		cfg.queueBytes = 2 * cfg.bdpBytes()
		b := newTestBBR(seed)
		s := newSim(t, cfg, b)
		s.run(30*time.Second, nil)
		if n := b.State().ProbeRTTCount; n != 0 {
			t.Errorf("rtt %v seed %d: %d ProbeRTT episodes in 30 s on a path whose min RTT is re-measured each cycle", rtt, seed, n)
		}
	}
}

func TestBBRProbeRTTWhenMinRTTIsStale(t *testing.T) {
	// The path lengthens by 20 ms at 3 s: no sample matches the old min
	// RTT any more, so ProbeRTT must run 5 s after the last match, last
	// 200 ms plus about a round, and min RTT must follow the new path
	// once the 10 s filter expires.
	const seed = 400
	cfg := simConfig{rateBps: 50e6, rtt: 40 * time.Millisecond, seed: seed,
		extraDelay: 20 * time.Millisecond, extraDelayAt: 3 * time.Second}
	cfg.queueBytes = 2 * cfg.bdpBytes()
	b := newTestBBR(seed)
	s := newSim(t, cfg, b)
	var ep probeRTTEpisodes
	var minRTTs []time.Duration
	s.onAck = func(s *sim) {
		st := b.State()
		ep.observe(s, st)
		minRTTs = append(minRTTs[:0], st.MinRTT)
	}
	s.run(16*time.Second, nil)
	if len(ep.starts) == 0 || len(ep.ends) == 0 {
		t.Fatalf("seed %d: no complete ProbeRTT episode", seed)
	}
	if start := ep.starts[0]; start < 8*time.Second || start > 8*time.Second+500*time.Millisecond {
		t.Errorf("seed %d: first ProbeRTT at %v, want about 5 s after 3 s", seed, start)
	}
	newRTT := cfg.rtt + cfg.extraDelay
	d := ep.ends[0] - ep.starts[0]
	if d < bbrProbeRTTDuration || d > bbrProbeRTTDuration+3*newRTT {
		t.Errorf("seed %d: ProbeRTT lasted %v, want 200 ms + about one round (%v)", seed, d, newRTT)
	}
	if got := b.State().MinRTT; got < newRTT || got > newRTT+2*time.Millisecond {
		t.Errorf("seed %d: min RTT %v after the path changed to %v", seed, got, newRTT)
	}
}

func TestBBRIdleRestartKeepsModel(t *testing.T) {
	// A warm tunnel: 5 s of bulk data, 3 s idle, then bulk again. The
	// model must survive and the new burst must run at the path rate
	// at once, not slow-start.
	const seed = 500
	cfg := simConfig{rateBps: 50e6, rtt: 80 * time.Millisecond, seed: seed,
		hasData: func(e time.Duration) bool { return e < 5*time.Second || e >= 8*time.Second }}
	cfg.queueBytes = 2 * cfg.bdpBytes()
	b := newTestBBR(seed)
	s := newSim(t, cfg, b)
	s.run(8*time.Second, nil)
	before := b.State()
	if !before.Mode.IsProbeBW() && before.Mode != BBRProbeRTT {
		t.Fatalf("seed %d: mode %v before the restart", seed, before.Mode)
	}
	sawStartup := false
	s.onAck = func(s *sim) {
		if b.State().Mode == BBRStartup || b.State().Mode == BBRDrain {
			sawStartup = true
		}
	}
	rx0 := s.rxBytes
	const window = 500 * time.Millisecond
	s.run(window, nil)
	// The first packets need half an RTT to arrive.
	share := float64(s.rxBytes-rx0) * 8 / (window - cfg.rtt/2).Seconds() / float64(cfg.rateBps)
	after := b.State()
	if sawStartup {
		t.Errorf("seed %d: restart from idle went back to Startup/Drain", seed)
	}
	if !within(after.MaxBwBps, cfg.rateBps, 0.05) || after.MinRTT != before.MinRTT {
		t.Errorf("seed %d: model lost: bw %d→%d, min RTT %v→%v", seed, before.MaxBwBps, after.MaxBwBps, before.MinRTT, after.MinRTT)
	}
	if share < 0.9 {
		t.Errorf("seed %d: %.1f%% of the link in the first %v after idle, want >= 90%%", seed, 100*share, window)
	}
}

func TestBBRStateSnapshot(t *testing.T) {
	b := newTestBBR(1)
	st := b.State()
	if st.Mode != BBRStartup || st.CwndBytes != 10*DefaultMSS || st.PacingRateBps == 0 {
		t.Fatalf("initial state %+v", st)
	}
	if st.InflightHiBytes != 0 || st.InflightLoBytes != 0 || st.BwLoBps != 0 {
		t.Fatalf("bounds must start unset: %+v", st)
	}
	if got := b.Name(); got != "bbr" {
		t.Fatalf("Name() = %q", got)
	}
	for m := BBRStartup; m <= BBRProbeRTT; m++ {
		if m.String() == "unknown" {
			t.Errorf("mode %d has no name", m)
		}
	}
}
