package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/wanopt/wanopt/bench/exp"
	"github.com/wanopt/wanopt/bench/wanem"
)

// impairmentFlags are the link impairments 'cisco' and 'sim' share, so
// that a lab run and its simulated twin take the same flags.
type impairmentFlags struct {
	loss, reorder, dup, burstLoss *string
	jitter, reorderDelay          *time.Duration
	burstLen                      *float64
	outageAt, outageFor           *time.Duration
}

func addImpairmentFlags(fs *pflag.FlagSet) *impairmentFlags {
	return &impairmentFlags{
		loss:         fs.String("loss", "0", "random loss each way, e.g. 1%"),
		jitter:       fs.Duration("jitter", 0, "largest random extra delay each way, without reordering, e.g. 10ms"),
		reorder:      fs.String("reorder", "0", "share of packets held back --reorder-delay so later ones overtake them, e.g. 1%"),
		reorderDelay: fs.Duration("reorder-delay", wanem.DefaultReorderDelay, "how long --reorder holds a packet back"),
		dup:          fs.String("dup", "0", "share of packets duplicated, e.g. 0.1%"),
		burstLoss:    fs.String("burst-loss", "0", "mean Gilbert–Elliott burst loss each way, e.g. 2% (a burst loses every packet)"),
		burstLen:     fs.Float64("burst-len", 3, "mean length of a --burst-loss burst, in packets (at least 1)"),
		outageAt:     fs.Duration("outage-at", 0, "take the link down this long after each measured transfer starts (with --outage-for)"),
		outageFor:    fs.Duration("outage-for", 0, "length of the outage, e.g. 60s; 0: none"),
	}
}

// impairments turns the flags into exp.LinkImpairments and checks them.
func (f *impairmentFlags) impairments() (exp.LinkImpairments, error) {
	m := exp.LinkImpairments{Jitter: *f.jitter, OutageAt: *f.outageAt, OutageFor: *f.outageFor}
	for _, p := range []struct {
		s   *string
		dst *float64
	}{{f.loss, &m.LossPct}, {f.reorder, &m.ReorderPct}, {f.dup, &m.DupPct}, {f.burstLoss, &m.BurstLossPct}} {
		v, err := parsePercent(*p.s)
		if err != nil {
			return m, err
		}
		*p.dst = v
	}
	if m.ReorderPct > 0 {
		m.ReorderDelay = *f.reorderDelay
	}
	if m.BurstLossPct > 0 {
		m.BurstLen = *f.burstLen
	}
	return m, m.Validate()
}
