package stream

import "github.com/wanopt/wanopt/tunnel/wire"

// SendStream is the sending half of a stream: a buffer of bytes written by
// the application and not yet acknowledged, with the bookkeeping to send
// them as STREAM frames, retransmit the lost ones and free the acknowledged
// ones. Offsets are stream offsets; lengths are bytes.
//
// Calling contract (the connection serialises all calls, see ConnFlow):
// the driver calls Write and CloseWrite for the application; to fill a
// packet the connection calls PopFrame while HasData, copies the data at
// once and records (offset, length, fin) per frame; on the packet's
// acknowledgment or loss it calls OnAcked or OnLost with them, in any
// order and any number of times. Peer frames go to OnMaxStreamData and
// OnStopSending; Blocked says when to send STREAM_DATA_BLOCKED. After
// Reset the connection sends RESET_STREAM with the final size until
// acknowledged, then calls OnResetAcked. The stream is finished when
// Done.
type SendStream struct {
	id uint64
	cf *ConnFlow

	buf       chunkRing // bytes [ackedBase, writeEnd)
	ackedBase uint64    // every byte below is acknowledged (and freed)
	sentEnd   uint64    // bytes below were sent at least once
	writeEnd  uint64    // bytes written by the application
	reserved  uint64    // bytes reserved from the budget (the buffered and lent bytes)
	lent      uint64    // room above writeEnd lent by Lend until Commit
	sharing   bool      // counted in ConnFlow.holding (see syncSharing)

	acked rangeSet // acknowledged ranges above ackedBase
	lost  rangeSet // ranges to retransmit, within [ackedBase, sentEnd), none acked

	maxStreamData   uint64 // the peer's credit: we may send bytes below it
	blockedReported bool   // Blocked reported blockedLimit
	blockedLimit    uint64

	closed   bool // CloseWrite: the final size is writeEnd
	finSent  bool
	finLost  bool // the FIN must be sent again
	finAcked bool

	reset      bool
	resetCode  wire.ErrorCode
	resetAcked bool
}

// NewSendStream returns the sending half of stream id, sharing cf's credit,
// budget and pool. peerInitialMaxStreamData is the credit the peer grants
// before its first MAX_STREAM_DATA (its InitialStreamWindow).
func NewSendStream(id uint64, cf *ConnFlow, peerInitialMaxStreamData uint64) *SendStream {
	return &SendStream{id: id, cf: cf, maxStreamData: peerInitialMaxStreamData}
}

// ID returns the stream ID.
func (s *SendStream) ID() uint64 { return s.id }

// Buffered returns the bytes held: written and not yet acknowledged.
func (s *SendStream) Buffered() int { return int(s.writeEnd - s.ackedBase) }

// Writable returns how many bytes Write would accept now. It is 0 after
// CloseWrite or Reset, or when the stream's buffer (Config.SendBufferBytes),
// its share of the connection's send cap (ConnFlow.SetSendCap) or the
// connection's Budget is full; space comes back when OnAcked frees bytes,
// on this stream or (for the budget) on any stream.
func (s *SendStream) Writable() int {
	if s.closed || s.reset {
		return 0
	}
	cfg := &s.cf.cfg
	buffered := s.writeEnd + s.lent - s.ackedBase
	room := uint64(cfg.SendBufferBytes) - min(buffered, uint64(cfg.SendBufferBytes))
	if share := s.cf.sendShare(s.sharing); share > 0 {
		room = min(room, share-min(buffered, share))
		// Under the cap, hold at most the floor beyond the peer's credit:
		// bytes above it wait for the peer's reader, not for the path.
		end := s.writeEnd + s.lent
		limit := s.maxStreamData + uint64(cfg.MinSendBufferBytes)
		room = min(room, limit-min(end, limit))
	}
	var floor uint64
	if f := uint64(cfg.MinSendBufferBytes); buffered < f {
		floor = f - buffered
	}
	return int(min(room, floor+s.cf.budget.Available()))
}

// Write copies as much of p as Writable allows into the stream's buffer and
// returns the number of bytes taken; 0 means the buffer is full (or the
// stream closed or reset), and the driver should wait for OnAcked. p is not
// retained. It must not be called while space is lent (Lend).
func (s *SendStream) Write(p []byte) int {
	if s.lent > 0 {
		return 0
	}
	n := s.reserve(len(p))
	p = p[:n]
	chunk := uint64(s.cf.pool.chunkBytes)
	for len(p) > 0 {
		c := s.buf.chunkFor(s.cf.pool, s.ackedBase/chunk, s.writeEnd/chunk)
		m := copy(c[s.writeEnd%chunk:], p)
		s.writeEnd += uint64(m)
		p = p[m:]
	}
	s.syncSharing()
	return n
}

// reserve takes up to want bytes of room from the stream's buffer and the
// budget, as Writable allows, and returns how many it took.
func (s *SendStream) reserve(want int) int {
	w := min(uint64(want), uint64(s.Writable()))
	if w == 0 {
		return 0
	}
	var floor uint64
	if f, b := uint64(s.cf.cfg.MinSendBufferBytes), s.writeEnd-s.ackedBase; b < f {
		floor = f - b
	}
	n := s.cf.budget.reserve(w, floor)
	s.reserved += n
	s.syncSharing()
	return int(n)
}

// syncSharing keeps the stream's place among the streams the send cap is
// shared by (ConnFlow.holding): those holding bytes, unless the peer's
// stream credit blocks them. A stream its peer does not read holds bytes
// the path cannot take, and counted it would take a share of the cap
// from the streams that can send. Call it after reserved, writeEnd,
// sentEnd or maxStreamData change.
func (s *SendStream) syncSharing() {
	sharing := s.reserved > 0 && !(s.writeEnd > s.sentEnd && s.sentEnd >= s.maxStreamData)
	if sharing == s.sharing {
		return
	}
	s.sharing = sharing
	if sharing {
		s.cf.holding++
	} else {
		s.cf.holding--
	}
}

// unreserve gives back n reserved bytes that were never written.
func (s *SendStream) unreserve(n uint64) {
	if n == 0 {
		return
	}
	s.reserved -= n
	s.syncSharing()
	s.cf.budget.release(n)
}

// Lend lends the caller the room at the end of the stream's buffer, up to
// want bytes and what Writable allows, as consecutive slices of the
// buffer's chunks appended to dst[:0] (at most want/ChunkBytes+2), so the
// application's bytes can be read straight into the buffer. The room
// counts as written (against Writable and the budget) until Commit says
// how much was filled; every Lend must be followed by one Commit, and
// Write and Lend wait for it. No room: no slices.
//
// The slices are the caller's to fill, on any goroutine, until Commit:
// nothing else touches those bytes, and a Reset meanwhile leaves their
// chunks to the caller instead of recycling them.
func (s *SendStream) Lend(dst [][]byte, want int) [][]byte {
	dst = dst[:0]
	if s.lent > 0 {
		return dst
	}
	n := uint64(s.reserve(want))
	s.lent = n
	chunk := uint64(s.cf.pool.chunkBytes)
	for off, end := s.writeEnd, s.writeEnd+n; off < end; {
		c := s.buf.chunkFor(s.cf.pool, s.ackedBase/chunk, off/chunk)
		i := off % chunk
		m := min(chunk-i, end-off)
		dst = append(dst, c[i:i+m:i+m])
		off += m
	}
	return dst
}

// Commit ends a Lend: the first n bytes of the lent room (in the order of
// the slices) become the stream's next bytes, as if given to Write, and the
// rest goes back to the buffer and the budget. It returns the bytes taken:
// n, or 0 after Reset or CloseWrite (the bytes are dropped: nothing may
// follow the end of a stream) or when nothing was lent.
func (s *SendStream) Commit(n int) int {
	lent := s.lent
	s.lent = 0
	if s.reset {
		return 0 // Reset released the reservation and dropped the chunks
	}
	k := min(uint64(max(n, 0)), lent)
	if s.closed {
		k = 0
	}
	s.writeEnd += k
	s.unreserve(lent - k)
	s.syncSharing()
	if s.Done() { // the FIN was acknowledged while the room was lent
		s.buf.releaseAll(s.cf.pool)
	}
	return int(k)
}

// dropLent forgets the chunks holding lent room, which the borrower may
// still be writing, instead of letting releaseAll recycle them: the
// garbage collector takes them once the borrower is done.
func (s *SendStream) dropLent() {
	if s.lent == 0 {
		return
	}
	chunk := uint64(s.cf.pool.chunkBytes)
	for k := s.writeEnd / chunk; k <= (s.writeEnd+s.lent-1)/chunk; k++ {
		if s.buf.forget(k) {
			s.cf.pool.drop()
		}
	}
}

// CloseWrite ends the stream after the bytes written so far: a FIN will be
// sent after them. Later calls, and calls after Reset, do nothing.
func (s *SendStream) CloseWrite() {
	if !s.reset {
		s.closed = true
	}
}

// Closed reports whether CloseWrite or Reset was called.
func (s *SendStream) Closed() bool { return s.closed || s.reset }

// streamCredit returns the new bytes the peer's stream credit allows.
func (s *SendStream) streamCredit() uint64 {
	if s.sentEnd >= s.maxStreamData {
		return 0
	}
	return s.maxStreamData - s.sentEnd
}

// finPending reports whether a FIN is due as a new frame (all data sent).
func (s *SendStream) finPending() bool {
	return s.closed && !s.finSent && s.sentEnd == s.writeEnd
}

// HasData reports whether PopFrame would return a frame given enough space:
// lost data or a lost FIN to retransmit, new data within both credits, or a
// FIN to send. It records when new data waits for connection credit (see
// ConnFlow.Blocked).
func (s *SendStream) HasData() bool {
	if s.reset {
		return false
	}
	if !s.lost.empty() || s.finLost || s.finPending() {
		return true
	}
	if s.writeEnd == s.sentEnd || s.streamCredit() == 0 {
		return false
	}
	if s.cf.SendCredit() == 0 {
		s.cf.markSendBlocked()
		return false
	}
	return true
}

// PopFrame returns the next STREAM frame to send, with at most maxPayload
// data bytes: first lost ranges (lowest offset first), then a lost FIN,
// then new data within the peer's stream credit and the connection credit
// (which it consumes), then a FIN. A frame never spans two buffer chunks,
// so data may be shorter than maxPayload while more remains: call again.
// A FIN-only frame has no data; with maxPayload 0 only one is returned.
// ok is false when there is nothing to send (then nothing changed).
//
// data aliases the stream's buffer and stays valid until the next OnAcked,
// OnLost, Reset or OnStopSending on this stream: copy it at once.
func (s *SendStream) PopFrame(maxPayload int) (offset uint64, data []byte, fin bool, ok bool) {
	if s.reset || maxPayload < 0 {
		return 0, nil, false, false
	}
	chunk := uint64(s.cf.pool.chunkBytes)
	if !s.lost.empty() && maxPayload > 0 {
		r := s.lost.first()
		n := min(r.end-r.start, uint64(maxPayload), chunk-r.start%chunk)
		s.lost.remove(r.start, r.start+n)
		if s.finLost && r.start+n == s.writeEnd {
			fin, s.finLost = true, false
		}
		return r.start, s.bytesAt(r.start, n), fin, true
	}
	if s.finLost && s.lost.empty() {
		s.finLost = false
		return s.writeEnd, nil, true, true
	}
	if avail := s.writeEnd - s.sentEnd; avail > 0 && maxPayload > 0 {
		credit := min(s.streamCredit(), s.cf.SendCredit())
		if credit == 0 {
			if s.streamCredit() > 0 {
				s.cf.markSendBlocked()
			}
			return 0, nil, false, false
		}
		off := s.sentEnd
		n := min(avail, credit, uint64(maxPayload), chunk-off%chunk)
		s.sentEnd += n
		s.cf.consumeSend(n)
		s.syncSharing()
		if s.finPending() {
			fin, s.finSent = true, true
		}
		return off, s.bytesAt(off, n), fin, true
	}
	if s.finPending() {
		s.finSent = true
		return s.sentEnd, nil, true, true
	}
	return 0, nil, false, false
}

// bytesAt returns the n buffered bytes at off, which lie in one chunk.
func (s *SendStream) bytesAt(off, n uint64) []byte {
	chunk := uint64(s.cf.pool.chunkBytes)
	c := *s.buf.slot(off / chunk)
	i := off % chunk
	return c[i : i+n : i+n]
}

// OnAcked records that the frame (offset, length, fin) was acknowledged. Parts
// already acknowledged are ignored, parts queued for retransmission are
// dequeued, and the buffer is freed up to the lowest unacknowledged byte.
// Calls after Reset do nothing.
func (s *SendStream) OnAcked(offset uint64, length int, fin bool) {
	if s.reset {
		return
	}
	start, end := max(offset, s.ackedBase), min(offset+uint64(length), s.sentEnd)
	if start < end {
		s.acked.add(start, end)
		s.lost.remove(start, end)
	}
	if fin && s.finSent {
		s.finAcked, s.finLost = true, false
	}
	if s.acked.empty() || s.acked.first().start > s.ackedBase {
		if s.Done() {
			s.buf.releaseAll(s.cf.pool)
		}
		return
	}
	newBase := s.acked.first().end
	s.acked.removeBelow(newBase)
	freed := newBase - s.ackedBase
	s.ackedBase = newBase
	s.reserved -= freed
	s.syncSharing()
	s.cf.budget.release(freed)
	s.buf.releaseBelow(s.cf.pool, s.ackedBase, s.cf.pool.chunkBytes)
	if s.Done() {
		s.buf.releaseAll(s.cf.pool)
	}
}

// OnLost records that the frame (offset, length, fin) was lost: the parts
// not acknowledged yet are queued for retransmission (once, however often
// they are reported), and so is the FIN if fin and it was not acknowledged.
// Calls after Reset do nothing.
func (s *SendStream) OnLost(offset uint64, length int, fin bool) {
	if s.reset {
		return
	}
	start, end := max(offset, s.ackedBase), min(offset+uint64(length), s.sentEnd)
	cur := start
	for _, r := range s.acked.r {
		if cur >= end || r.start >= end {
			break
		}
		if r.end <= cur {
			continue
		}
		if r.start > cur {
			s.lost.add(cur, r.start)
		}
		cur = r.end
	}
	if cur < end {
		s.lost.add(cur, end)
	}
	if fin && s.finSent && !s.finAcked {
		s.finLost = true
	}
}

// OnMaxStreamData applies a MAX_STREAM_DATA frame from the peer; a value
// below the current credit is ignored. It returns whether credit increased
// (the stream may have become sendable).
func (s *SendStream) OnMaxStreamData(maxBytes uint64) bool {
	if maxBytes <= s.maxStreamData {
		return false
	}
	s.maxStreamData = maxBytes
	s.syncSharing()
	return true
}

// Blocked reports, once per limit, that the stream has new data but the
// peer's stream credit is used up: the connection sends STREAM_DATA_BLOCKED
// with the returned limit.
func (s *SendStream) Blocked() (limit uint64, ok bool) {
	if s.reset || s.writeEnd == s.sentEnd || s.streamCredit() > 0 ||
		(s.blockedReported && s.blockedLimit == s.maxStreamData) {
		return 0, false
	}
	s.blockedReported, s.blockedLimit = true, s.maxStreamData
	return s.maxStreamData, true
}

// Reset abandons the stream with the application error code: buffered data
// is dropped (its memory returned) and nothing more is sent or accepted.
// The connection sends RESET_STREAM with code and finalSize (the bytes
// sent, which already counted against connection credit) until it is
// acknowledged, then calls OnResetAcked. ok is false if the stream was
// already reset or Done (nothing to send).
func (s *SendStream) Reset(code wire.ErrorCode) (finalSize uint64, ok bool) {
	if s.reset || s.Done() {
		return 0, false
	}
	s.reset, s.resetCode = true, code
	s.dropLent()
	s.buf.releaseAll(s.cf.pool)
	s.cf.budget.release(s.reserved)
	s.reserved = 0
	s.syncSharing()
	s.acked.clear()
	s.lost.clear()
	s.finLost = false
	return s.sentEnd, true
}

// OnStopSending handles a STOP_SENDING frame from the peer: the stream is
// reset with the peer's code (RFC 9000 §3.5), as by Reset.
func (s *SendStream) OnStopSending(code wire.ErrorCode) (finalSize uint64, ok bool) {
	return s.Reset(code)
}

// ResetCode returns the code given to Reset, if the stream was reset.
func (s *SendStream) ResetCode() (code wire.ErrorCode, ok bool) { return s.resetCode, s.reset }

// OnResetAcked records that the peer acknowledged our RESET_STREAM.
func (s *SendStream) OnResetAcked() {
	if s.reset {
		s.resetAcked = true
	}
}

// Done reports whether the stream is finished: every byte and the FIN
// acknowledged, or the reset acknowledged. The connection may then forget
// it.
func (s *SendStream) Done() bool {
	if s.reset {
		return s.resetAcked
	}
	return s.finAcked && s.ackedBase == s.writeEnd && s.lent == 0
}

// SendLimit names what holds a stream's bytes back, for an operator asking
// why a flow is slow (see Limit).
type SendLimit uint8

const (
	// SendFree: nothing waits to be sent and the buffer has room.
	SendFree SendLimit = iota
	// SendPeerWindow: bytes wait for the peer's credit (stream or
	// connection): the receiving side reads no faster.
	SendPeerWindow
	// SendCongestion: bytes wait with credit to spare, or the buffer is
	// full of bytes in flight: the connection's congestion control and
	// the path's bandwidth-delay product hold them.
	SendCongestion
	// SendMemory: the buffer is full at its floor because the memory
	// budget has nothing left to give.
	SendMemory
)

func (l SendLimit) String() string {
	switch l {
	case SendPeerWindow:
		return "peer-window"
	case SendCongestion:
		return "congestion"
	case SendMemory:
		return "memory"
	}
	return "free"
}

// Limit says what holds the stream's bytes back now.
func (s *SendStream) Limit() SendLimit {
	unsent := s.writeEnd > s.sentEnd
	switch {
	case s.reset || s.closed && !unsent:
		return SendFree
	case unsent && (s.streamCredit() == 0 || s.cf.SendCredit() == 0):
		return SendPeerWindow
	case unsent:
		return SendCongestion
	case s.Writable() > 0:
		return SendFree
	case s.Buffered() < s.cf.cfg.SendBufferBytes && s.cf.budget.Available() == 0:
		return SendMemory
	}
	return SendCongestion
}
