package netsim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/seed"
)

// LinkConfig describes one direction of a link. The zero value is an ideal
// link: infinite rate, no delay, no loss.
//
// A datagram entering the link joins a drop-tail FIFO queue and is
// serialised in wireBytes*8/RateBps. When it "departs", outages and losses
// are decided (a lost packet has used its share of the rate, like a
// corrupted frame), duplicates are made, and it arrives after Delay plus
// jitter plus, when reordered, ReorderDelay.
type LinkConfig struct {
	// RateBps is the serialisation rate in bits per second; 0 means infinite
	// (no queueing at all).
	RateBps int64
	// Delay is the one-way propagation delay.
	Delay time.Duration
	// QueueBytes bounds the bytes waiting behind the packet being
	// serialised (drop-tail); 0 means unbounded.
	QueueBytes int
	// OverheadBytes is added to every datagram's length when serialising and
	// counting wire bytes (e.g. 28 for IPv4+UDP headers).
	OverheadBytes int
	// LossPercent is the percent chance that a departing packet is lost.
	LossPercent float64
	// Burst is a Gilbert–Elliott loss model on top of LossPercent; the
	// zero value disables it.
	Burst GilbertElliott
	// Jitter adds a uniformly random delay in [0, Jitter] to each packet;
	// it never reorders (ReorderPercent does).
	Jitter time.Duration
	// ReorderPercent is the percent chance that a packet is held back an
	// extra ReorderDelay, letting later packets overtake it.
	ReorderPercent float64
	// ReorderDelay is the extra delay of a reordered packet; it must be
	// positive when ReorderPercent is.
	ReorderDelay time.Duration
	// DuplicatePercent is the percent chance that a departing packet is
	// delivered twice (the copy uses no rate).
	DuplicatePercent float64
	// Outages are intervals, from the simulation's start, when the link is
	// down: a packet whose transmission ends inside one is dropped, and the
	// queue keeps draining.
	Outages []Outage
}

// GilbertElliott is a two-state Markov loss model. For each departing packet
// the state first moves (Good to Bad with EnterBadPercent, Bad to Good with
// LeaveBadPercent), then the packet is lost with the new state's loss
// probability. A stay in Bad lasts 100/LeaveBadPercent packets on average.
type GilbertElliott struct {
	EnterBadPercent float64
	LeaveBadPercent float64
	LossGoodPercent float64
	LossBadPercent  float64
}

func (g GilbertElliott) enabled() bool {
	return g.EnterBadPercent > 0 || g.LossGoodPercent > 0
}

// Outage is a half-open interval [Start, End) of simulated time measured
// from the simulation's start.
type Outage struct {
	Start, End time.Duration
}

// ErrBadConfig is wrapped by Validate's error for an invalid LinkConfig.
var ErrBadConfig = errors.New("netsim: invalid link config")

// Validate reports whether c is usable.
func (c LinkConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
	}
	pct := func(name string, v float64) error {
		if v < 0 || v > 100 || v != v {
			return bad("%s = %v, want a percentage in [0, 100]", name, v)
		}
		return nil
	}
	switch {
	case c.RateBps < 0:
		return bad("RateBps = %d, want >= 0", c.RateBps)
	case c.Delay < 0 || c.Jitter < 0 || c.ReorderDelay < 0:
		return bad("negative delay")
	case c.QueueBytes < 0 || c.OverheadBytes < 0:
		return bad("negative QueueBytes or OverheadBytes")
	case c.ReorderPercent > 0 && c.ReorderDelay == 0:
		return bad("ReorderPercent = %v needs a positive ReorderDelay", c.ReorderPercent)
	}
	for _, p := range []struct {
		name string
		v    float64
	}{
		{"LossPercent", c.LossPercent}, {"ReorderPercent", c.ReorderPercent},
		{"DuplicatePercent", c.DuplicatePercent},
		{"Burst.EnterBadPercent", c.Burst.EnterBadPercent},
		{"Burst.LeaveBadPercent", c.Burst.LeaveBadPercent},
		{"Burst.LossGoodPercent", c.Burst.LossGoodPercent},
		{"Burst.LossBadPercent", c.Burst.LossBadPercent},
	} {
		if err := pct(p.name, p.v); err != nil {
			return err
		}
	}
	for _, o := range c.Outages {
		if o.End < o.Start {
			return bad("outage [%v, %v) ends before it starts", o.Start, o.End)
		}
	}
	return nil
}

// LinkStats are a link's counters since it was created. Bytes are wire
// bytes (datagram plus OverheadBytes). Every packet offered is eventually
// counted exactly once as QueueDrops, OutageDrops, BurstLosses, RandomLosses
// or Delivered (Duplicates adds to Delivered), or is still in the link.
type LinkStats struct {
	OfferedPackets, OfferedBytes     uint64 // handed to the link by senders
	QueueDrops, QueueDropBytes       uint64 // dropped because the queue was full
	DepartedPackets, DepartedBytes   uint64 // finished serialisation (includes later losses)
	OutageDrops                      uint64 // departed during an outage
	BurstLosses                      uint64 // lost by the Gilbert–Elliott model
	RandomLosses                     uint64 // lost by LossPercent
	Duplicates                       uint64 // extra copies made
	Reordered                        uint64 // packets held back by ReorderDelay
	DeliveredPackets, DeliveredBytes uint64 // arrived at the far endpoint
	QueueBytes                       int    // bytes queued now (excluding the packet in service)
	MaxQueueBytes                    int    // most bytes ever queued
}

// Link is one direction of a link, created by Sim.NewLink. Its methods must
// be called from the simulator's goroutine.
type Link struct {
	sim *Sim
	id  int32
	cfg LinkConfig

	// FIFO queue of packets waiting for the serialiser (ring buffer).
	q          []*packet
	qHead, qN  int
	queueBytes int
	busy       bool // a packet is being serialised (it is not in q)
	inService  *packet

	lastArrive monotime.Time // latest in-order arrival time, keeps jitter FIFO
	geBad      bool

	lossRng, burstRng, jitterRng, reorderRng, dupRng *rand.Rand

	stats LinkStats
	qd    delayHist
}

// Config returns the link's current configuration. The Outages slice is
// shared with the link; do not modify it.
func (l *Link) Config() LinkConfig { return l.cfg }

// SetConfig replaces the link's configuration for packets that start or end
// serialisation from now on; it panics if cfg is invalid.
func (l *Link) SetConfig(cfg LinkConfig) {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	l.cfg = cfg
}

// Stats returns the link's counters.
func (l *Link) Stats() LinkStats {
	s := l.stats
	s.QueueBytes = l.queueBytes
	return s
}

// QueueDelay summarises the queueing delay of the packets since the link's
// creation or last ResetQueueDelay (which Sim.At can call to start a window).
func (l *Link) QueueDelay() DelayStats { return l.qd.stats() }

// ResetQueueDelay forgets the queueing delays recorded so far.
func (l *Link) ResetQueueDelay() { l.qd.reset() }

// serTime returns the link's serialisation time of b wire bytes, rounded up.
func (l *Link) serTime(b int) time.Duration {
	r := l.cfg.RateBps
	if r == 0 {
		return 0
	}
	return time.Duration((int64(b)*8*int64(time.Second) + r - 1) / r)
}

// enqueue takes ownership of pk, which carries its destination and extra
// delay, and queues it or drops it.
func (l *Link) enqueue(pk *packet) {
	pk.wireBytes = pk.n + l.cfg.OverheadBytes
	pk.enqAt = l.sim.now
	l.stats.OfferedPackets++
	l.stats.OfferedBytes += uint64(pk.wireBytes)
	if !l.busy {
		if l.cfg.RateBps == 0 {
			l.qd.record(0)
			l.depart(pk)
		} else {
			l.startTx(pk)
		}
		return
	}
	if c := l.cfg.QueueBytes; c > 0 && l.queueBytes+pk.wireBytes > c {
		l.stats.QueueDrops++
		l.stats.QueueDropBytes += uint64(pk.wireBytes)
		l.sim.pool.put(pk)
		return
	}
	if l.qN == len(l.q) {
		l.grow()
	}
	l.q[(l.qHead+l.qN)&(len(l.q)-1)] = pk
	l.qN++
	l.queueBytes += pk.wireBytes
	l.stats.MaxQueueBytes = max(l.stats.MaxQueueBytes, l.queueBytes)
}

func (l *Link) grow() {
	n := max(2*len(l.q), 64)
	q := make([]*packet, n)
	for i := range l.qN {
		q[i] = l.q[(l.qHead+i)&(len(l.q)-1)]
	}
	l.q, l.qHead = q, 0
}

func (l *Link) startTx(pk *packet) {
	l.busy = true
	l.inService = pk
	l.qd.record(l.sim.now.Sub(pk.enqAt))
	l.sim.schedule(l.sim.now.Add(l.serTime(pk.wireBytes)), evTxDone, l.id, nil)
}

// txDone ends the current transmission and starts the next one.
func (l *Link) txDone() {
	pk := l.inService
	l.inService, l.busy = nil, false
	if l.qN > 0 {
		next := l.q[l.qHead]
		l.q[l.qHead] = nil
		l.qHead = (l.qHead + 1) & (len(l.q) - 1)
		l.qN--
		l.queueBytes -= next.wireBytes
		l.startTx(next)
	}
	l.depart(pk)
}

// depart decides the fate of a packet whose transmission ended now.
func (l *Link) depart(pk *packet) {
	s := l.sim
	now := s.now
	l.stats.DepartedPackets++
	l.stats.DepartedBytes += uint64(pk.wireBytes)
	if l.inOutage(now) {
		l.stats.OutageDrops++
		s.pool.put(pk)
		return
	}
	if b := &l.cfg.Burst; b.enabled() {
		if l.geBad {
			l.geBad = !seed.Chance(l.burstRng, b.LeaveBadPercent)
		} else {
			l.geBad = seed.Chance(l.burstRng, b.EnterBadPercent)
		}
		p := b.LossGoodPercent
		if l.geBad {
			p = b.LossBadPercent
		}
		if seed.Chance(l.burstRng, p) {
			l.stats.BurstLosses++
			s.pool.put(pk)
			return
		}
	}
	if seed.Chance(l.lossRng, l.cfg.LossPercent) {
		l.stats.RandomLosses++
		s.pool.put(pk)
		return
	}
	at := now.Add(l.cfg.Delay)
	if j := l.cfg.Jitter; j > 0 {
		at = at.Add(time.Duration(l.jitterRng.Int64N(int64(j) + 1)))
	}
	if seed.Chance(l.reorderRng, l.cfg.ReorderPercent) {
		l.stats.Reordered++
		at = at.Add(l.cfg.ReorderDelay)
	} else {
		at = max(at, l.lastArrive)
		l.lastArrive = at
	}
	var dup *packet
	if seed.Chance(l.dupRng, l.cfg.DuplicatePercent) {
		l.stats.Duplicates++
		dup = s.pool.get()
		dup.buf = pk.buf // copies only the array; cheap enough for a rare event
		dup.n, dup.wireBytes, dup.ep, dup.extra = pk.n, pk.wireBytes, pk.ep, pk.extra
	}
	l.arrive(pk, at)
	if dup != nil {
		l.arrive(dup, at)
	}
}

// arrive schedules pk's arrival at its endpoint; the delivery counters are
// updated by the simulator when it arrives.
func (l *Link) arrive(pk *packet, at monotime.Time) {
	pk.link = l.id
	l.sim.schedule(at+pk.extra, evArrive, pk.ep, pk)
}

// delivered counts pk's arrival.
func (l *Link) delivered(pk *packet) {
	l.stats.DeliveredPackets++
	l.stats.DeliveredBytes += uint64(pk.wireBytes)
}

func (l *Link) inOutage(now monotime.Time) bool {
	if len(l.cfg.Outages) == 0 {
		return false
	}
	el := now.Sub(l.sim.start)
	for _, o := range l.cfg.Outages {
		if el >= o.Start && el < o.End {
			return true
		}
	}
	return false
}
