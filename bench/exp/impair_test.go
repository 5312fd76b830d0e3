package exp

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/wanem"
	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/netsim"
)

// TestBurstModel solves the chain for a mean loss and burst length, then
// runs it in the emulator: the measured loss and burst length must match.
func TestBurstModel(t *testing.T) {
	ge, err := BurstModel(2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(ge.PBadToGood-1.0/3) > 1e-12 || math.Abs(ge.PGoodToBad/(ge.PGoodToBad+ge.PBadToGood)-0.02) > 1e-12 ||
		ge.LossInBad != 1 || ge.LossInGood != 0 {
		t.Fatalf("BurstModel(2%%, 3) = %+v", ge)
	}
	p, err := wanem.NewPipe(wanem.Config{BurstLoss: &ge, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1_000_000
	var lost, bursts uint64
	prevLost := false
	for i := range n {
		before := p.Counters().BurstLost
		p.Enqueue(monotime.Time(1+i), []byte{1})
		isLost := p.Counters().BurstLost > before
		if isLost {
			lost++
			if !prevLost {
				bursts++ // a loss after a delivery starts a burst
			}
		}
		prevLost = isLost
		if b, ok := p.Dequeue(monotime.Time(1 + i)); ok {
			p.Release(b)
		}
	}
	lossPct := 100 * float64(lost) / n
	meanBurst := float64(lost) / float64(bursts)
	if math.Abs(lossPct-2) > 0.1 || math.Abs(meanBurst-3) > 0.1 {
		t.Errorf("measured loss %.3f%% in bursts of %.3f packets; want 2%% and 3", lossPct, meanBurst)
	}

	for _, c := range []struct {
		loss, burst float64
		want        string
	}{
		{2, 0.5, "at least 1 packet"}, {100, 3, "below 100%"}, {-1, 3, "below 100%"},
		{60, 1, "at most 50.0%"}, {1, math.NaN(), "at least 1 packet"},
	} {
		if _, err := BurstModel(c.loss, c.burst); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("BurstModel(%v, %v): err %v, want one saying %q", c.loss, c.burst, err, c.want)
		}
	}
}

func TestLinkImpairmentsValidate(t *testing.T) {
	good := LinkImpairments{LossPct: 1, Jitter: time.Millisecond, ReorderPct: 1, DupPct: 0.1, BurstLossPct: 2, BurstLen: 3, OutageAt: time.Second, OutageFor: 2 * time.Second}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]LinkImpairments{
		"loss over 100":         {LossPct: 101},
		"negative jitter":       {Jitter: -1},
		"outage with no length": {OutageAt: time.Second},
		"negative outage":       {OutageAt: -time.Second, OutageFor: time.Second},
		"burst shorter than 1":  {BurstLossPct: 2, BurstLen: 0},
	} {
		if err := m.Validate(); err == nil {
			t.Errorf("%s: accepted %+v", name, m)
		}
	}
	if s := good.String(); !strings.Contains(s, "burst loss 2% in bursts of 3 packets") || !strings.Contains(s, "outage of 2s at 1s") {
		t.Errorf("String() = %q", s)
	}
	if s := (LinkImpairments{}).String(); s != "none" {
		t.Errorf("String() of none = %q", s)
	}
}

// The lab and the simulator get the same impairments, each in its units.
func TestImpairmentsReachBothLinks(t *testing.T) {
	m := LinkImpairments{LossPct: 1, Jitter: 10 * time.Millisecond, ReorderPct: 1, DupPct: 0.1, BurstLossPct: 2, BurstLen: 4}
	o := RTTSweepOptions{LinkImpairments: m, Seed: 7, QueueDelay: 50 * time.Millisecond}
	o.Published.defaults()
	ab, ba := o.linkConfig(100 * time.Millisecond)
	if ab.Seed != 7 || ba.Seed != 8 {
		t.Errorf("seeds %d and %d, want 7 one way and 8 the other", ab.Seed, ba.Seed)
	}
	ge, _ := BurstModel(2, 4)
	for _, c := range []wanem.Config{ab, ba} {
		if c.Delay != 50*time.Millisecond || c.LossPct != 1 || c.Jitter != 10*time.Millisecond || c.ReorderPct != 1 || c.DupPct != 0.1 ||
			c.BurstLoss == nil || *c.BurstLoss != ge || c.QueueBytes != 0 || c.QueueDelay != 50*time.Millisecond || c.RateBps != 250e6 {
			t.Errorf("link config %+v", c)
		}
		if err := c.Validate(); err != nil {
			t.Error(err)
		}
	}
	var sc netsim.LinkConfig
	m.applySim(&sc)
	if sc.LossPercent != 1 || sc.Jitter != 10*time.Millisecond || sc.ReorderPercent != 1 || sc.ReorderDelay != wanem.DefaultReorderDelay ||
		sc.DuplicatePercent != 0.1 || sc.Burst.LeaveBadPercent != 25 || math.Abs(sc.Burst.EnterBadPercent-100*ge.PGoodToBad) > 1e-12 ||
		sc.Burst.LossBadPercent != 100 || sc.Burst.LossGoodPercent != 0 {
		t.Errorf("simulator link config %+v", sc)
	}
	if err := sc.Validate(); err != nil {
		t.Error(err)
	}
}
