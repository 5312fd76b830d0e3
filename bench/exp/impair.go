package exp

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/wanopt/wanopt/bench/wanem"
	"github.com/wanopt/wanopt/internal/netsim"
)

// LinkImpairments are what the experiments can add to the link beyond its
// delay, rate and queue, both ways alike, each direction with its own
// random numbers. The zero value adds nothing. JSON durations are in ns.
type LinkImpairments struct {
	// LossPct is random loss in percent, each way.
	LossPct float64 `json:"loss_pct,omitempty"`
	// Jitter is the largest random extra delay (it does not reorder).
	Jitter time.Duration `json:"jitter,omitempty"`
	// ReorderPct is the percentage of packets held back ReorderDelay so
	// that later ones overtake them; ReorderDelay 0 means
	// wanem.DefaultReorderDelay (in the simulator too).
	ReorderPct   float64       `json:"reorder_pct,omitempty"`
	ReorderDelay time.Duration `json:"reorder_delay,omitempty"`
	// DupPct is the percentage of packets duplicated.
	DupPct float64 `json:"dup_pct,omitempty"`
	// BurstLossPct and BurstLen set burst loss by its mean in percent and
	// mean burst length in packets (see BurstModel); 0 disables it.
	BurstLossPct float64 `json:"burst_loss_pct,omitempty"`
	BurstLen     float64 `json:"burst_len,omitempty"`
	// OutageFor, if positive, takes the link down for that long during
	// every measured transfer, OutageAt after the transfer starts.
	OutageAt  time.Duration `json:"outage_at,omitempty"`
	OutageFor time.Duration `json:"outage_for,omitempty"`
}

// HasOutage reports whether an outage is set.
func (m LinkImpairments) HasOutage() bool { return m.OutageFor > 0 }

// Validate reports impairments that cannot be emulated, naming the field.
func (m LinkImpairments) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"loss", m.LossPct}, {"reorder", m.ReorderPct}, {"dup", m.DupPct}, {"burst loss", m.BurstLossPct}} {
		if !(p.v >= 0 && p.v <= 100) {
			return fmt.Errorf("%s %v%% is outside 0-100%%", p.name, p.v)
		}
	}
	switch {
	case m.Jitter < 0:
		return fmt.Errorf("jitter %v is negative; use 0 or more", m.Jitter)
	case m.ReorderDelay < 0:
		return fmt.Errorf("reorder delay %v is negative; use 0 (the default %v) or more", m.ReorderDelay, wanem.DefaultReorderDelay)
	case m.OutageAt < 0 || m.OutageFor < 0:
		return fmt.Errorf("outage at %v for %v: neither may be negative", m.OutageAt, m.OutageFor)
	case m.OutageAt > 0 && m.OutageFor == 0:
		return fmt.Errorf("outage at %v has no length: set the outage's duration too", m.OutageAt)
	}
	if m.BurstLossPct > 0 {
		if _, err := BurstModel(m.BurstLossPct, m.BurstLen); err != nil {
			return err
		}
	}
	return nil
}

// BurstModel returns the Gilbert–Elliott chain whose bad state loses every
// packet and good state none, with mean loss m = lossPct/100 and mean burst
// burstLen packets: PBadToGood = 1/burstLen, PGoodToBad = m·PBadToGood/(1−m),
// so the loss is at most burstLen/(burstLen+1).
func BurstModel(lossPct, burstLen float64) (wanem.GilbertElliott, error) {
	if !(burstLen >= 1) || math.IsInf(burstLen, 1) {
		return wanem.GilbertElliott{}, fmt.Errorf("burst length %v packets: want a mean of at least 1 packet", burstLen)
	}
	if !(lossPct >= 0 && lossPct < 100) {
		return wanem.GilbertElliott{}, fmt.Errorf("burst loss %v%%: want at least 0 and below 100%%", lossPct)
	}
	m := lossPct / 100
	r := 1 / burstLen
	p := m * r / (1 - m)
	if p > 1 {
		return wanem.GilbertElliott{}, fmt.Errorf("burst loss %v%% with bursts of %v packets needs more than every good packet to start a burst; "+
			"use at most %.1f%% or longer bursts", lossPct, burstLen, 100*burstLen/(burstLen+1))
	}
	return wanem.GilbertElliott{PGoodToBad: p, PBadToGood: r, LossInGood: 0, LossInBad: 1}, nil
}

// apply adds the impairments (all but the outage, which the lab switches
// at run time) to a wanem direction. m must be valid.
func (m LinkImpairments) apply(c *wanem.Config) {
	c.LossPct, c.Jitter, c.ReorderPct, c.ReorderDelay, c.DupPct = m.LossPct, m.Jitter, m.ReorderPct, m.ReorderDelay, m.DupPct
	if m.BurstLossPct > 0 {
		ge, _ := BurstModel(m.BurstLossPct, m.BurstLen)
		c.BurstLoss = &ge
	}
}

// applySim adds the impairments (all but the outage, see trackOutage) to
// a netsim direction. m must be valid.
func (m LinkImpairments) applySim(c *netsim.LinkConfig) {
	c.LossPercent, c.Jitter, c.ReorderPercent, c.DuplicatePercent = m.LossPct, m.Jitter, m.ReorderPct, m.DupPct
	if m.ReorderPct > 0 {
		// netsim needs a positive delay: the emulator's default.
		c.ReorderDelay = orDefault(m.ReorderDelay, wanem.DefaultReorderDelay)
	}
	if m.BurstLossPct > 0 {
		ge, _ := BurstModel(m.BurstLossPct, m.BurstLen)
		c.Burst = netsim.GilbertElliott{EnterBadPercent: 100 * ge.PGoodToBad, LeaveBadPercent: 100 * ge.PBadToGood,
			LossGoodPercent: 100 * ge.LossInGood, LossBadPercent: 100 * ge.LossInBad}
	}
}

// orDefault returns d, or def if d is zero.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// String describes the impairments in a few words, or "none".
func (m LinkImpairments) String() string {
	var parts []string
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	if m.LossPct > 0 {
		add("loss %g%%", m.LossPct)
	}
	if m.Jitter > 0 {
		add("jitter %v", m.Jitter)
	}
	if m.ReorderPct > 0 {
		add("reorder %g%% by %v", m.ReorderPct, orDefault(m.ReorderDelay, wanem.DefaultReorderDelay))
	}
	if m.DupPct > 0 {
		add("dup %g%%", m.DupPct)
	}
	if m.BurstLossPct > 0 {
		add("burst loss %g%% in bursts of %g packets", m.BurstLossPct, m.BurstLen)
	}
	if m.HasOutage() {
		add("outage of %v at %v into each transfer", m.OutageFor, m.OutageAt)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
