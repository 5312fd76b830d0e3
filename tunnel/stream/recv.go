package stream

import (
	"fmt"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// RecvStream is the receiving half of a stream: a reassembly buffer for
// STREAM frames arriving in any order, in-order reads for the application,
// and the auto-tuned stream credit (MAX_STREAM_DATA) with its final-size
// rules. Offsets are stream offsets; lengths are bytes.
//
// Calling contract (the connection serialises all calls, see ConnFlow):
// the connection calls HandleFrame for each STREAM frame and
// OnResetStream for RESET_STREAM; an error is fatal to the connection
// (close it with CloseCode(err)) and leaves the stream unchanged. The
// driver calls Read after Readable > 0 or a FIN, StopSending when the
// application abandons reading, and ReadInto to lend a waiting reader's
// buffer. After reads the connection asks ShouldSendMaxStreamData (and
// ConnFlow.ShouldSendMaxData). The stream is finished when Done.
type RecvStream struct {
	id uint64
	cf *ConnFlow

	buf      chunkRing  // bytes [read, win.limit), chunks allocated as data lands
	win      recvWindow // win.consumed is the read offset
	highest  uint64     // highest offset received (exclusive)
	received rangeSet   // ranges received at or above the read offset
	reserved uint64     // budget reserved: min(win.limit, finalSize) - win.consumed until discarding

	finalKnown bool
	finalSize  uint64
	finRead    bool // Read returned fin

	// into is the reader's buffer lent by ReadInto; taken counts the
	// bytes copied into it, read as far as the stream is concerned.
	into  []byte
	taken int

	// discarding: the application will not read (StopSending) or the peer
	// reset the stream; bytes up to highest count as consumed, nothing is
	// buffered and no credit is granted.
	discarding bool
	stopped    bool
	resetRecvd bool
	resetCode  wire.ErrorCode
}

// NewRecvStream returns the receiving half of stream id with the initial
// window cf's Config.InitialStreamWindow, reserved from cf's Budget (as a
// floor: always granted, since the peer may use it at once).
func NewRecvStream(id uint64, cf *ConnFlow) *RecvStream {
	init := cf.cfg.InitialStreamWindow
	s := &RecvStream{id: id, cf: cf, win: newRecvWindow(init, cf.cfg.MaxStreamWindow)}
	s.reserved = cf.budget.reserve(init, init)
	return s
}

// ID returns the stream ID.
func (s *RecvStream) ID() uint64 { return s.id }

// HandleFrame takes a STREAM frame's data at offset (fin: the stream ends
// after it). Data may arrive out of order, overlap earlier frames or repeat
// them; the bytes at or above the read offset are copied (data is not
// retained): into the buffer lent by ReadInto while they come in order and
// it has room, else into the stream's buffer. It returns an error wrapping
// ErrFlowControl if the frame goes beyond the stream's or the connection's
// credit, or ErrFinalSize if it contradicts the final size (data beyond
// it, a second different FIN, a FIN below data already received). On
// error nothing changes.
func (s *RecvStream) HandleFrame(offset uint64, data []byte, fin bool) error {
	end := offset + uint64(len(data))
	if end < offset || end > wire.MaxVarint {
		return fmt.Errorf("stream %d: offset %d + %d bytes exceeds 2^62-1: %w", s.id, offset, len(data), ErrFlowControl)
	}
	if err := s.checkFinal(end, fin); err != nil {
		return err
	}
	if end > s.win.limit {
		return fmt.Errorf("stream %d: data up to offset %d beyond the credit %d: %w", s.id, end, s.win.limit, ErrFlowControl)
	}
	if end > s.highest {
		delta := end - s.highest
		if err := s.cf.onReceived(s.id, delta); err != nil {
			return err
		}
		s.highest = end
		if s.discarding {
			s.cf.onConsumed(delta)
		}
	}
	if fin && !s.finalKnown {
		s.finalKnown, s.finalSize = true, end
		if !s.discarding { // the credit beyond the final size will not be used
			excess := s.win.limit - end
			s.reserved -= excess
			s.cf.budget.release(excess)
		}
	}
	read := s.win.consumed
	if s.discarding || end <= read {
		return nil
	}
	start := max(offset, read)
	data = data[start-offset:]
	if len(data) > 0 && len(s.into) > 0 && start == read && s.Readable() == 0 {
		// In order with nothing before it: straight to the reader.
		m := copy(s.into, data)
		s.into = s.into[m:]
		s.taken += m
		s.consume(uint64(m))
		start, read, data = start+uint64(m), s.win.consumed, data[m:]
		if len(data) == 0 {
			return nil
		}
	}
	chunk := uint64(s.cf.pool.chunkBytes)
	for off := start; len(data) > 0; {
		c := s.buf.chunkFor(s.cf.pool, read/chunk, off/chunk)
		m := copy(c[off%chunk:], data)
		off += uint64(m)
		data = data[m:]
	}
	s.received.add(start, end)
	return nil
}

// checkFinal checks data up to end (with fin) against the final size.
func (s *RecvStream) checkFinal(end uint64, fin bool) error {
	switch {
	case s.finalKnown && end > s.finalSize:
		return fmt.Errorf("stream %d: data up to offset %d beyond the final size %d: %w", s.id, end, s.finalSize, ErrFinalSize)
	case s.finalKnown && fin && end != s.finalSize:
		return fmt.Errorf("stream %d: final size %d changed to %d: %w", s.id, s.finalSize, end, ErrFinalSize)
	case fin && end < s.highest:
		return fmt.Errorf("stream %d: final size %d below data received up to %d: %w", s.id, end, s.highest, ErrFinalSize)
	}
	return nil
}

// Readable returns the bytes Read can return now (contiguous from the read
// offset).
func (s *RecvStream) Readable() int {
	if s.discarding || s.received.empty() {
		return 0
	}
	r := s.received.first()
	if r.start > s.win.consumed {
		return 0
	}
	return int(r.end - s.win.consumed)
}

// Read copies in-order bytes into p and returns their number; fin is true
// once every byte before the FIN has been read (also with n == 0, and on
// every later call). It returns (0, false) when nothing is readable yet, and
// after StopSending or a reset from the peer (see ResetCode). The bytes read
// are freed and their credit returned to the Budget.
func (s *RecvStream) Read(p []byte) (n int, fin bool) {
	if s.discarding {
		return 0, false
	}
	read := s.win.consumed
	want := uint64(min(len(p), s.Readable()))
	chunk := uint64(s.cf.pool.chunkBytes)
	for off := read; off < read+want; {
		c := *s.buf.slot(off / chunk)
		m := copy(p[off-read:want], c[off%chunk:])
		off += uint64(m)
	}
	if want > 0 {
		s.consume(want)
	}
	if s.finalKnown && s.win.consumed == s.finalSize && !s.finRead {
		s.finRead = true
		s.buf.releaseAll(s.cf.pool)
	}
	return int(want), s.finRead
}

// consume moves the read offset n bytes on: their chunks and credit are
// returned.
func (s *RecvStream) consume(n uint64) {
	s.win.consumed += n
	s.received.removeBelow(s.win.consumed)
	s.buf.releaseBelow(s.cf.pool, s.win.consumed, s.cf.pool.chunkBytes)
	s.reserved -= n
	s.cf.budget.release(n)
	s.cf.onConsumed(n)
}

// ReadInto lends p to the stream for a reader that waits for data (a
// parked read in package driver): while p has room, data that arrives in
// order with nothing before it waiting is copied straight into p, as if
// read. It returns the bytes the previous lend took (see Taken), which
// the caller counts as read; ReadInto(nil) ends the lend. The caller must
// not use p until the lend ends.
func (s *RecvStream) ReadInto(p []byte) (taken int) {
	taken = s.taken
	s.into, s.taken = p, 0
	return taken
}

// Taken returns the bytes copied into the buffer lent by ReadInto so far.
func (s *RecvStream) Taken() int { return s.taken }

// RecvWindow returns the stream's current receive window and the credit
// last advertised (MAX_STREAM_DATA).
func (s *RecvStream) RecvWindow() (windowBytes, limit uint64) { return s.win.windowBytes, s.win.limit }

// ShouldSendMaxStreamData reports whether the connection should send
// MAX_STREAM_DATA, and with which value: when the application has read
// more than a quarter of the window since the last update. It first
// auto-tunes the window (rtt is the smoothed RTT; zero means unknown),
// raising the connection window to 1.5 times the stream's if it grew.
// Credit beyond the initial window is granted only as far as the Budget
// allows, so ok may be false under memory pressure; call again after
// memory is freed. When ok, the new limit is in force as if sent: the
// connection must deliver it (resending the latest value if lost). It
// never asks once the final size is known or the stream is discarding.
func (s *RecvStream) ShouldSendMaxStreamData(now monotime.Time, rtt time.Duration) (maxBytes uint64, ok bool) {
	if s.discarding || s.finalKnown || !s.win.wantsUpdate() {
		return 0, false
	}
	if s.win.autoTune(now, rtt) {
		s.cf.recv.ensureWindow(s.win.windowBytes + s.win.windowBytes/2)
	}
	commit := s.win.limit - s.win.consumed
	want := s.win.consumed + s.win.windowBytes - s.win.limit
	var floor uint64
	if init := s.cf.cfg.InitialStreamWindow; commit < init {
		floor = init - commit
	}
	g := s.cf.budget.reserve(want, floor)
	if g == 0 {
		return 0, false
	}
	s.reserved += g
	s.win.limit += g
	return s.win.limit, true
}

// GrowWindow raises the stream's receive window to windowBytes (bounded by
// Config.MaxStreamWindow) and grants the new credit at once, without
// waiting for reads: for a stream opened on a connection that already
// knows its bandwidth-delay product. At most maxReserve bytes beyond the
// current credit are granted, and only what the Budget has available (no
// floor). The window becomes the credit granted, and the connection's
// receive window is raised to 1.5 times it. When ok, the new limit is in
// force as if sent: the connection must deliver it in MAX_STREAM_DATA.
// It does nothing (ok false) when the credit outstanding is already
// windowBytes or more, once the final size is known, or while discarding.
func (s *RecvStream) GrowWindow(windowBytes, maxReserve uint64) (maxBytes uint64, ok bool) {
	if s.discarding || s.finalKnown {
		return 0, false
	}
	windowBytes = min(windowBytes, s.win.maxWindowBytes)
	if outstanding := s.win.limit - s.win.consumed; windowBytes <= outstanding {
		return 0, false
	}
	want := min(s.win.consumed+windowBytes-s.win.limit, maxReserve)
	g := s.cf.budget.reserve(want, 0)
	if g == 0 {
		return 0, false
	}
	s.reserved += g
	s.win.limit += g
	s.win.windowBytes = max(s.win.windowBytes, s.win.limit-s.win.consumed)
	s.cf.recv.ensureWindow(s.win.windowBytes + s.win.windowBytes/2)
	return s.win.limit, true
}

// discard drops the buffered bytes and the budget reservation and counts
// every byte up to s.highest as consumed by the connection.
func (s *RecvStream) discard() {
	if s.discarding {
		return
	}
	s.discarding = true
	s.into = nil // bytes taken stay taken: they were in order
	s.cf.onConsumed(s.highest - s.win.consumed)
	s.win.consumed = s.highest
	s.buf.releaseAll(s.cf.pool)
	s.received.clear()
	s.cf.budget.release(s.reserved)
	s.reserved = 0
}

// OnResetStream handles RESET_STREAM from the peer: the stream is abandoned
// with code and finalSize bytes. Buffered bytes are dropped, and the bytes
// up to finalSize count as received and consumed at the connection level.
// It returns an error wrapping ErrFinalSize if finalSize contradicts a
// known final size or data received, or ErrFlowControl if it exceeds the
// credit; on error nothing changes. A reset after the application read the
// FIN, or a repeated reset, is ignored.
func (s *RecvStream) OnResetStream(code wire.ErrorCode, finalSize uint64) error {
	switch {
	case s.finalKnown && finalSize != s.finalSize:
		return fmt.Errorf("stream %d: reset with final size %d, was %d: %w", s.id, finalSize, s.finalSize, ErrFinalSize)
	case finalSize < s.highest:
		return fmt.Errorf("stream %d: reset with final size %d below data received up to %d: %w", s.id, finalSize, s.highest, ErrFinalSize)
	case finalSize > s.win.limit:
		return fmt.Errorf("stream %d: reset with final size %d beyond the credit %d: %w", s.id, finalSize, s.win.limit, ErrFlowControl)
	}
	if err := s.cf.onReceived(s.id, finalSize-s.highest); err != nil {
		return err
	}
	if s.discarding {
		s.cf.onConsumed(finalSize - s.highest)
	}
	s.highest = finalSize
	s.finalKnown, s.finalSize = true, finalSize
	if s.finRead || s.resetRecvd {
		return nil
	}
	s.resetRecvd, s.resetCode = true, code
	s.discard()
	return nil
}

// ResetCode returns the peer's error code if it reset the stream.
func (s *RecvStream) ResetCode() (code wire.ErrorCode, ok bool) { return s.resetCode, s.resetRecvd }

// StopSending records that the application will read no more: buffered and
// future bytes are discarded (still checked against credit and final size)
// and the stream's memory is returned. It returns true if the connection
// should send STOP_SENDING with code (the peer may still be sending), false
// if the stream was already stopped, reset by the peer, or fully received.
func (s *RecvStream) StopSending(code wire.ErrorCode) bool {
	if s.stopped || s.resetRecvd || s.finRead {
		return false
	}
	allReceived := s.finalKnown && s.received.bytes() == s.finalSize-s.win.consumed
	s.stopped = true
	s.discard()
	return !allReceived
}

// Done reports whether the stream is finished: the application read the
// FIN, the peer reset it, or the application stopped it and the final size
// is known. The connection may then forget it.
func (s *RecvStream) Done() bool {
	return s.finRead || s.resetRecvd || (s.stopped && s.finalKnown)
}
