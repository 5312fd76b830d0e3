// The driver goroutine (run): its select loop; service, which after each
// wakeup dispatches the Conn's events, transmits and re-arms the timer or
// the sleeper; and shutdown.

package driver

import (
	"fmt"
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
// (see arm); minSleep is the shortest sleep it is given, the pacer's
// quantum (half its 2 ms burst), so a wakeup up to 1 ms late loses no
// credit.
const (
	sleepThreshold = 2 * time.Millisecond
	minSleep       = time.Millisecond
)

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
		case b := <-t.dgq:
			d.sendDatagram(b)
		case <-d.timer.C:
			d.armed = 0
			d.ctr.timerWakeups++
			d.handleTimeout(monotime.Now())
		case <-d.sleepWake:
			d.sleeping = 0
			d.ctr.sleepWakeups++
			d.handleTimeout(monotime.Now())
		case <-t.rxWait:
			d.ctr.readWaitWakeups++ // service below arms the gathers' deadlines
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
			case b := <-t.dgq:
				d.sendDatagram(b)
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
	t.log.Info("tunnel stopped", "reason", reason,
		"datagrams_in", d.ctr.datagramsIn, "datagrams_out", d.ctr.datagramsOut,
		"rx_batches", d.ctr.rxBatches, "tx_batches", d.ctr.txBatches, "rx_holds", t.rxHolds.Load(),
		"loops", d.ctr.loops, "sleep_wakeups", d.ctr.sleepWakeups, "timer_wakeups", d.ctr.timerWakeups,
		"read_wait_wakeups", d.ctr.readWaitWakeups)
	close(t.done)
}

// service polls events, transmits, and re-arms the timer. It returns
// false when the Conn is finished and the driver should stop.
func (d *driverState) service() bool {
	for range maxImmediateTimeouts {
		d.pollEvents()
		now := d.flush()
		d.pollEvents()
		d.reportHandshakes()
		next := d.conn.NextTimeout()
		if d.next != nil {
			if n := d.next.NextTimeout(); n != 0 && (next == 0 || n.Before(next)) {
				next = n
			}
		}
		if next == 0 && d.conn.Closed() {
			return d.restartServer(now)
		}
		if g := d.expireParked(now); d.timerForGathers(g) && (next == 0 || g.Before(next)) {
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

// reportHandshakes tells Config.OnHandshakeSent of a dial's new
// initiations, until the handshake completes.
func (d *driverState) reportHandshakes() {
	if f := d.t.cfg.OnHandshakeSent; f != nil && !d.estDone {
		if n := d.conn.HandshakesSent(); n != d.hsReported {
			d.hsReported = n
			f(n)
		}
	}
}

// arm schedules the next HandleTimeout for next (after now). Deadlines
// further than sleepThreshold go to the Go timer. Nearer ones (pacing
// waits) go to the sleeper goroutine, which wakes the loop within about
// 60 µs, no sooner than minSleep from now so that each wakeup sends a
// batch. A Go timer would fire 1-2 ms late, past the credit the pacer
// holds, and lose sending time (TestLoopbackPacing).
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
// sleepReq, sleeps until then (a sleeper) and signals sleepWake. Sleeps
// are shorter than sleepThreshold, so it notices ctx's end within 2 ms.
func (t *Tunnel) sleepLoop() {
	defer close(t.sleeperDone)
	s := newSleeper()
	defer s.close()
	for {
		select {
		case until := <-t.d.sleepReq:
			s.until(until)
			select {
			case t.d.sleepWake <- struct{}{}:
			default:
			}
		case <-t.ctx.Done():
			return
		}
	}
}

// handleTimeout passes a timer expiry to the Conn (and to the new
// handshake's, if one runs).
func (d *driverState) handleTimeout(now monotime.Time) {
	d.conn.HandleTimeout(now)
	if d.next != nil {
		d.next.HandleTimeout(now)
	}
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
			d.notePathMTU()
			return now
		}
		d.send(d.txOut[:k])
		if k < len(d.txBufs) {
			d.notePathMTU()
			return now
		}
		now = monotime.Now()
	}
}

// notePathMTU publishes the Conn's datagram limit, which follows its path
// MTU search, to SendDatagram's callers.
func (d *driverState) notePathMTU() {
	if m := int64(d.conn.MaxDatagramBytes()); m != d.lastMaxDatagram {
		d.lastMaxDatagram = m
		d.t.maxDatagram.Store(m)
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
			d.t.log.Warn("send failed; the tunnel retransmits what was lost", "peer", ep, "err", err)
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
				d.t.log.Debug("accept backlog full; stream refused", "stream", ev.StreamID, "dst", ev.Dst)
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
				s.markPeerReset(ev.Code)
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
			d.deliverDatagram(ev.Data)
		case tunnel.EventRejected:
			d.startRehandshake(monotime.Now())
		case tunnel.EventHandshakeRefused:
			d.t.cfg.Refusals.addEvent(time.Now(), d.refusedFrom, ev)
		}
	}
}
