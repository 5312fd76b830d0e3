// Application requests: what a Stream or Tunnel call asks the driver
// (request, opKind), how the driver serves it (handleReq) and the errors
// it answers with (connErr, streamErr).

package driver

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/wire"
)

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
	opSendLimit  // what holds the stream's written bytes back (result.n)
	opRateCap    // cap the sending rate at request.code bits per second
	opLend       // commit request.commit lent bytes, then lend request.min more
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
	// commit (opLend) is how many bytes of the previous lend were filled,
	// -1 when none is outstanding; bufs is the slice to lend into.
	commit int
	bufs   [][]byte
}

// result is the driver's answer to a request.
type result struct {
	n    int
	fin  bool
	err  error
	s    *Stream
	bufs [][]byte // opLend: the room lent
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
		s.markPeerReset(s.d.resetCode) // StreamRead's contract: reset by the peer
	}
	return d.streamErr(s, op, err)
}

// streamErr says why a stream refuses op, from what the driver saw.
func (d *driverState) streamErr(s *Stream, op opKind, err error) error {
	switch {
	case op == opRead && s.peerReset.Load():
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
	case opLend:
		res = d.lend(s, r)
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
	case opSendLimit:
		res.n = int(d.conn.StreamSendLimit(s.id))
	case opRateCap:
		d.conn.SetRateCap(monotime.Now(), r.code)
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

// lend serves Stream.Lend: it commits the bytes filled into the previous
// lend, then lends room for up to r.min more, once there is room for half
// of that.
func (d *driverState) lend(s *Stream, r request) result {
	if r.commit >= 0 {
		if _, err := d.conn.StreamCommit(s.id, r.commit); err != nil {
			return result{err: d.connErr(s, opWrite, err)}
		}
	}
	if r.min <= 0 {
		return result{}
	}
	if s.d.gone || s.d.closed || s.d.stopped || s.d.finQueued {
		return result{err: d.streamErr(s, opWrite, nil)}
	}
	bufs, err := d.conn.StreamLend(s.id, r.bufs, r.min, r.min/2)
	if err != nil {
		return result{err: d.connErr(s, opWrite, err)}
	}
	return result{bufs: bufs}
}

// closeStream ends both halves of s. The sending half gets a FIN after
// the data written so far, or a reset when abort is set or unread data
// is waiting (as TCP sends RST); the receiving half asks the peer to
// stop sending. code is the reset's and STOP_SENDING's code.
func (d *driverState) closeStream(s *Stream, abort bool, code wire.ErrorCode) {
	defer d.continueRead(s) // a parked read ends: ErrStreamClosed
	if s.d.closed || s.d.gone {
		s.d.closed = true
		return
	}
	s.d.closed = true
	if !abort && !s.peerReset.Load() {
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
		Tunnel:             d.conn.Stats(),
		Bind:               d.t.bc.Stats(),
		DatagramsIn:        d.ctr.datagramsIn,
		DatagramsOut:       d.ctr.datagramsOut,
		RxBatches:          d.ctr.rxBatches,
		TxBatches:          d.ctr.txBatches,
		TimerWakeups:       d.ctr.timerWakeups,
		SleepWakeups:       d.ctr.sleepWakeups,
		Loops:              d.ctr.loops,
		RxDropped:          d.t.rxDropped.Load(),
		RxHolds:            d.t.rxHolds.Load(),
		TxErrors:           d.ctr.txErrors,
		AcceptOverflow:     d.ctr.acceptOverflow,
		DatagramQueueDrops: d.t.dgQueueDrops.Load(),
		DatagramsNotSent:   d.t.dgNotSent.Load(),
		DatagramsUnclaimed: d.t.dgUnclaimed.Load(),
		RejectsSent:        d.ctr.rejectsSent,
		Rehandshakes:       d.ctr.rehandshakes,
		ClientRestarts:     d.ctr.clientRestarts,
		ResumesDeclined:    d.ctr.resumesDeclined,
		InitiationsRefused: d.ctr.initiationsRefused,
		PeerAddr:           d.peer,
	}
	if d.gate != nil {
		s.Gate = d.gate.Stats()
	}
	if at := s.Tunnel.KeysAt; at != 0 {
		s.KeysAge = monotime.Now().Sub(at)
	}
}
