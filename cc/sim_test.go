package cc

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// This file is a tiny deterministic network simulator for controller
// tests: a sender with a loss/ack layer in the style of RFC 9002 (packet
// and time thresholds, a crude PTO), one bottleneck link (rate,
// propagation delay, drop-tail queue, optional seeded random loss) and a
// receiver that acks every packet or every second packet. Links are FIFO
// with no jitter, so in-flight packets and ACKs sit in queues ordered by
// arrival and the event loop needs no heap.

type simConfig struct {
	rateBps    uint64
	rtt        time.Duration // round-trip propagation delay
	queueBytes int           // bottleneck buffer
	lossProb   float64       // random loss at the bottleneck
	seed       uint64
	mss        int
	ackEvery   int           // 1 or 2 packets per ACK
	ackDelay   time.Duration // receiver's max ack delay when ackEvery > 1
	// extraDelay is added to the forward propagation delay from
	// extraDelayAt on (a route change to a longer path).
	extraDelay   time.Duration
	extraDelayAt time.Duration
	// hasData reports whether the application has data at elapsed time
	// since the start; nil means always.
	hasData func(elapsed time.Duration) bool
}

type simPkt struct {
	st    PacketState
	done  bool // acked or declared lost
	acked bool
}

type simArrival struct {
	at monotime.Time
	pn int64
}

type simAck struct {
	at       monotime.Time
	lo, hi   int // range of pns in sim.ackPNs
	ackDelay time.Duration
}

type sim struct {
	t     testing.TB
	cfg   simConfig
	start monotime.Time
	now   monotime.Time
	ctl   Controller
	pacer *Pacer
	rtt   *RTTStats
	rng   *rand.Rand

	// Sender and loss layer.
	sent          []simPkt // index pn - sentBase
	sentBase      int64
	nextPN        int64
	oldestPending int64 // lowest pn not yet acked or lost
	inflight      int
	largestAcked  int64
	lastSendOrAck monotime.Time
	appLimited    bool
	ev            AckEvent

	// Bottleneck and paths.
	linkFreeAt monotime.Time
	fwd        []simArrival
	fwdHead    int

	// Receiver.
	rxPending    []int64
	rxLargestAt  monotime.Time
	ackTimer     monotime.Time
	ackPNs       []int64
	acks         []simAck
	acksHead     int
	rxBytes      int64
	droppedQueue int
	droppedRand  int

	onAck func(s *sim) // called after every OnAck
}

func newSim(t testing.TB, cfg simConfig, ctl Controller) *sim {
	if cfg.mss == 0 {
		cfg.mss = DefaultMSS
	}
	if cfg.ackEvery == 0 {
		cfg.ackEvery = 1
	}
	if cfg.ackDelay == 0 {
		cfg.ackDelay = time.Millisecond
	}
	s := &sim{
		t:            t,
		cfg:          cfg,
		start:        monotime.Time(time.Second),
		ctl:          ctl,
		pacer:        NewPacer(cfg.mss),
		rtt:          NewRTTStats(0),
		rng:          rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15)),
		largestAcked: -1,
	}
	s.now = s.start
	s.rtt.SetMaxAckDelay(cfg.ackDelay)
	s.pacer.SetRate(s.now, ctl.PacingRateBps())
	return s
}

func (s *sim) elapsed() time.Duration { return s.now.Sub(s.start) }

func (s *sim) pkt(pn int64) *simPkt { return &s.sent[pn-s.sentBase] }

func (s *sim) hasData() bool { return s.cfg.hasData == nil || s.cfg.hasData(s.elapsed()) }

// backlogBytes is what sits in the bottleneck queue at now.
func (s *sim) backlogBytes() int {
	if !s.linkFreeAt.After(s.now) {
		return 0
	}
	return int(bytesAtRate(s.cfg.rateBps, s.linkFreeAt.Sub(s.now)))
}

// send transmits one packet into the bottleneck.
func (s *sim) send() {
	pn := s.nextPN
	s.nextPN++
	st := s.ctl.OnPacketSent(s.now, s.cfg.mss, s.inflight)
	s.inflight += s.cfg.mss
	s.pacer.OnSent(s.now, s.cfg.mss)
	s.sent = append(s.sent, simPkt{st: st})
	s.lastSendOrAck = s.now
	if s.cfg.lossProb > 0 && s.rng.Float64() < s.cfg.lossProb {
		s.droppedRand++
		return
	}
	if s.backlogBytes()+s.cfg.mss > s.cfg.queueBytes {
		s.droppedQueue++
		return
	}
	departAt := max(s.now, s.linkFreeAt)
	tx := time.Duration(mulDiv(uint64(s.cfg.mss)*8, uint64(time.Second), s.cfg.rateBps))
	s.linkFreeAt = departAt.Add(tx)
	delay := s.cfg.rtt / 2
	if s.cfg.extraDelay > 0 && s.elapsed() >= s.cfg.extraDelayAt {
		delay += s.cfg.extraDelay
	}
	s.fwd = append(s.fwd, simArrival{at: s.linkFreeAt.Add(delay), pn: pn})
}

// trySend sends while cwnd and pacer allow; it returns when the sender
// next wants to be woken (0: on the next ACK).
func (s *sim) trySend() monotime.Time {
	for {
		if !s.hasData() {
			if !s.appLimited && s.inflight < s.ctl.CongestionWindow() {
				s.appLimited = true
				s.ctl.OnAppLimited(s.now, s.inflight)
			}
			return s.now.Add(time.Millisecond) // poll for new data
		}
		s.appLimited = false
		if s.inflight >= s.ctl.CongestionWindow() {
			return 0
		}
		if s.pacer.Budget(s.now) <= 0 {
			return s.pacer.NextSendTime(s.now)
		}
		s.send()
	}
}

// receive handles a packet arriving at the receiver.
func (s *sim) receive(a simArrival) {
	s.rxBytes += int64(s.cfg.mss)
	s.rxPending = append(s.rxPending, a.pn)
	s.rxLargestAt = s.now
	if len(s.rxPending) >= s.cfg.ackEvery {
		s.sendAck()
	} else if s.ackTimer == 0 {
		s.ackTimer = s.now.Add(s.cfg.ackDelay)
	}
}

func (s *sim) sendAck() {
	lo := len(s.ackPNs)
	s.ackPNs = append(s.ackPNs, s.rxPending...)
	s.rxPending = s.rxPending[:0]
	s.ackTimer = 0
	delay := s.cfg.rtt / 2
	s.acks = append(s.acks, simAck{at: s.now.Add(delay), lo: lo, hi: len(s.ackPNs), ackDelay: s.now.Sub(s.rxLargestAt)})
}

// processAck runs the loss/ack layer for one ACK frame (or, with ack nil,
// a PTO that declares everything outstanding lost).
func (s *sim) processAck(ack *simAck) {
	ev := &s.ev
	ev.Now, ev.Acked, ev.Lost, ev.PriorInFlight, ev.RTT = s.now, ev.Acked[:0], ev.Lost[:0], s.inflight, s.rtt
	if ack != nil {
		largestNew := int64(-1)
		for _, pn := range s.ackPNs[ack.lo:ack.hi] {
			p := s.pkt(pn)
			if p.done {
				continue
			}
			p.done, p.acked = true, true
			s.inflight -= p.st.Bytes
			ev.Acked = append(ev.Acked, p.st)
			largestNew = pn
		}
		if largestNew > s.largestAcked {
			s.largestAcked = largestNew
			s.rtt.UpdateRTT(s.now.Sub(s.pkt(largestNew).st.SentTime), ack.ackDelay)
		}
		// Loss detection: packet threshold 3, time threshold 9/8 RTT.
		lossDelay := max(s.rtt.SmoothedRTT(), s.rtt.LatestRTT()) * 9 / 8
		for pn := s.oldestPending; pn < s.largestAcked; pn++ {
			p := s.pkt(pn)
			if p.done {
				continue
			}
			if pn <= s.largestAcked-3 || !p.st.SentTime.After(s.now.Add(-lossDelay)) {
				p.done = true
				s.inflight -= p.st.Bytes
				ev.Lost = append(ev.Lost, p.st)
				continue
			}
			break
		}
	} else {
		for pn := s.oldestPending; pn < s.nextPN; pn++ {
			if p := s.pkt(pn); !p.done {
				p.done = true
				s.inflight -= p.st.Bytes
				ev.Lost = append(ev.Lost, p.st)
			}
		}
	}
	for s.oldestPending < s.nextPN && s.pkt(s.oldestPending).done {
		s.oldestPending++
	}
	// Forget fully processed packets now and then.
	if n := s.oldestPending - s.sentBase; n > 4096 {
		s.sent = append(s.sent[:0], s.sent[n:]...)
		s.sentBase = s.oldestPending
	}
	ev.BytesInFlight = s.inflight
	s.lastSendOrAck = s.now
	if len(ev.Acked) == 0 && len(ev.Lost) == 0 {
		return
	}
	s.ctl.OnAck(ev)
	s.pacer.SetRate(s.now, s.ctl.PacingRateBps())
	if s.onAck != nil {
		s.onAck(s)
	}
}

// run advances the simulation by d, or until stop returns true (checked
// after every ACK).
// linkShare runs the sim for d and returns the fraction of the link's rate
// the receiver got meanwhile.
func (s *sim) linkShare(d time.Duration) float64 {
	rx0 := s.rxBytes
	s.run(d, nil)
	return float64(s.rxBytes-rx0) * 8 / d.Seconds() / float64(s.cfg.rateBps)
}

func (s *sim) run(d time.Duration, stop func(s *sim) bool) {
	end := s.now.Add(d)
	wake := s.trySend()
	const never = monotime.Time(math.MaxInt64)
	for s.now.Before(end) {
		next := end
		kind := 0
		if s.fwdHead < len(s.fwd) && s.fwd[s.fwdHead].at < next {
			next, kind = s.fwd[s.fwdHead].at, 1
		}
		if s.acksHead < len(s.acks) && s.acks[s.acksHead].at < next {
			next, kind = s.acks[s.acksHead].at, 2
		}
		if s.ackTimer != 0 && s.ackTimer < next {
			next, kind = s.ackTimer, 3
		}
		if wake != 0 && wake < next {
			next, kind = wake, 4
		}
		pto := never
		if s.inflight > 0 {
			pto = s.lastSendOrAck.Add(2 * s.rtt.PTO(true))
		}
		if pto < next {
			next, kind = pto, 5
		}
		s.now = max(s.now, next)
		switch kind {
		case 0:
			return
		case 1:
			a := s.fwd[s.fwdHead]
			s.fwdHead++
			s.receive(a)
		case 2:
			a := s.acks[s.acksHead]
			s.acksHead++
			s.processAck(&a)
			if stop != nil && stop(s) {
				return
			}
		case 3:
			s.sendAck()
		case 5:
			s.processAck(nil)
		}
		s.compact()
		wake = s.trySend()
	}
}

// compact drops consumed queue heads so memory stays bounded.
func (s *sim) compact() {
	if s.fwdHead > 4096 && s.fwdHead*2 > len(s.fwd) {
		s.fwd = append(s.fwd[:0], s.fwd[s.fwdHead:]...)
		s.fwdHead = 0
	}
	if s.acksHead > 4096 && s.acksHead*2 > len(s.acks) {
		base := len(s.ackPNs)
		if s.acksHead < len(s.acks) {
			base = s.acks[s.acksHead].lo
		}
		s.acks = append(s.acks[:0], s.acks[s.acksHead:]...)
		s.acksHead = 0
		for i := range s.acks {
			s.acks[i].lo -= base
			s.acks[i].hi -= base
		}
		s.ackPNs = append(s.ackPNs[:0], s.ackPNs[base:]...)
	}
}

// bdpBytes is the path's bandwidth-delay product.
func (c simConfig) bdpBytes() int { return int(bytesAtRate(c.rateBps, c.rtt)) }
