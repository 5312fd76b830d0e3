package driver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// maxDrain bounds how many extra inputs (receive batches, requests) the
// loop takes without blocking before it transmits, so that one flush
// covers several inputs but a flood cannot delay sending for long.
const maxDrain = 16

// maxImmediateTimeouts bounds HandleTimeout calls in a row for deadlines
// already due, so a Conn that keeps asking for "now" cannot livelock the
// loop; the timer then fires at once.
const maxImmediateTimeouts = 4

// sleepThreshold: timer deadlines nearer than this go to the sleeper
// (see arm); minSleep is the shortest sleep it is given, half the
// pacer's 1 ms burst, so a wakeup up to 0.5 ms late loses no credit.
const (
	sleepThreshold = 2 * time.Millisecond
	minSleep       = 500 * time.Microsecond
)

// rxStallLimit is how long the reader waits for a free batch before it
// drops what it reads: 5 ms is 625 KB at 1 Gbit/s, well within the
// default 4 MiB socket buffer.
const rxStallLimit = 5 * time.Millisecond

// rxHoldDatagrams is how many datagrams a held read aims to gather
// (Config.RxHold); minRxHold the shortest hold worth a sleep (a
// nanosleep costs about as much as the wake-up it saves).
const (
	rxHoldDatagrams = 8
	minRxHold       = 100 * time.Microsecond
	rxHoldMinBytes  = 1000
)

// bulk reports whether the datagrams of a read average at least
// rxHoldMinBytes: data of a bulk transfer, not ACKs.
func bulk(sizes []int) bool {
	total := 0
	for _, n := range sizes {
		total += n
	}
	return total >= rxHoldMinBytes*len(sizes)
}

// rxBatch is one ReadBatch worth of datagrams, pooled between the reader
// and the driver (Tunnel.rxFree and Tunnel.rxq).
type rxBatch struct {
	bufs  [][]byte
	sizes []int
	eps   []netip.AddrPort
	n     int
}

func newRxBatch(batch, bufLen int) *rxBatch {
	b := &rxBatch{
		bufs:  make([][]byte, batch),
		sizes: make([]int, batch),
		eps:   make([]netip.AddrPort, batch),
	}
	mem := make([]byte, batch*bufLen)
	for i := range b.bufs {
		b.bufs[i] = mem[i*bufLen : (i+1)*bufLen : (i+1)*bufLen]
	}
	return b
}

// opKind says what a request asks the driver.
type opKind uint8

const (
	opRead opKind = iota + 1
	opWrite
	opCloseWrite
	opClose // Stream.Close: FIN (or reset if unread data) and stop reading
	opAbort // reset both halves (an abandoned OpenStream)
	opOpen
	opAccept
	opReject
	opStats
	opCancelRead // end the stream's parked read with what it holds
)

// request is an application goroutine's call into the driver. buf is
// lent for the call only: the caller waits for the reply and the driver
// keeps no reference.
type request struct {
	op       opKind
	s        *Stream
	buf      []byte
	src, dst netip.AddrPort
	code     uint64
	stats    *Stats
	reply    chan result
	// min and wait: a read is satisfied by min bytes (1 to len(buf)), or
	// by wait having passed since its first byte (see parked.go).
	min  int
	wait time.Duration
}

// result is the driver's answer to a request.
type result struct {
	n   int
	fin bool
	err error
	s   *Stream
}

// driverState is the part of a Tunnel only the driver goroutine touches.
type driverState struct {
	t     *Tunnel
	conn  *tunnel.Conn
	peer  netip.AddrPort
	timer *time.Timer
	armed monotime.Time // deadline the timer is set for; 0: stopped

	// The sleeper (nil channels when not used): sleepReq carries the
	// next wake time (capacity 1), sleepWake the wakeup (capacity 1).
	sleepReq  chan monotime.Time
	sleepWake chan struct{}
	sleeping  monotime.Time // wake time handed to the sleeper; 0: none
	streams   map[uint64]*Stream

	// parked holds the streams with a parked read (for shutdown);
	// gatherq[gatherHead:] the armed waits of ReadGather (parked.go).
	parked     map[*Stream]struct{}
	gatherq    []gatherWait
	gatherHead int

	txBufs [][]byte // BatchSize buffers of MaxUDPPayloadBytes
	txOut  [][]byte // the filled prefixes handed to WriteBatch

	// next is a new handshake beside conn, which goes on meanwhile; nil
	// when none runs. A client starts one when the server rejected our
	// session (it restarted?); a server when an established session's
	// client sends a new initiation (it restarted: see
	// tunnel.Conn.NewSuccessor), answered at nextPeer. nextTried is when
	// the last one started.
	next      *tunnel.Conn
	nextPeer  netip.AddrPort
	nextTried monotime.Time
	// initTokens and initRefill rate-limit the initiations a server
	// examines while established (each costs two X25519).
	initTokens float64
	initRefill monotime.Time
	// lastReject is when the server last sent a REJECT (rate limit).
	lastReject monotime.Time
	rejectBuf  []byte

	estDone   bool
	closeErr  error // the Conn's EventClosed reason
	sockErr   error // closing the socket failed
	txErrLog  bool  // a send error was logged (once per kind of error)
	lastTxErr string

	ctr counters
}

// counters are the driver's own Stats fields.
type counters struct {
	datagramsIn, datagramsOut uint64
	rxBatches, txBatches      uint64
	timerWakeups, loops       uint64
	sleepWakeups              uint64
	txErrors, acceptOverflow  uint64
	rejectsSent, rehandshakes uint64
	clientRestarts            uint64
}

// rejectInterval is the least time between two REJECTs a server sends;
// rehandshakeInterval the least between two new handshakes a client
// starts on REJECTs.
const (
	rejectInterval      = 50 * time.Millisecond
	rehandshakeInterval = time.Second
)

// An established server examines at most initRate new initiations per
// second (burst initBurst): a restarted client retransmits its initiation
// every second, and a flood of replayed ones must not take the driver
// goroutine from the session's data.
const (
	initRate  = 20
	initBurst = 20
)

func (d *driverState) init(t *Tunnel, conn *tunnel.Conn, cfg Config) {
	d.t = t
	d.conn = conn
	d.peer = cfg.RemoteAddr
	d.timer = time.NewTimer(time.Hour)
	d.timer.Stop()
	d.streams = make(map[uint64]*Stream)
	d.parked = make(map[*Stream]struct{})
	if havePreciseSleep && !cfg.TimerOnly {
		d.sleepReq = make(chan monotime.Time, 1)
		d.sleepWake = make(chan struct{}, 1)
	}
	batch := t.bc.BatchSize()
	d.txBufs = make([][]byte, batch)
	d.txOut = make([][]byte, batch)
	n := cfg.Tunnel.MaxUDPPayloadBytes
	mem := make([]byte, batch*n)
	for i := range d.txBufs {
		d.txBufs[i] = mem[i*n : (i+1)*n : (i+1)*n]
	}
}

// readLoop is the reader goroutine: it fills pooled batches from the
// socket and hands them to the driver. When every batch is in use it
// waits up to rxStallLimit for one (a kernel socket buffer holds the
// backlog meanwhile), then reads into a spare batch and drops it, as a
// full socket buffer would. So it never waits on the driver for long, and
// two drivers blocked in WriteBatch on each other's full in-memory queues
// (bindtest) cannot deadlock. It stops when the socket is closed (the
// driver closes it on exit) or the tunnel's context ends.
func (t *Tunnel) readLoop() {
	defer close(t.readerDone)
	spare := newRxBatch(t.bc.BatchSize(), t.cfg.Tunnel.MaxUDPPayloadBytes)
	stall := time.NewTimer(time.Hour)
	stall.Stop()
	defer stall.Stop()
	var lastErr string
	var hold rxHolder
	if havePreciseSleep {
		hold.max = t.cfg.RxHold // negative: never
	}
	for {
		var b *rxBatch
		select {
		case b = <-t.rxFree:
		default:
			// The driver is behind: wait a little (the socket buffer
			// absorbs it), then read and drop rather than stall a
			// blocking bind's writer for good.
			stall.Reset(rxStallLimit)
			select {
			case b = <-t.rxFree:
				stall.Stop()
			case <-stall.C:
				b = spare
			case <-t.ctx.Done():
				return
			}
		}
		n, err := t.bc.ReadBatch(b.bufs, b.sizes, b.eps)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || t.ctx.Err() != nil {
				return
			}
			if s := err.Error(); s != lastErr { // e.g. ECONNREFUSED after an ICMP error
				lastErr = s
				t.log.Warn("driver: receive failed; continuing", "err", err)
			}
			if b != spare {
				t.rxFree <- b
			}
			stall.Reset(time.Millisecond) // do not spin on a failing socket
			select {
			case <-stall.C:
			case <-t.ctx.Done():
				return
			}
			continue
		}
		if b == spare {
			t.rxDropped.Add(uint64(n))
			continue
		}
		b.n = n
		t.rxq <- b // never blocks: rxq holds every batch
		if hold.max > 0 {
			now := monotime.Now()
			if d := hold.after(now, b.sizes[:n]); d > 0 {
				sleepUntil(now.Add(d))
				t.rxHolds.Add(1)
			}
		}
	}
}

// rxHolder decides how long the reader holds its next read
// (Config.RxHold). While full-size datagrams (a bulk transfer's data)
// keep coming a few at a time, it lets some gather in the socket buffer
// rather than wake the reader and the driver for each: the hold is what
// rxHoldDatagrams take at the recent spacing, at most max. At high rates
// reads fill up without it; small datagrams (the ACKs a sender lives on)
// and a datagram after a pause are never held.
type rxHolder struct {
	max      time.Duration
	lastRead monotime.Time // when the previous read returned
	spacing  time.Duration // smoothed time per datagram while they keep coming
}

// after returns the hold before the next read, for a read that returned
// datagrams of sizes at now.
func (h *rxHolder) after(now monotime.Time, sizes []int) time.Duration {
	gap := now.Sub(h.lastRead) // the previous hold included
	first := h.lastRead == 0
	h.lastRead = now
	n := len(sizes)
	if first || n == 0 || gap >= 2*h.max || n >= rxHoldDatagrams || !bulk(sizes) {
		return 0
	}
	h.spacing = (3*h.spacing + gap/time.Duration(n)) / 4
	if d := min(h.max, rxHoldDatagrams*h.spacing); d >= minRxHold {
		return d
	}
	return 0
}

// run is the driver goroutine: the only one that touches the Conn.
func (t *Tunnel) run() {
	d := &t.d
	defer d.shutdown()
	d.service()
	for {
		d.ctr.loops++
		select {
		case b := <-t.rxq:
			d.handleRx(b)
		case r := <-t.reqs:
			d.handleReq(r)
		case <-d.timer.C:
			d.armed = 0
			d.ctr.timerWakeups++
			d.handleTimeout(monotime.Now())
		case <-d.sleepWake:
			d.sleeping = 0
			d.ctr.sleepWakeups++
			d.handleTimeout(monotime.Now())
		case <-t.ctx.Done():
			d.conn.Close(monotime.Now(), wire.CloseNoError, "closed by the application")
			d.service()
			return
		}
	drain:
		for range maxDrain {
			select {
			case b := <-t.rxq:
				d.handleRx(b)
			case r := <-t.reqs:
				d.handleReq(r)
			default:
				break drain
			}
		}
		if !d.service() {
			return
		}
	}
}

// shutdown stops the reader, wakes every waiter and records the final
// state. It runs on the driver goroutine as it returns.
func (d *driverState) shutdown() {
	t := d.t
	d.timer.Stop()
	t.cancel()
	if err := t.bc.Close(); err != nil {
		d.sockErr = fmt.Errorf("driver: closing the UDP socket: %w", err)
	}
	<-t.readerDone
	<-t.sleeperDone
	reason := d.closeErr
	if reason == nil {
		reason = d.conn.Err()
	}
	if reason == nil {
		reason = tunnel.ErrLocalClose
	}
	t.err = fmt.Errorf("%w: %w", ErrTunnelClosed, reason)
	d.failParked(t.err)
	d.fillStats(&t.finalStats)
	for _, s := range d.streams {
		s.stopTimers()
	}
	d.streams = nil
	t.log.Info("driver: tunnel stopped", "reason", reason,
		"datagrams_in", d.ctr.datagramsIn, "datagrams_out", d.ctr.datagramsOut,
		"rx_batches", d.ctr.rxBatches, "tx_batches", d.ctr.txBatches, "rx_holds", t.rxHolds.Load(),
		"loops", d.ctr.loops, "sleep_wakeups", d.ctr.sleepWakeups, "timer_wakeups", d.ctr.timerWakeups)
	close(t.done)
}

// service polls events, transmits, and re-arms the timer. It returns
// false when the Conn is finished and the driver should stop.
func (d *driverState) service() bool {
	for range maxImmediateTimeouts {
		d.pollEvents()
		now := d.flush()
		d.pollEvents()
		next := d.conn.NextTimeout()
		if d.next != nil {
			if n := d.next.NextTimeout(); n != 0 && (next == 0 || n.Before(next)) {
				next = n
			}
		}
		if next == 0 && d.conn.Closed() {
			return d.restartServer(now)
		}
		if g := d.expireParked(now); g != 0 && (next == 0 || g.Before(next)) {
			next = g
		}
		if next == 0 {
			if d.armed != 0 {
				d.timer.Stop()
				d.armed = 0
			}
			return true
		}
		if next.After(now) {
			d.arm(now, next)
			return true
		}
		d.handleTimeout(now) // already due
	}
	d.timer.Reset(0)
	d.armed = 0
	return true
}

// arm schedules the next HandleTimeout for next (after now). Deadlines
// further than sleepThreshold go to the Go timer. Nearer ones (pacing
// waits: at 250 Mbit/s one packet every 48 µs) go to the sleeper
// goroutine, which wakes the loop within about 60 µs, no sooner than
// minSleep from now so that each wakeup sends a batch of packets rather
// than one. A Go timer would fire after 1-2 ms, and the pacer's credit is
// capped at 1 ms, so every late wakeup would lose sending time (measured:
// 84-89 % of a fixed 250 Mbit/s with the timer alone).
func (d *driverState) arm(now, next monotime.Time) {
	if d.sleepReq != nil && next.Sub(now) < sleepThreshold {
		if d.armed != 0 {
			d.timer.Stop()
			d.armed = 0
		}
		if d.sleeping == 0 || next.Before(d.sleeping) {
			wake := max(next, now.Add(minSleep))
			select {
			case <-d.sleepReq: // replace a request not yet taken
			default:
			}
			d.sleepReq <- wake // capacity 1, emptied above: never blocks
			d.sleeping = wake
		}
		return
	}
	if next != d.armed {
		d.timer.Reset(next.Sub(now))
		d.armed = next
	}
}

// sleepLoop is the sleeper goroutine (Linux): it takes a wake time from
// sleepReq, sleeps the thread until then and signals sleepWake. Sleeps
// are shorter than sleepThreshold, so it notices ctx's end within 2 ms.
func (t *Tunnel) sleepLoop() {
	defer close(t.sleeperDone)
	for {
		select {
		case until := <-t.d.sleepReq:
			sleepUntil(until)
			select {
			case t.d.sleepWake <- struct{}{}:
			default:
			}
		case <-t.ctx.Done():
			return
		}
	}
}

// restartServer replaces a server Conn that closed before any client
// completed the handshake (ErrHandshakeTimeout), so Listen keeps waiting
// until its context ends. It returns false when the driver should stop.
func (d *driverState) restartServer(now monotime.Time) bool {
	if d.t.client || d.estDone || d.t.ctx.Err() != nil {
		return false
	}
	conn, err := tunnel.NewServerConn(d.t.cfg.Tunnel, now)
	if err != nil {
		d.closeErr = err
		return false
	}
	d.conn = conn
	d.closeErr = nil
	d.peer = netip.AddrPort{}
	d.t.log.Debug("driver: no client yet; server state renewed")
	return d.service()
}

// handleTimeout passes a timer expiry to the Conn (and to the new
// handshake's, if one runs).
func (d *driverState) handleTimeout(now monotime.Time) {
	d.conn.HandleTimeout(now)
	if d.next != nil {
		d.next.HandleTimeout(now)
	}
}

// handleRx feeds a batch of datagrams to the Conn and recycles it.
func (d *driverState) handleRx(b *rxBatch) {
	now := monotime.Now()
	d.ctr.rxBatches++
	d.ctr.datagramsIn += uint64(b.n)
	for i := range b.n {
		p := b.bufs[i][:b.sizes[i]]
		if d.next != nil && (d.next.IsHandshakeResponse(p) || d.next.OwnsDatagram(p)) {
			d.next.HandleDatagram(now, p) // the new handshake's answer, or its first data
			if !d.t.client && d.next != nil && d.next.OwnsDatagram(p) {
				d.nextPeer = b.eps[i]
			}
			continue
		}
		if !d.t.client && d.estDone && tunnel.IsHandshakeInitiation(p) {
			d.offerSuccessor(now, p, b.eps[i])
			continue
		}
		if b.eps[i] == d.peer {
			d.conn.HandleDatagram(now, p)
			if !d.t.client && !d.estDone {
				d.maybeReject(now, p, b.eps[i])
			}
			continue
		}
		// From another address: adopt it only if the datagram
		// authenticated (the peer roamed, or this is the server learning
		// its client). A replay or forgery counts nothing and moves
		// nothing.
		before := d.conn.Stats().PacketsReceived
		d.conn.HandleDatagram(now, p)
		if d.conn.Stats().PacketsReceived > before {
			if d.peer.IsValid() {
				d.t.log.Info("driver: peer address changed", "from", d.peer, "to", b.eps[i])
			}
			d.peer = b.eps[i]
		} else if !d.t.client {
			d.maybeReject(now, p, b.eps[i])
		}
	}
	b.n = 0
	d.t.rxFree <- b // never blocks: rxFree holds every batch
}

// maybeReject (server) answers p, a datagram from ep, with a REJECT when
// it was data for a session the Conn does not hold: a client of the
// server's former life (before a restart) learns it must handshake again
// now rather than after its idle timeout. At most one REJECT per
// rejectInterval, each no larger than what it answers.
func (d *driverState) maybeReject(now monotime.Time, p []byte, ep netip.AddrPort) {
	if d.lastReject != 0 && now.Sub(d.lastReject) < rejectInterval {
		return
	}
	d.rejectBuf = d.conn.AppendReject(d.rejectBuf[:0], p)
	if len(d.rejectBuf) == 0 {
		return
	}
	d.lastReject = now
	if err := d.t.bc.WriteBatch([][]byte{d.rejectBuf}, ep); err != nil {
		d.ctr.txErrors++
		return
	}
	d.ctr.rejectsSent++
	d.ctr.datagramsOut++
	d.t.log.Debug("driver: data for an unknown session; REJECT sent", "to", ep)
}

// offerSuccessor (server) gives p, a handshake initiation from ep that
// arrived while the session is established, to a successor Conn: if it is
// newer than every initiation accepted so far (the client restarted), the
// successor answers and replaces the session once the client confirms the
// keys (pollNext, switchConn). Replays and forgeries cost the rate-limited
// check and leave nothing behind.
func (d *driverState) offerSuccessor(now monotime.Time, p []byte, ep netip.AddrPort) {
	if d.initRefill == 0 {
		d.initTokens, d.initRefill = initBurst, now
	}
	d.initTokens = min(initBurst, d.initTokens+now.Sub(d.initRefill).Seconds()*initRate)
	d.initRefill = now
	if d.initTokens < 1 {
		return
	}
	d.initTokens--
	if d.next != nil {
		// A retransmitted initiation (our response was lost): the
		// successor answers it again while unconfirmed.
		d.next.HandleDatagram(now, p)
		d.nextPeer = ep
		return
	}
	next, err := d.conn.NewSuccessor(now)
	if err != nil {
		d.t.log.Warn("driver: cannot examine a new initiation", "err", err)
		return
	}
	before := next.Stats().PacketsReceived
	next.HandleDatagram(now, p)
	if next.Stats().PacketsReceived == before {
		return // replayed, forged or not allowed: no answer
	}
	d.next, d.nextPeer, d.nextTried = next, ep, now
	d.t.log.Info("driver: new handshake from the peer while established (it restarted?); answering, the current session goes on until it confirms", "from", ep)
}

// startRehandshake (client) begins a new handshake with the server after
// it rejected our session, keeping the current one: REJECT is not
// authenticated, so only a completed handshake replaces the session
// (switchConn). One runs at a time, at most one per rehandshakeInterval.
func (d *driverState) startRehandshake(now monotime.Time) {
	if !d.t.client || d.next != nil || d.t.ctx.Err() != nil ||
		(d.nextTried != 0 && now.Sub(d.nextTried) < rehandshakeInterval) {
		return
	}
	// The same timestamp as the first handshake, on purpose: a server
	// that restarted has forgotten it and answers, while a live server
	// (the REJECT was forged) takes it for a replay and keeps the session.
	conn, err := tunnel.NewClientConn(d.t.cfg.Tunnel, now)
	if err != nil {
		d.t.log.Warn("driver: the server rejected our session; cannot start a new handshake", "err", err)
		return
	}
	d.next, d.nextTried = conn, now
	d.ctr.rehandshakes++
	d.t.log.Info("driver: the server rejected our session (restarted?); new handshake started, the current session goes on meanwhile")
}

// pollNext handles the new handshake's events: established, it replaces
// the session; failed, it is dropped.
func (d *driverState) pollNext() {
	for d.next != nil {
		ev, ok := d.next.PollEvent()
		if !ok {
			return
		}
		switch ev.Kind {
		case tunnel.EventEstablished:
			d.switchConn()
		case tunnel.EventClosed:
			d.t.log.Info("driver: new handshake failed; keeping the current session", "err", ev.Err)
			d.next, d.nextPeer = nil, netip.AddrPort{}
		}
	}
}

// switchConn makes the new handshake's Conn the tunnel's. The streams of
// the old session are reset (their state at the far edge is gone):
// Reads and Writes fail with a *StreamError with CodePeerRestarted, opens
// waiting for an answer fail as unreachable (the client retries its SYN,
// which opens a stream on the new session).
func (d *driverState) switchConn() {
	old := d.conn
	d.conn, d.next = d.next, nil
	if !d.t.client {
		d.peer, d.nextPeer = d.nextPeer, netip.AddrPort{}
		d.ctr.clientRestarts++
	}
	for id, s := range d.streams {
		s.d.gone = true
		if !s.d.peerReset {
			s.d.peerReset, s.d.resetCode = true, CodePeerRestarted
		}
		if !s.d.stopped {
			s.d.stopped, s.d.stopCode = true, CodePeerRestarted
		}
		if s.opened != nil && !s.d.answered {
			s.d.answered = true
			s.opened <- wire.OpenUnreachable // capacity 1, never sent yet
		}
		delete(d.streams, id)
		d.continueRead(s)
		signal(s.writable)
	}
	d.t.log.Info("driver: new session with the peer established; streams of the old one reset",
		"peer", d.peer, "old_packets_received", old.Stats().PacketsReceived)
}

// flush sends every datagram the Conn allows now, in batches of up to
// BatchSize, and returns the time of the last poll.
func (d *driverState) flush() monotime.Time {
	now := monotime.Now()
	if d.next != nil {
		if n := d.next.PollTransmit(now, d.txBufs[0]); n > 0 {
			to := d.peer
			if !d.t.client {
				to = d.nextPeer
			}
			d.sendTo([][]byte{d.txBufs[0][:n]}, to)
		}
	}
	for {
		k := 0
		for k < len(d.txBufs) {
			n := d.conn.PollTransmit(now, d.txBufs[k])
			if n == 0 {
				break
			}
			d.txOut[k] = d.txBufs[k][:n]
			k++
		}
		if k == 0 {
			return now
		}
		d.send(d.txOut[:k])
		if k < len(d.txBufs) {
			return now
		}
		now = monotime.Now()
	}
}

// send writes one batch to the peer. Errors are counted and logged once
// per kind; the Conn's loss recovery resends what mattered.
func (d *driverState) send(bufs [][]byte) { d.sendTo(bufs, d.peer) }

// sendTo writes one batch to ep.
func (d *driverState) sendTo(bufs [][]byte, ep netip.AddrPort) {
	d.ctr.txBatches++
	if !ep.IsValid() {
		d.ctr.txErrors++
		return
	}
	if err := d.t.bc.WriteBatch(bufs, ep); err != nil {
		d.ctr.txErrors++
		if s := err.Error(); s != d.lastTxErr {
			d.lastTxErr = s
			d.t.log.Warn("driver: send failed; the tunnel retransmits what was lost", "peer", ep, "err", err)
		}
		return
	}
	d.ctr.datagramsOut += uint64(len(bufs))
}

// signal wakes a waiter on a capacity-1 channel without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// pollEvents dispatches the Conn's events to streams and waiters.
func (d *driverState) pollEvents() {
	d.pollNext()
	for {
		ev, ok := d.conn.PollEvent()
		if !ok {
			return
		}
		switch ev.Kind {
		case tunnel.EventEstablished:
			if !d.estDone {
				d.estDone = true
				close(d.t.established)
			}
		case tunnel.EventClosed:
			d.closeErr = ev.Err
		case tunnel.EventStreamOpened:
			s := newStream(d.t, ev.StreamID, ev.Proto, ev.Src, ev.Dst)
			in := &IncomingStream{s: s}
			select {
			case d.t.accept <- in:
				d.streams[ev.StreamID] = s
			default:
				d.ctr.acceptOverflow++
				_ = d.conn.RejectStream(ev.StreamID, wire.OpenResourceLimit)
				d.t.log.Debug("driver: accept backlog full; stream refused", "stream", ev.StreamID, "dst", ev.Dst)
			}
		case tunnel.EventOpenResult:
			if s := d.streams[ev.StreamID]; s != nil && !s.d.answered {
				s.d.answered = true
				s.opened <- ev.OpenCode // capacity 1, sent once
				if ev.OpenCode != wire.OpenOK {
					s.d.gone = true
					delete(d.streams, ev.StreamID)
				}
			}
		case tunnel.EventStreamReadable:
			if s := d.streams[ev.StreamID]; s != nil {
				d.continueRead(s)
			}
		case tunnel.EventStreamWritable:
			if s := d.streams[ev.StreamID]; s != nil {
				signal(s.writable)
			}
		case tunnel.EventStreamReset:
			if s := d.streams[ev.StreamID]; s != nil {
				s.d.peerReset, s.d.resetCode = true, ev.Code
				d.continueRead(s)
			}
		case tunnel.EventStreamStopSending:
			if s := d.streams[ev.StreamID]; s != nil {
				s.d.stopped, s.d.stopCode = true, ev.Code
				signal(s.writable)
			}
		case tunnel.EventStreamClosed:
			if s := d.streams[ev.StreamID]; s != nil {
				s.d.gone = true
				delete(d.streams, ev.StreamID)
				d.continueRead(s)
				signal(s.writable)
			}
		case tunnel.EventDatagram:
			// Unreliable datagrams have no API here yet; dropped.
		case tunnel.EventRejected:
			d.startRehandshake(monotime.Now())
		}
	}
}

// connErr turns an error from a Conn call into the driver's error for
// stream s and the operation op.
func (d *driverState) connErr(s *Stream, op opKind, err error) error {
	if isClosedConnErr(err) {
		reason := d.closeErr
		if reason == nil {
			reason = err
		}
		return fmt.Errorf("%w: %w", ErrTunnelClosed, reason)
	}
	if s == nil {
		return fmt.Errorf("driver: %w", err)
	}
	// The event that explains the error (EventStreamReset with the
	// peer's code, EventStreamStopSending) may still be queued.
	d.pollEvents()
	if op == opRead && errors.Is(err, tunnel.ErrStreamState) {
		s.d.peerReset = true // StreamRead's contract: reset by the peer
	}
	return d.streamErr(s, op, err)
}

// streamErr says why a stream refuses op, from what the driver saw.
func (d *driverState) streamErr(s *Stream, op opKind, err error) error {
	switch {
	case op == opRead && s.d.peerReset:
		return &StreamError{StreamID: s.id, Code: s.d.resetCode}
	case op == opWrite && s.d.stopped:
		return &StreamError{StreamID: s.id, Code: s.d.stopCode, StopSending: true}
	case s.d.closed:
		return ErrStreamClosed
	case op == opWrite && s.d.finQueued:
		return ErrWriteClosed
	case op == opRead && s.d.gone:
		return io.EOF
	case err == nil:
		return fmt.Errorf("driver: stream %d is finished: %w", s.id, tunnel.ErrUnknownStream)
	}
	return fmt.Errorf("driver: stream %d: %w", s.id, err)
}

// handleReq serves one application request and replies.
func (d *driverState) handleReq(r request) {
	var res result
	s := r.s
	switch r.op {
	case opRead:
		res = d.read(s, r.buf)
		if res.err == nil && !res.fin && res.n < r.min {
			d.parkRead(s, r, res.n)
			return // the reply comes when the read is satisfied
		}
	case opCancelRead:
		d.cancelParked(s)
	case opWrite:
		res = d.write(s, r.buf)
	case opCloseWrite:
		if s.d.gone || s.d.closed || s.d.finQueued || s.d.stopped {
			break // nothing left to close
		}
		if err := d.conn.StreamCloseWrite(s.id); err != nil {
			res.err = d.connErr(s, r.op, err)
			break
		}
		s.d.finQueued = true
	case opClose:
		d.closeStream(s, false, CodeNoError)
	case opAbort:
		d.closeStream(s, true, wire.ErrorCode(r.code))
	case opOpen:
		id, err := d.conn.OpenStream(monotime.Now(), r.src, r.dst)
		if err != nil {
			res.err = d.connErr(nil, r.op, err)
			break
		}
		s := newStream(d.t, id, wire.ProtoTCP, r.src, r.dst)
		s.opened = make(chan wire.OpenCode, 1)
		d.streams[id] = s
		res.s = s
	case opAccept:
		if s.d.gone {
			res.err = fmt.Errorf("driver: accept stream %d: the peer abandoned it", s.id)
			break
		}
		if err := d.conn.AcceptStream(s.id); err != nil {
			res.err = d.connErr(s, r.op, err)
		}
	case opReject:
		if s.d.gone {
			break
		}
		s.d.gone = true
		delete(d.streams, s.id)
		if err := d.conn.RejectStream(s.id, wire.OpenCode(r.code)); err != nil && isClosedConnErr(err) {
			res.err = d.connErr(s, r.op, err)
		}
	case opStats:
		d.fillStats(r.stats)
	}
	r.reply <- res // capacity 1: never blocks
}

// read serves Stream.Read.
func (d *driverState) read(s *Stream, p []byte) result {
	if s.d.gone || s.d.closed {
		return result{err: d.streamErr(s, opRead, nil)}
	}
	n, fin, err := d.conn.StreamRead(s.id, p)
	if err != nil {
		if errors.Is(err, tunnel.ErrUnknownStream) {
			s.d.gone = true
		}
		return result{err: d.connErr(s, opRead, err)}
	}
	return result{n: n, fin: fin}
}

// write serves Stream.Write.
func (d *driverState) write(s *Stream, p []byte) result {
	if s.d.gone || s.d.closed || s.d.stopped || s.d.finQueued {
		return result{err: d.streamErr(s, opWrite, nil)}
	}
	n, err := d.conn.StreamWrite(s.id, p)
	if err != nil {
		return result{n: n, err: d.connErr(s, opWrite, err)}
	}
	return result{n: n}
}

// closeStream ends both halves of s. The sending half gets a FIN after
// the data written so far, or a reset when abort is set or unread data
// is waiting (as TCP sends RST when closing with unread data); the
// receiving half asks the peer to stop sending. code is the reset's and
// STOP_SENDING's code.
func (d *driverState) closeStream(s *Stream, abort bool, code wire.ErrorCode) {
	defer d.continueRead(s) // a parked read ends: ErrStreamClosed
	if s.d.closed || s.d.gone {
		s.d.closed = true
		return
	}
	s.d.closed = true
	if !abort && !s.d.peerReset {
		abort = d.conn.StreamReadable(s.id) > 0
	}
	if abort {
		_ = d.conn.StreamReset(s.id, code)
	} else if !s.d.finQueued && !s.d.stopped {
		_ = d.conn.StreamCloseWrite(s.id)
		s.d.finQueued = true
	}
	_ = d.conn.StreamStopSending(s.id, code)
}

// fillStats writes a snapshot into s.
func (d *driverState) fillStats(s *Stats) {
	*s = Stats{
		Tunnel:         d.conn.Stats(),
		Bind:           d.t.bc.Stats(),
		DatagramsIn:    d.ctr.datagramsIn,
		DatagramsOut:   d.ctr.datagramsOut,
		RxBatches:      d.ctr.rxBatches,
		TxBatches:      d.ctr.txBatches,
		TimerWakeups:   d.ctr.timerWakeups,
		SleepWakeups:   d.ctr.sleepWakeups,
		Loops:          d.ctr.loops,
		RxDropped:      d.t.rxDropped.Load(),
		RxHolds:        d.t.rxHolds.Load(),
		TxErrors:       d.ctr.txErrors,
		AcceptOverflow: d.ctr.acceptOverflow,
		RejectsSent:    d.ctr.rejectsSent,
		Rehandshakes:   d.ctr.rehandshakes,
		ClientRestarts: d.ctr.clientRestarts,
		PeerAddr:       d.peer,
	}
}
