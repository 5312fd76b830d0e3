package driver

import (
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// Parked reads.
//
// A Read that finds nothing is kept by the driver with its buffer, which
// the driver fills as data arrives, replying once the read is satisfied:
// a plain Read by its first bytes; ReadGather by min bytes, its wait
// having passed since the first byte, the stream falling quiet
// (gatherQuietFor), or at once by bytes that arrive after it waited with
// nothing for longer than its wait (a pause). A reader costs one
// hand-off per delivery instead of three (ask, readable, ask again), and
// a proxy gathering a bulk flow wakes once per gathered buffer.

// parkedRead is a Read waiting in the driver, held in its Stream so that
// parking allocates nothing. The buffer is the reader's, lent until the
// reply.
type parkedRead struct {
	active bool
	gen    uint64 // counts the stream's parked reads: tells an armed wait its read
	buf    []byte
	n      int // bytes already copied into buf
	min    int // reply once n >= min (1 to len(buf))
	wait   time.Duration
	since  monotime.Time // when it parked
	until  monotime.Time // reply at this time once n > 0; 0: not armed
	last   monotime.Time // when bytes last came
	quiet  time.Duration // reply once no bytes came for this long
	late   time.Duration // how long past until the reply may wait for the driver to wake anyway
	lent   bool          // buf[n:] is lent to the Conn (lendParked)
	reply  chan result
}

// due reports whether an armed parked read is answered at now, with
// what it holds: its wait has ended, or its stream fell quiet.
func (p *parkedRead) due(now monotime.Time) bool {
	return !now.Before(p.until) || !now.Before(p.last.Add(p.quiet))
}

// deadline is when the driver must wake for an armed parked read: quiet
// after its last bytes, or late after its wait's end if that is sooner.
// Past its wait's end the read is answered whenever the driver wakes
// (due), which while its flow streams is within one of the reader's
// holds.
func (p *parkedRead) deadline() monotime.Time {
	if q := p.last.Add(p.quiet); q.Before(p.until.Add(p.late)) {
		return q
	}
	return p.until.Add(p.late)
}

// parkRead parks r, a read that could not be satisfied at once, on s.
// n bytes are already in r.buf.
func (d *driverState) parkRead(s *Stream, r request, n int) {
	wait := max(gatherWaitFor(r.wait, d.conn.MinRTT()), gatherWaitShared(r.wait, d.gathering.peak))
	hold := time.Duration(d.t.rxHoldMax.Load())
	now := monotime.Now()
	s.d.park = parkedRead{active: true, gen: s.d.park.gen + 1, buf: r.buf, n: n, min: r.min, wait: wait, quiet: gatherQuietFor(hold), late: max(hold, 0), since: now, last: now, reply: r.reply}
	d.parked[s] = struct{}{}
	d.lendParked(s)
	if n > 0 {
		d.armParked(s)
	}
}

// armParked starts the wait of s's parked read once it holds its first
// bytes.
func (d *driverState) armParked(s *Stream) {
	p := &s.d.park
	if p.until != 0 {
		return
	}
	p.until = p.last.Add(max(p.wait, time.Nanosecond))
	d.gatherq = append(d.gatherq, gatherWait{s: s, gen: p.gen})
}

// gatherRTTShare and gatherGrowth stretch a ReadGather's wait on a long
// path, as rxHoldCap does the reader's hold: to a 16th of the path's
// minimum RTT, at most twice the wait asked for (an 8 ms wait grows
// only beyond 128 ms).
const (
	gatherRTTShare = 16
	gatherGrowth   = 2
)

// gatherQuietMin and gatherQuietHolds: a gathering read is also answered
// once its stream brought nothing for twice the reader's longest hold,
// at least 3 ms (gatherQuietFor). A streaming flow's bytes come with
// every held read of the socket; when they stop the burst has ended, and
// its tail goes out then instead of waiting out the whole wait.
const (
	gatherQuietMin   = 3 * time.Millisecond
	gatherQuietHolds = 2
)

func gatherQuietFor(hold time.Duration) time.Duration {
	return max(gatherQuietMin, gatherQuietHolds*hold)
}

// gatherJoinShare: a gathering read whose wait has at most 1/share of
// it left is answered with one that expired (see expireParked).
const gatherJoinShare = 2

func gatherWaitFor(wait, minRTT time.Duration) time.Duration {
	return growWithRTT(wait, minRTT, gatherRTTShare, gatherGrowth)
}

// gatherShareFlows and gatherShareGrowth stretch a ReadGather's wait
// while many flows gather at once. A flow too slow to fill its buffer is
// answered once per wait, so the writes a second grow with the number of
// flows, not with the bytes. Beyond gatherShareFlows gathering at once
// (the most armed over the last gatherPeakWindow: flows gathering in
// step re-park one by one, so one instant's count says little), the
// wait grows in proportion, to at most gatherShareGrowth times the wait
// asked. Bytes after a pause, and a burst's tail, are not held longer.
const (
	gatherShareFlows  = 4
	gatherShareGrowth = 4
	gatherPeakWindow  = 100 * time.Millisecond
)

// gatherPeak is the most gathering reads armed at once (expireParked)
// over about the last gatherPeakWindow.
type gatherPeak struct {
	peak int
	at   monotime.Time
}

// note records n reads armed at now.
func (g *gatherPeak) note(n int, now monotime.Time) {
	if n >= g.peak || now.Sub(g.at) > gatherPeakWindow {
		g.peak, g.at = n, now
	}
}

func gatherWaitShared(wait time.Duration, gathering int) time.Duration {
	if gathering <= gatherShareFlows || wait <= 0 {
		return wait
	}
	return min(wait*time.Duration(gathering)/gatherShareFlows, gatherShareGrowth*wait)
}

// gatherWait is an armed ReadGather (see expireParked).
type gatherWait struct {
	s   *Stream
	gen uint64 // the parked read it was armed for
}

// continueRead moves more data into s's parked read, if any, and replies
// when it is satisfied or the stream can give no more.
func (d *driverState) continueRead(s *Stream) {
	p := &s.d.park
	if !p.active {
		return
	}
	first := p.n == 0
	taken := d.takeParked(s) // before what is left in the stream
	res := d.read(s, p.buf[p.n:])
	p.n += res.n
	if taken+res.n > 0 {
		p.last = monotime.Now()
	}
	switch {
	case res.err != nil, res.fin, p.n >= p.min:
		d.unpark(s, result{n: p.n, fin: res.fin, err: res.err})
	case first && p.n > 0 && p.last.Sub(p.since) >= p.wait:
		// The stream was idle for longer than the read would gather: these
		// bytes start a new burst (a request, or its answer), so they go at
		// once.
		d.unpark(s, result{n: p.n})
	case p.n > 0:
		d.armParked(s)
		fallthrough
	default:
		d.lendParked(s)
	}
}

// lendParked lends the room left in s's parked read to the Conn, which
// copies data arriving in order straight into it (StreamReadInto) instead
// of into the stream's buffer for continueRead to copy out again: one
// memmove of every byte fewer on a receiving edge.
func (d *driverState) lendParked(s *Stream) {
	p := &s.d.park
	if p.n < len(p.buf) {
		d.conn.StreamReadInto(s.id, p.buf[p.n:]) // took nothing: nothing was lent
		p.lent = true
	}
}

// takeParked ends the lending of s's parked read, adds the bytes the Conn
// put in its buffer to it, and returns their count.
func (d *driverState) takeParked(s *Stream) int {
	p := &s.d.park
	if !p.lent {
		return 0
	}
	p.lent = false
	taken := d.conn.StreamReadInto(s.id, nil)
	p.n += taken
	return taken
}

// unpark replies to s's parked read with res.
func (d *driverState) unpark(s *Stream, res result) {
	p := &s.d.park
	if !p.active {
		return
	}
	res.n += d.takeParked(s) // the buffer goes back to its reader: taken bytes with it
	reply := p.reply
	*p = parkedRead{gen: p.gen} // drop the reader's buffer
	delete(d.parked, s)
	reply <- res // capacity 1: the reader waits for exactly this reply
}

// expireParked replies to the gathering reads whose deadline (their
// wait, or their stream falling quiet) has passed at now, and returns the
// earliest deadline left (0: none waits). Once one has expired it also
// answers those that have waited at least half their wait
// (gatherJoinShare): the driver is awake anyway, and flows that share a
// link then gather in step instead of each waking the driver. It scans
// every armed read, since a read's quiet deadline moves as data arrives.
func (d *driverState) expireParked(now monotime.Time) monotime.Time {
	expired := false
	armed := 0
	for _, g := range d.gatherq {
		p := &g.s.d.park
		if !p.active || p.gen != g.gen { // answered
			continue
		}
		armed++
		if p.due(now) {
			d.unpark(g.s, result{n: p.n})
			expired = true
		}
	}
	d.gathering.note(armed, now)
	var next monotime.Time
	k := 0
	for _, g := range d.gatherq {
		p := &g.s.d.park
		if !p.active || p.gen != g.gen { // answered
			continue
		}
		if expired && !now.Before(p.until.Add(-p.wait/gatherJoinShare)) {
			d.unpark(g.s, result{n: p.n})
			continue
		}
		d.gatherq[k] = g
		k++
		if dl := p.deadline(); next == 0 || dl.Before(next) {
			next = dl
		}
	}
	clear(d.gatherq[k:])
	d.gatherq = d.gatherq[:k]
	return next
}

// cancelParked ends s's parked read with what it holds (the reader's
// deadline passed or it closed the stream).
func (d *driverState) cancelParked(s *Stream) {
	if p := &s.d.park; p.active {
		d.unpark(s, result{n: p.n})
	}
}

// failParked ends every parked read at shutdown: the bytes they hold are
// returned, the tunnel's end comes with the next Read.
func (d *driverState) failParked(err error) {
	for s := range d.parked {
		d.takeParked(s)
		if n := s.d.park.n; n > 0 {
			d.unpark(s, result{n: n})
		} else {
			d.unpark(s, result{err: err})
		}
	}
	d.gatherq, d.gathering = nil, gatherPeak{}
}
