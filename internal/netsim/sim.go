package netsim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// Endpoint is a sans-IO endpoint driven by the simulator. All calls come from
// the simulator's goroutine, one at a time, with now never decreasing.
type Endpoint interface {
	// HandleDatagram delivers a datagram; b is only valid during the call.
	HandleDatagram(now monotime.Time, b []byte)
	// PollTransmit writes the next datagram to send now into buf (of length
	// MaxDatagramBytes) and returns its length, or 0 if none is due. The
	// simulator calls it after every event until it returns 0.
	PollTransmit(now monotime.Time, buf []byte) int
	// NextTimeout is the next time the endpoint wants HandleTimeout; 0
	// means none, a time before now means now. It is read after every
	// PollTransmit sequence.
	NextTimeout() monotime.Time
	// HandleTimeout is called at (never before) the last NextTimeout.
	HandleTimeout(now monotime.Time)
}

// FlowID names a flow of a Sim, in the order flows were added from 0.
type FlowID int

// FlowOptions are a flow's own path properties.
type FlowOptions struct {
	// ExtraDelay is added to the one-way delay in each direction.
	ExtraDelay time.Duration
}

// FlowStats counts the datagrams delivered to a flow's endpoints and their
// bytes (datagram lengths, without link overhead). Forward is left to right.
type FlowStats struct {
	ForwardPackets, ForwardBytes uint64
	ReversePackets, ReverseBytes uint64
}

var (
	// ErrLivelock is returned (wrapped) by RunFor and RunUntil when more
	// events than the livelock limit happen at one instant; the Sim then
	// stays stopped.
	ErrLivelock = errors.New("netsim: livelock")
	// ErrDeadline is returned by RunUntil when the deadline came before the
	// condition held.
	ErrDeadline = errors.New("netsim: deadline reached before the condition held")
)

// epoch is where every simulation starts: not zero, which means unset.
const epoch = monotime.Time(time.Second)

// DefaultLivelockLimit is the default number of events and datagrams the
// simulator allows at a single instant before it reports ErrLivelock.
const DefaultLivelockLimit = 1 << 20

// endpointSlot is the simulator's view of one endpoint of a flow. Endpoint
// 2f is flow f's left endpoint, 2f+1 its right one.
type endpointSlot struct {
	e     Endpoint
	out   *Link         // the link its datagrams enter
	peer  int32         // the endpoint its datagrams go to
	extra monotime.Time // flow's extra one-way delay, in nanoseconds
}

// Sim is a discrete-event network simulator. Create it with New.
type Sim struct {
	seed       uint64
	now, start monotime.Time
	seq        uint64
	h          eventHeap
	pool       packetPool
	links      []*Link
	eps        []endpointSlot
	flows      []FlowStats
	calls      []func()
	freeCalls  []int32
	err        error

	events        uint64
	instant       monotime.Time
	instantCount  int
	livelockLimit int
}

// New returns an empty simulator whose randomness derives from seed alone.
func New(seed uint64) *Sim {
	return &Sim{
		seed:          seed,
		now:           epoch,
		start:         epoch,
		livelockLimit: DefaultLivelockLimit,
	}
}

// Seed returns the seed the simulator was created with.
func (s *Sim) Seed() uint64 { return s.seed }

// Now returns the current virtual time. It is never zero.
func (s *Sim) Now() monotime.Time { return s.now }

// Elapsed returns the virtual time since the simulation started.
func (s *Sim) Elapsed() time.Duration { return s.now.Sub(s.start) }

// Events returns the number of events processed so far.
func (s *Sim) Events() uint64 { return s.events }

// SetLivelockLimit sets how many events and datagrams may happen at one
// instant before the run stops with ErrLivelock.
func (s *Sim) SetLivelockLimit(n int) { s.livelockLimit = n }

// NewLink adds a one-way link, its random streams derived from the seed and
// the link's creation order. It panics if cfg is invalid.
func (s *Sim) NewLink(cfg LinkConfig) *Link {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	id := int32(len(s.links))
	stream := func(k uint64) *rand.Rand {
		return rand.New(rand.NewPCG(s.seed, uint64(id)<<8|k))
	}
	l := &Link{
		sim: s, id: id, cfg: cfg,
		lossRng: stream(1), burstRng: stream(2), jitterRng: stream(3),
		reorderRng: stream(4), dupRng: stream(5),
	}
	s.links = append(s.links, l)
	return l
}

// AddFlow joins left and right over fwd (left to right) and rev, and polls
// both (left first), which starts the flow. Endpoints must not be shared
// between flows. It panics if a link belongs to another Sim.
func (s *Sim) AddFlow(left, right Endpoint, fwd, rev *Link, opts FlowOptions) FlowID {
	if fwd == nil || rev == nil || fwd.sim != s || rev.sim != s {
		panic("netsim: AddFlow needs two links of this Sim")
	}
	if opts.ExtraDelay < 0 {
		panic("netsim: negative FlowOptions.ExtraDelay")
	}
	f := FlowID(len(s.flows))
	l := int32(2 * f)
	extra := monotime.Time(opts.ExtraDelay)
	s.eps = append(s.eps,
		endpointSlot{e: left, out: fwd, peer: l + 1, extra: extra},
		endpointSlot{e: right, out: rev, peer: l, extra: extra})
	s.h.timerP = append(s.h.timerP, -1, -1)
	s.flows = append(s.flows, FlowStats{})
	s.schedule(s.now, evWake, l, nil)
	s.schedule(s.now, evWake, l+1, nil)
	return f
}

// FlowStats returns the delivery counters of flow f.
func (s *Sim) FlowStats(f FlowID) FlowStats { return s.flows[f] }

// Wake polls both endpoints of flow f at the current time, after the events
// already due. Call it when an endpoint got work from outside.
func (s *Sim) Wake(f FlowID) {
	s.schedule(s.now, evWake, int32(2*f), nil)
	s.schedule(s.now, evWake, int32(2*f+1), nil)
}

// At schedules fn to run at virtual time t (or now, if t is in the past),
// after the events already scheduled for t.
func (s *Sim) At(t monotime.Time, fn func()) {
	var id int32
	if k := len(s.freeCalls); k > 0 {
		id = s.freeCalls[k-1]
		s.freeCalls = s.freeCalls[:k-1]
		s.calls[id] = fn
	} else {
		id = int32(len(s.calls))
		s.calls = append(s.calls, fn)
	}
	s.schedule(max(t, s.now), evCall, id, nil)
}

// RunFor runs every event due up to and including Now()+d, then sets Now() to
// Now()+d. It returns nil or an error wrapping ErrLivelock.
func (s *Sim) RunFor(d time.Duration) error {
	return s.run(nil, s.now.Add(d))
}

// RunUntil runs the simulation until done returns true or the deadline is
// reached. done is called before and after every event, so it must be
// cheap. It returns nil when done held, ErrDeadline when the deadline came
// first (Now() is then the deadline), or an error wrapping ErrLivelock.
func (s *Sim) RunUntil(done func() bool, deadline monotime.Time) error {
	return s.run(done, deadline)
}

func (s *Sim) run(done func() bool, deadline monotime.Time) error {
	if s.err != nil {
		return s.err
	}
	if done != nil && done() {
		return nil
	}
	for len(s.h.ev) > 0 && s.h.ev[0].at <= deadline {
		s.step()
		if s.err != nil {
			return s.err
		}
		if done != nil && done() {
			return nil
		}
	}
	s.now = max(s.now, deadline)
	if done != nil {
		return ErrDeadline
	}
	return nil
}

func (s *Sim) schedule(at monotime.Time, kind eventKind, id int32, pk *packet) {
	s.seq++
	s.h.push(event{at: at, seq: s.seq, kind: kind, id: id, pkt: pk})
}

// tick counts an event or a datagram at the current instant and stops the
// simulation when there are too many.
func (s *Sim) tick() {
	if s.now != s.instant {
		s.instant, s.instantCount = s.now, 0
	}
	s.instantCount++
	if s.instantCount > s.livelockLimit && s.err == nil {
		s.err = fmt.Errorf("%w: more than %d events and datagrams at t=%v (seed %d)",
			ErrLivelock, s.livelockLimit, s.Elapsed(), s.seed)
	}
}

func (s *Sim) step() {
	ev := s.h.pop()
	s.now = ev.at
	s.events++
	s.tick()
	switch ev.kind {
	case evTxDone:
		s.links[ev.id].txDone()
	case evArrive:
		pk := ev.pkt
		s.links[pk.link].delivered(pk)
		fs := &s.flows[ev.id/2]
		if ev.id&1 == 1 {
			fs.ForwardPackets++
			fs.ForwardBytes += uint64(pk.n)
		} else {
			fs.ReversePackets++
			fs.ReverseBytes += uint64(pk.n)
		}
		s.eps[ev.id].e.HandleDatagram(s.now, pk.buf[:pk.n])
		s.pool.put(pk)
		s.service(ev.id)
	case evTimer:
		s.eps[ev.id].e.HandleTimeout(s.now)
		s.service(ev.id)
	case evWake:
		s.service(ev.id)
	case evCall:
		fn := s.calls[ev.id]
		s.calls[ev.id] = nil
		s.freeCalls = append(s.freeCalls, ev.id)
		fn()
	}
}

// service collects endpoint ep's datagrams and re-arms its timer.
func (s *Sim) service(ep int32) {
	slot := &s.eps[ep]
	for s.err == nil {
		pk := s.pool.get()
		n := slot.e.PollTransmit(s.now, pk.buf[:])
		if n <= 0 {
			s.pool.put(pk)
			if n < 0 {
				panic(fmt.Sprintf("netsim: PollTransmit returned %d", n))
			}
			break
		}
		if n > MaxDatagramBytes {
			panic(fmt.Sprintf("netsim: PollTransmit returned %d > MaxDatagramBytes", n))
		}
		pk.n, pk.ep, pk.extra = n, slot.peer, slot.extra
		s.tick()
		slot.out.enqueue(pk)
	}
	s.setTimer(ep, slot.e.NextTimeout())
}

// setTimer moves endpoint ep's timer event to t (0: removes it).
func (s *Sim) setTimer(ep int32, t monotime.Time) {
	pos := s.h.timerP[ep]
	if t.IsZero() {
		if pos >= 0 {
			s.h.remove(int(pos))
		}
		return
	}
	t = max(t, s.now)
	if pos < 0 {
		s.schedule(t, evTimer, ep, nil)
		return
	}
	if e := &s.h.ev[pos]; e.at != t {
		s.seq++
		e.at, e.seq = t, s.seq
		s.h.fix(int(pos))
	}
}
