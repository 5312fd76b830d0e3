package wanem

import (
	"math/rand/v2"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/seed"
)

// departure is a packet's size and the time its last bit leaves the
// bottleneck; the drop-tail queue is the departures still in the future.
type departure struct {
	at    monotime.Time
	bytes int64
}

// Pipe is one direction of an emulated link (see Config). It owns no
// goroutine and never reads the clock; every call takes the current time
// (an earlier now than the latest seen is taken as the latest). It is not
// safe for concurrent use (the Link holds a mutex). In steady state Enqueue
// and Dequeue allocate nothing: buffers come from the Pipe's pool and go
// back by Release.
type Pipe struct {
	cfg          Config
	queueLimit   int64 // bytes; 0 when the rate is unlimited
	reorderDelay time.Duration

	// Random generators, one per random step, so enabling one step does
	// not shift the draws of another.
	lossRng, geRng, jitterRng, reorderRng, dupRng, tamperRng *rand.Rand
	geBad                                                    bool

	// The middlebox (Config.ForgeSACK, WindowClamp, TamperUDPPct): extra
	// buffer room a rewrite may need, and the window scales seen on SYNs.
	rewriteGrowth int
	scales        scaleTable

	down bool // SetDown: every arriving packet is dropped
	mtu  int  // Config.MTU, SetMTU; 0: no limit

	lastNow     monotime.Time
	lastDepart  monotime.Time // departure of the last packet admitted
	txRemainder uint64        // carried fraction of a ns, in units of 1/RateBps ns
	queue       ring[departure]
	queuedBytes int64

	seq         uint64
	lastRelease monotime.Time // release of the last in-order packet
	inOrder     ring[entry]   // release times never decrease
	held        entryHeap     // reordered packets

	pool bufPool
	c    Counters
}

// NewPipe returns an empty Pipe for cfg, or an error wrapping
// ErrInvalidConfig that says which field is wrong.
func NewPipe(cfg Config) (*Pipe, error) {
	limit, err := cfg.queueLimitBytes()
	if err != nil {
		return nil, err
	}
	if cfg.BurstLoss != nil {
		ge := *cfg.BurstLoss // keep the caller's struct out of the Pipe
		cfg.BurstLoss = &ge
	}
	growth := 0
	if cfg.ForgeSACK != nil {
		f := *cfg.ForgeSACK
		cfg.ForgeSACK = &f
		growth = maxSACKGrowth
	}
	s := uint64(cfg.Seed)
	newRng := func(stream uint64) *rand.Rand {
		return rand.New(rand.NewPCG(s, stream*0x9e3779b97f4a7c15+1))
	}
	return &Pipe{
		cfg:           cfg,
		queueLimit:    limit,
		reorderDelay:  cfg.reorderDelay(),
		lossRng:       newRng(1),
		geRng:         newRng(2),
		jitterRng:     newRng(3),
		reorderRng:    newRng(4),
		dupRng:        newRng(5),
		tamperRng:     newRng(6),
		rewriteGrowth: growth,
		mtu:           cfg.MTU,
	}, nil
}

// QueueLimitBytes returns the queue limit in bytes; 0 for an unlimited rate.
func (p *Pipe) QueueLimitBytes() int64 { return p.queueLimit }

// Len returns the number of packets waiting for release.
func (p *Pipe) Len() int { return p.inOrder.len() + len(p.held) }

// Counters returns a snapshot of the counters.
func (p *Pipe) Counters() Counters { return p.c }

// SetDown takes the pipe down (every packet Enqueue is given is dropped and
// counted in OutageDrops) or up again; packets inside are released as usual.
func (p *Pipe) SetDown(down bool) { p.down = down }

// Down reports whether the pipe is down (see SetDown).
func (p *Pipe) Down() bool { return p.down }

// SetMTU sets the largest IP packet the pipe carries from now on (see
// Config.MTU; 0: no limit). A value Config.Validate refuses returns an
// error wrapping ErrInvalidConfig and changes nothing.
func (p *Pipe) SetMTU(mtu int) error {
	c := Config{MTU: mtu}
	if err := c.Validate(); err != nil {
		return err
	}
	p.mtu = mtu
	return nil
}

// MTU returns the MTU in force (0: no limit).
func (p *Pipe) MTU() int { return p.mtu }

// isFragment reports whether pkt is an IP fragment: IPv4 with MF set or a
// nonzero offset, or IPv6 whose first extension header is a fragment
// header (one further down the chain is not looked for).
func isFragment(pkt []byte) bool {
	switch pkt[0] >> 4 {
	case 4:
		return len(pkt) >= 20 && (pkt[6]&0x20 != 0 || (pkt[6]&0x1f != 0 || pkt[7] != 0))
	case 6:
		return len(pkt) >= 40 && pkt[6] == 44
	}
	return false
}

// Enqueue offers pkt, which arrived at now, to the pipe. The pipe copies
// pkt; the caller keeps it. A drop shows only in the Counters.
func (p *Pipe) Enqueue(now monotime.Time, pkt []byte) {
	size := len(pkt)
	if size == 0 || size > MaxPacketBytes {
		p.c.Invalid++
		return
	}
	now = max(now, p.lastNow)
	p.lastNow = now

	if isFragment(pkt) {
		p.c.Fragments++
	}
	if p.down {
		p.c.OutageDrops++
		return
	}
	if p.mtu > 0 && size > p.mtu {
		p.c.MTUDrops++
		return
	}
	if seed.Chance(p.lossRng, p.cfg.LossPct) {
		p.c.Lost++
		return
	}
	if ge := p.cfg.BurstLoss; ge != nil {
		if p.geBad {
			p.geBad = p.geRng.Float64() >= ge.PBadToGood
		} else {
			p.geBad = p.geRng.Float64() < ge.PGoodToBad
		}
		loss := ge.LossInGood
		if p.geBad {
			loss = ge.LossInBad
		}
		if loss > 0 && p.geRng.Float64() < loss {
			p.c.BurstLost++
			return
		}
	}

	// The pipe's own copy, with room for what a rewrite adds; the pool is
	// never asked for more than MaxPacketBytes.
	extra := p.rewriteGrowth
	if size+extra > MaxPacketBytes {
		extra = 0
	}
	buf := p.pool.get(size + extra)[:size]
	copy(buf, pkt)
	buf, rewrote := p.rewrite(buf)
	size = len(buf)

	depart := now
	if p.cfg.RateBps > 0 {
		var ok bool
		if depart, ok = p.bottleneck(now, int64(size)); !ok {
			p.c.QueueDrops++
			p.c.QueueDropBytes += uint64(size)
			p.pool.put(buf)
			return
		}
	}
	if rewrote&rewroteSACK != 0 {
		p.c.SACKForged++
	}
	if rewrote&rewroteWindow != 0 {
		p.c.WindowsClamped++
	}
	if rewrote&rewroteUDP != 0 {
		p.c.UDPTampered++
	}

	release := depart.Add(p.cfg.Delay)
	if j := p.cfg.Jitter; j > 0 {
		release = release.Add(time.Duration(p.jitterRng.Int64N(int64(j) + 1)))
	}
	release = max(release, p.lastRelease)
	reorder := seed.Chance(p.reorderRng, p.cfg.ReorderPct)
	dup := seed.Chance(p.dupRng, p.cfg.DupPct)
	if reorder {
		p.c.Reordered++
		release = release.Add(p.reorderDelay)
	} else {
		p.lastRelease = release
	}
	p.add(reorder, release, buf)
	if dup {
		p.c.Duplicated++
		c := p.pool.get(size)
		copy(c, buf)
		p.add(reorder, release, c)
	}
}

// What rewrite did to a packet, one bit per rewrite.
const (
	rewroteSACK = 1 << iota
	rewroteWindow
	rewroteUDP
)

// rewrite applies the middlebox's rewrites to buf, which has capacity for
// rewriteGrowth more bytes, and returns it with what it did; the caller
// counts them once the queue has taken the packet.
func (p *Pipe) rewrite(buf []byte) ([]byte, int) {
	did := 0
	if f := p.cfg.ForgeSACK; f != nil {
		var ok bool
		if buf, ok = forgeSACK(buf, *f); ok {
			did |= rewroteSACK
		}
	}
	if p.cfg.WindowClamp > 0 && clampWindow(buf, uint32(p.cfg.WindowClamp), &p.scales) {
		did |= rewroteWindow
	}
	if p.cfg.TamperUDPPct > 0 && isUDP(buf) && seed.Chance(p.tamperRng, p.cfg.TamperUDPPct) && tamperUDP(buf) {
		did |= rewroteUDP
	}
	return buf, did
}

// add stores buf, which the pipe now owns, for release at release.
func (p *Pipe) add(reordered bool, release monotime.Time, buf []byte) {
	e := entry{release: release, seq: p.seq, buf: buf}
	p.seq++
	if reordered {
		p.held.push(e)
	} else {
		p.inOrder.push(e)
	}
}

// bottleneck admits a packet of size bytes arriving at now to the drop-tail
// queue and returns its departure time, or ok false if the queue is full.
func (p *Pipe) bottleneck(now monotime.Time, size int64) (depart monotime.Time, ok bool) {
	for p.queue.len() > 0 && p.queue.front().at <= now {
		p.queuedBytes -= p.queue.pop().bytes
	}
	if p.queuedBytes+size > p.queueLimit {
		return 0, false
	}
	start := p.lastDepart
	if now >= start {
		// The link was idle: a new busy period starts now.
		start = now
		p.txRemainder = 0
	}
	// Transmit time in ns is size*8e9/RateBps; keep the remainder so the
	// sum over a busy period is exact. size*8e9 < 2^49 and the remainder
	// is below RateBps ≤ 2^60, so this cannot overflow.
	num := uint64(size)*8e9 + p.txRemainder
	tx := num / p.cfg.RateBps
	p.txRemainder = num % p.cfg.RateBps
	depart = start.Add(time.Duration(tx))
	p.lastDepart = depart
	p.queue.push(departure{at: depart, bytes: size})
	p.queuedBytes += size
	p.c.QueueHighWaterBytes = max(p.c.QueueHighWaterBytes, p.queuedBytes)
	return depart, true
}

// first returns the entry released next, or nil if the pipe is empty.
func (p *Pipe) first() *entry {
	var e *entry
	if p.inOrder.len() > 0 {
		e = p.inOrder.front()
	}
	if len(p.held) > 0 && (e == nil || p.held[0].before(e)) {
		e = &p.held[0]
	}
	return e
}

// Next returns the earliest release time of the packets in the pipe, or
// ok false if it is empty. A later Enqueue can only make it earlier when
// the earliest packet is a reordered one (see Preemptible).
func (p *Pipe) Next() (release monotime.Time, ok bool) {
	if e := p.first(); e != nil {
		return e.release, true
	}
	return 0, false
}

// Preemptible reports whether a packet enqueued now could be due before
// Next: true only while every waiting packet is a reordered one. A driver
// sleeping until Next must wake to recheck at least that often.
func (p *Pipe) Preemptible() bool { return p.inOrder.len() == 0 && len(p.held) > 0 }

// Dequeue removes and returns the next packet if its release time is at or
// before now, recording the lateness. Packets come out in release order,
// ties in arrival order. The caller owns pkt until it hands it back with
// Release (optional: an unreleased buffer costs an allocation later).
func (p *Pipe) Dequeue(now monotime.Time) (pkt []byte, ok bool) {
	return p.DequeueEarly(now, 0)
}

// DequeueEarly is Dequeue releasing a packet up to early before its release
// time (see EarlyRelease), recorded in Counters.EarlyMax; order is kept.
func (p *Pipe) DequeueEarly(now monotime.Time, early time.Duration) (pkt []byte, ok bool) {
	e := p.first()
	if e == nil || e.release > now.Add(early) {
		return nil, false
	}
	var got entry
	if p.inOrder.len() > 0 && e == p.inOrder.front() {
		got = p.inOrder.pop()
	} else {
		got = p.held.pop()
	}
	p.c.Packets++
	p.c.Bytes += uint64(len(got.buf))
	late := now.Sub(got.release)
	p.c.Lateness.record(late)
	if -late > p.c.EarlyMax {
		p.c.EarlyMax = -late
	}
	return got.buf, true
}

// Release hands a buffer returned by Dequeue back to the pipe for reuse.
// The caller must not touch buf afterwards. Any other buffer is harmless.
func (p *Pipe) Release(buf []byte) { p.pool.put(buf) }
