package netsim_test

import (
	"errors"
	"hash/fnv"
	"math"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/netsim"
)

// outOfOrder counts arrivals below a sequence already seen, and duplicates.
func outOfOrder(got []arrival) (late, dups int) {
	seen := make(map[uint64]bool, len(got))
	var high uint64
	for i, r := range got {
		if seen[r.seq] {
			dups++
			continue
		}
		seen[r.seq] = true
		if i > 0 && r.seq < high {
			late++
		}
		high = max(high, r.seq)
	}
	return late, dups
}

// everyMillisecond sends n 100-byte datagrams, one a millisecond, over a
// link of cfg and returns what arrived and the link's counters.
func everyMillisecond(t *testing.T, seed uint64, cfg netsim.LinkConfig, n int) ([]arrival, netsim.LinkStats) {
	t.Helper()
	src := &cbr{size: 100, interval: time.Millisecond, limit: n}
	dst := &cbr{sink: sink{keep: true}}
	sim, l := oneWay(seed, cfg, src, dst, netsim.FlowOptions{})
	if err := sim.RunFor(time.Duration(n)*time.Millisecond + time.Second); err != nil {
		t.Fatal(err)
	}
	return dst.got, l.Stats()
}

func TestJitterReorderDuplicate(t *testing.T) {
	const n = 20_000
	const delay = 20 * time.Millisecond
	tests := []struct {
		name                       string
		cfg                        netsim.LinkConfig
		wantReorderPct, wantDupPct float64
	}{
		{"jitter keeps order", netsim.LinkConfig{Delay: delay, Jitter: 5 * time.Millisecond}, 0, 0},
		{"reorder", netsim.LinkConfig{Delay: delay, ReorderPercent: 10, ReorderDelay: 5 * time.Millisecond}, 10, 0},
		{"reorder with jitter", netsim.LinkConfig{Delay: delay, Jitter: 2 * time.Millisecond,
			ReorderPercent: 3, ReorderDelay: 8 * time.Millisecond}, 3, 0},
		{"duplicate", netsim.LinkConfig{Delay: delay, DuplicatePercent: 5}, 0, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const seed = 7
			got, st := everyMillisecond(t, seed, tc.cfg, n)
			late, dups := outOfOrder(got)
			if uint64(dups) != st.Duplicates || len(got) != n+dups {
				t.Errorf("seed %d: received %d with %d duplicates, link made %d", seed, len(got), dups, st.Duplicates)
			}
			// A held-back packet is overtaken unless all of the next few are
			// held back too; an on-time packet is never late.
			if uint64(late) > st.Reordered || float64(late) < 0.99*float64(st.Reordered) {
				t.Errorf("seed %d: %d late arrivals, link reordered %d", seed, late, st.Reordered)
			}
			within := func(name string, got uint64, wantPct float64) {
				pct := 100 * float64(got) / n
				if math.Abs(pct-wantPct) > 0.15*wantPct+1e-9 {
					t.Errorf("seed %d: %s %.2f%%, want %.2f%%", seed, name, pct, wantPct)
				}
			}
			within("reordered", st.Reordered, tc.wantReorderPct)
			within("duplicated", st.Duplicates, tc.wantDupPct)
			var sum, sumSq float64
			for _, r := range got {
				d := r.at.Sub(r.sentAt)
				lo, hi := delay, delay+tc.cfg.Jitter
				if tc.cfg.ReorderPercent > 0 {
					hi += tc.cfg.ReorderDelay
				}
				if d < lo || d > hi {
					t.Fatalf("seed %d: datagram %d took %v, want within [%v, %v]", seed, r.seq, d, lo, hi)
				}
				sum += float64(d)
				sumSq += float64(d) * float64(d)
			}
			mean := sum / float64(len(got))
			sd := time.Duration(math.Sqrt(sumSq/float64(len(got)) - mean*mean))
			if j := tc.cfg.Jitter; j > 0 && (sd < j/10 || sd > j) {
				t.Errorf("seed %d: delay spread %v with jitter %v", seed, sd, j)
			}
		})
	}
}

func TestGilbertElliottIsBursty(t *testing.T) {
	const n = 100_000
	ge := netsim.GilbertElliott{EnterBadPercent: 1, LeaveBadPercent: 25, LossBadPercent: 100}
	wantLoss := 1.0 / 26 // EnterBad / (EnterBad + LeaveBad)
	tests := []struct {
		name    string
		cfg     netsim.LinkConfig
		wantRun float64 // mean length of a run of consecutive losses
	}{
		{"gilbert-elliott", netsim.LinkConfig{Burst: ge}, 4},
		{"independent", netsim.LinkConfig{LossPercent: 100 * wantLoss}, 1 / (1 - wantLoss)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const seed = 3
			got, st := everyMillisecond(t, seed, tc.cfg, n)
			lost := n - len(got)
			if uint64(lost) != st.BurstLosses+st.RandomLosses {
				t.Fatalf("lost %d, link counted %d+%d", lost, st.BurstLosses, st.RandomLosses)
			}
			if got := float64(lost) / n; math.Abs(got-wantLoss) > 0.15*wantLoss {
				t.Errorf("seed %d: loss rate %.4f, want %.4f", seed, got, wantLoss)
			}
			runs, prev := 0, int64(-1)
			for _, r := range got {
				if int64(r.seq) > prev+1 {
					runs++
				}
				prev = int64(r.seq)
			}
			if mean := float64(lost) / float64(runs); math.Abs(mean-tc.wantRun) > 0.1*tc.wantRun {
				t.Errorf("seed %d: mean loss run %.2f packets, want %.2f", seed, mean, tc.wantRun)
			}
		})
	}
}

// scenario runs two CBR flows both ways over a dumbbell with every impairment
// on, and returns a digest of every delivery and the link counters.
func scenario(t *testing.T, seed uint64) (uint64, [2]netsim.LinkStats) {
	t.Helper()
	sim := netsim.New(seed)
	cfg := netsim.LinkConfig{
		RateBps: 20e6, Delay: 30 * time.Millisecond, QueueBytes: 30_000,
		LossPercent: 1, Burst: netsim.GilbertElliott{EnterBadPercent: 0.5, LeaveBadPercent: 30, LossBadPercent: 80},
		Jitter: 3 * time.Millisecond, ReorderPercent: 2, ReorderDelay: 4 * time.Millisecond,
		DuplicatePercent: 1, Outages: []netsim.Outage{{Start: 300 * time.Millisecond, End: 350 * time.Millisecond}},
	}
	fwd, rev := sim.NewLink(cfg), sim.NewLink(cfg)
	var eps []*cbr
	for i := range 2 {
		a := &cbr{size: 1200, interval: 300 * time.Microsecond, sink: sink{keep: true}}
		b := &cbr{size: 200, interval: time.Millisecond, sink: sink{keep: true}}
		eps = append(eps, a, b)
		sim.AddFlow(a, b, fwd, rev, netsim.FlowOptions{ExtraDelay: time.Duration(i) * 7 * time.Millisecond})
	}
	if err := sim.RunFor(time.Second); err != nil {
		t.Fatal(err)
	}
	h := fnv.New64a()
	var buf [24]byte
	for i, e := range eps {
		for _, r := range e.got {
			putU64(buf[:], r.seq)
			putU64(buf[8:], uint64(r.at))
			putU64(buf[16:], uint64(i))
			h.Write(buf[:])
		}
	}
	return h.Sum64(), [2]netsim.LinkStats{fwd.Stats(), rev.Stats()}
}

func putU64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (56 - 8*i))
	}
}

func TestDeterminism(t *testing.T) {
	for _, seed := range []uint64{1, 42} {
		h1, s1 := scenario(t, seed)
		h2, s2 := scenario(t, seed)
		if h1 != h2 || s1 != s2 {
			t.Errorf("seed %d: two runs differ:\n%+v\n%+v", seed, s1, s2)
		}
		for i, st := range s1 {
			if (i == 0 && st.QueueDrops == 0) || st.RandomLosses == 0 || st.BurstLosses == 0 || st.OutageDrops == 0 ||
				st.Reordered == 0 || st.Duplicates == 0 {
				t.Errorf("seed %d: scenario does not exercise every impairment: %+v", seed, st)
			}
		}
	}
	h1, s1 := scenario(t, 1)
	h2, s2 := scenario(t, 2)
	if h1 == h2 || s1[0].RandomLosses == s2[0].RandomLosses && s1[0].BurstLosses == s2[0].BurstLosses {
		t.Errorf("seeds 1 and 2 gave the same deliveries or losses: %+v %+v", s1[0], s2[0])
	}
}

// stuck wants a timeout now, forever.
type stuck struct{ cbr }

func (s *stuck) NextTimeout() monotime.Time { return 1 }

func TestLivelockGuard(t *testing.T) {
	sim := netsim.New(1)
	sim.SetLivelockLimit(10_000)
	sim.AddFlow(&stuck{}, &cbr{}, sim.NewLink(netsim.LinkConfig{}), sim.NewLink(netsim.LinkConfig{}), netsim.FlowOptions{})
	err := sim.RunFor(time.Second)
	if !errors.Is(err, netsim.ErrLivelock) {
		t.Fatalf("RunFor = %v, want ErrLivelock", err)
	}
	if err2 := sim.RunFor(time.Second); !errors.Is(err2, netsim.ErrLivelock) {
		t.Fatalf("second RunFor = %v, want the same livelock error", err2)
	}
	if sim.Elapsed() != 0 {
		t.Errorf("livelock at %v, want 0", sim.Elapsed())
	}
}
