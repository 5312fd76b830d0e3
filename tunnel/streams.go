package tunnel

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/stream"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// openState is where a stream is in the STREAM_OPEN / OPEN_RESULT exchange.
type openState uint8

const (
	openWaitResult openState = iota // we sent STREAM_OPEN; no OPEN_RESULT yet
	openWaitAccept                  // the peer opened it; the application has not answered
	openOK                          // data flows both ways
)

// streamState is the connection's view of one stream: both halves, the
// open exchange, and the control frames waiting to be sent.
type streamState struct {
	id       uint64
	local    bool
	open     openState
	proto    wire.Proto
	src, dst netip.AddrPort
	send     *stream.SendStream
	recv     *stream.RecvStream

	// Control frames to send (see Conn.ctrlQ).
	needOpen, needReset, needStop, needMaxStreamData, checkCredit bool
	resetCode, stopCode                                           wire.ErrorCode
	resetFinal                                                    uint64

	inSched, inCtrl, removed    bool
	readSignalled, wantWritable bool
	writableAt                  int    // room that makes EventStreamWritable due (wantWritable)
	appRecvDone                 bool   // the application saw the FIN or the reset, or stopped reading
	sentHigh                    uint64 // highest stream offset sent, to count retransmissions
}

// streamQueue is a FIFO ring of streams (the scheduler's round robin and
// the control-frame queue). It reuses its storage.
type streamQueue struct {
	buf        []*streamState
	head, size int
}

func (q *streamQueue) push(s *streamState) {
	if q.size == len(q.buf) {
		nb := make([]*streamState, max(16, 2*len(q.buf)))
		for i := range q.size {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.size)%len(q.buf)] = s
	q.size++
}

func (q *streamQueue) front() *streamState { return q.buf[q.head] }

func (q *streamQueue) pop() *streamState {
	s := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return s
}

// byteQueue is a FIFO of byte slices (datagrams).
type byteQueue struct {
	buf        [][]byte
	head, size int
}

func (q *byteQueue) push(b []byte) {
	if q.size == len(q.buf) {
		nb := make([][]byte, max(8, 2*len(q.buf)))
		for i := range q.size {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.size)%len(q.buf)] = b
	q.size++
}

func (q *byteQueue) front() []byte { return q.buf[q.head] }

func (q *byteQueue) pop() []byte {
	b := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return b
}

// newStream creates a stream's state with both halves.
func (c *Conn) newStream(id uint64, local bool) *streamState {
	st := &streamState{
		id:    id,
		local: local,
		send:  stream.NewSendStream(id, c.flow, peerInitialStreamWindow(c.cfg.Stream)),
		recv:  stream.NewRecvStream(id, c.flow),
	}
	c.streams[id] = st
	if local {
		c.localOpen++
	} else {
		c.peerOpen++
	}
	return st
}

// removeStream forgets a stream and returns its memory.
func (c *Conn) removeStream(st *streamState, report bool) {
	if st.removed {
		return
	}
	st.send.Reset(0)
	st.recv.StopSending(0)
	st.removed = true
	delete(c.streams, st.id)
	if st.local {
		c.localOpen--
	} else {
		c.peerOpen--
	}
	if report {
		c.events.push(Event{Kind: EventStreamClosed, StreamID: st.id})
	}
}

// maybeFinish forgets a stream finished in both directions.
func (c *Conn) maybeFinish(st *streamState) {
	if !st.removed && st.appRecvDone && st.recv.Done() && st.send.Done() {
		c.removeStream(st, true)
	}
}

// schedule puts a stream with data to send in the round robin.
func (c *Conn) schedule(st *streamState) {
	if st.wantsSched() {
		st.inSched = true
		c.sched.push(st)
	}
}

// wantsSched reports whether st has data to send and is not queued yet.
func (st *streamState) wantsSched() bool {
	return !st.inSched && !st.removed && st.open == openOK && st.send.HasData()
}

// scheduleAll schedules every stream with data to send, in ID order: the
// map's order is random, and the simulator's runs must be reproducible.
func (c *Conn) scheduleAll() {
	ready := c.readyScratch[:0]
	for _, st := range c.streams {
		if st.wantsSched() {
			ready = append(ready, st)
		}
	}
	slices.SortFunc(ready, func(a, b *streamState) int { return cmp.Compare(a.id, b.id) })
	for _, st := range ready {
		c.schedule(st)
	}
	clear(ready)
	c.readyScratch = ready[:0]
}

// queueCtrl puts a stream with control frames to send in the control queue.
func (c *Conn) queueCtrl(st *streamState) {
	if !st.inCtrl && !st.removed {
		st.inCtrl = true
		c.ctrlQ.push(st)
	}
}

// usable returns nil if the connection is established, else an error
// wrapping ErrNotEstablished or ErrClosed.
func (c *Conn) usable() error {
	switch {
	case c.state == stateEstablished:
		return nil
	case c.state >= stateClosing:
		return ErrClosed
	}
	return ErrNotEstablished
}

// stream looks up an open stream for an API call.
func (c *Conn) stream(id uint64) (*streamState, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	st := c.streams[id]
	if st == nil {
		return nil, fmt.Errorf("stream %d: %w", id, ErrUnknownStream)
	}
	return st, nil
}

// OpenStream opens a TCP stream for a flow from src to dst: it sends
// STREAM_OPEN and returns the new stream's ID. The peer answers with
// OPEN_RESULT, reported as EventOpenResult. Bytes written before the
// answer are sent only after wire.OpenOK, so a refused connection gets no
// data; data from the peer is accepted at once. Errors wrap
// ErrNotEstablished, ErrClosed or ErrStreamLimit.
func (c *Conn) OpenStream(now monotime.Time, src, dst netip.AddrPort) (uint64, error) {
	return c.OpenStreamProto(now, wire.ProtoTCP, src, dst)
}

// OpenStreamProto is OpenStream for a flow of another transport protocol.
func (c *Conn) OpenStreamProto(now monotime.Time, proto wire.Proto, src, dst netip.AddrPort) (uint64, error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
	if c.localOpen >= c.cfg.MaxStreams {
		return 0, fmt.Errorf("%d streams open: %w", c.localOpen, ErrStreamLimit)
	}
	id := c.nextLocalID
	c.nextLocalID += 2
	st := c.newStream(id, true)
	st.open = openWaitResult
	st.proto, st.src, st.dst = proto, src, dst
	st.needOpen = true
	c.queueCtrl(st)
	c.growOpenWindow(st) // MAX_STREAM_DATA goes with STREAM_OPEN
	c.stats.StreamsOpened++
	return id, nil
}

// AcceptStream answers the peer's STREAM_OPEN for id with wire.OpenOK:
// data may now flow both ways. Errors wrap ErrUnknownStream or
// ErrStreamState (not awaiting an answer).
func (c *Conn) AcceptStream(id uint64) error {
	st, err := c.stream(id)
	if err != nil {
		return err
	}
	if st.open != openWaitAccept {
		return fmt.Errorf("accept stream %d: %w", id, ErrStreamState)
	}
	st.open = openOK
	c.openResults = append(c.openResults, wire.OpenResultFrame{StreamID: id, Code: wire.OpenOK})
	c.growOpenWindow(st) // MAX_STREAM_DATA follows OPEN_RESULT, usually in its packet
	c.schedule(st)
	return nil
}

// RejectStream answers the peer's STREAM_OPEN for id with code (not
// wire.OpenOK) and forgets the stream. Errors wrap ErrUnknownStream or
// ErrStreamState.
func (c *Conn) RejectStream(id uint64, code wire.OpenCode) error {
	st, err := c.stream(id)
	if err != nil {
		return err
	}
	if st.open != openWaitAccept || code == wire.OpenOK {
		return fmt.Errorf("reject stream %d with %v: %w", id, code, ErrStreamState)
	}
	c.openResults = append(c.openResults, wire.OpenResultFrame{StreamID: id, Code: code})
	c.removeStream(st, false)
	return nil
}

// StreamWrite copies as much of p as the stream's send buffer takes and
// returns the count; it never blocks. When it takes fewer bytes than
// offered, EventStreamWritable follows once there is room again. Errors
// wrap ErrUnknownStream or ErrStreamState (after StreamCloseWrite,
// StreamReset or the peer's STOP_SENDING).
func (c *Conn) StreamWrite(id uint64, p []byte) (int, error) {
	st, err := c.stream(id)
	if err != nil {
		return 0, err
	}
	if st.send.Closed() {
		return 0, fmt.Errorf("write on stream %d: %w", id, ErrStreamState)
	}
	n := st.send.Write(p)
	if n < len(p) {
		st.wantWritable, st.writableAt = true, 1
	}
	if n > 0 {
		c.schedule(st)
	}
	return n, nil
}

// StreamLend lends room at the end of the stream's send buffer, up to want
// bytes, as slices appended to dst[:0]: the caller fills them (on any
// goroutine) and passes the count to StreamCommit, which must follow
// before the next StreamWrite or StreamLend; the bytes are then the
// stream's, with no copy. It lends nothing while there is room for fewer
// than atLeast bytes (at most Config.MinSendBufferBytes, which it always
// has once its bytes are acknowledged): EventStreamWritable follows once
// there is room for that many. Errors are StreamWrite's. See
// stream.SendStream.Lend.
func (c *Conn) StreamLend(id uint64, dst [][]byte, want, atLeast int) ([][]byte, error) {
	st, err := c.stream(id)
	if err != nil {
		return dst[:0], err
	}
	if st.send.Closed() {
		return dst[:0], fmt.Errorf("write on stream %d: %w", id, ErrStreamState)
	}
	atLeast = max(1, min(atLeast, want, c.flow.Config().MinSendBufferBytes))
	if st.send.Writable() >= atLeast {
		dst = st.send.Lend(dst, want)
	} else {
		dst = dst[:0]
	}
	if len(dst) == 0 {
		st.wantWritable, st.writableAt = true, atLeast
	}
	return dst, nil
}

// StreamCommit ends a StreamLend: the first n lent bytes become the
// stream's next bytes, as if written by StreamWrite, and the rest of the
// room is given back. It returns the bytes taken: n, or 0 with an error
// wrapping ErrStreamState when the stream was closed or reset meanwhile
// (the bytes are dropped), or wrapping ErrUnknownStream when it is gone.
func (c *Conn) StreamCommit(id uint64, n int) (int, error) {
	st, err := c.stream(id)
	if err != nil {
		return 0, err
	}
	k := st.send.Commit(n)
	if k > 0 {
		c.schedule(st)
	}
	c.maybeFinish(st) // its end may have been acknowledged while the room was lent
	if k < n {
		return k, fmt.Errorf("write on stream %d: %w", id, ErrStreamState)
	}
	return k, nil
}

// StreamCloseWrite ends the sending half after the bytes written so far
// (FIN). Errors wrap ErrUnknownStream.
func (c *Conn) StreamCloseWrite(id uint64) error {
	st, err := c.stream(id)
	if err != nil {
		return err
	}
	st.send.CloseWrite()
	c.schedule(st)
	return nil
}

// StreamRead copies in-order bytes into p. fin is true once every byte up
// to the peer's FIN has been read. It returns (0, false, nil) when nothing
// is readable yet; EventStreamReadable comes again once more arrives if
// this call returned fewer than len(p) bytes. After the peer reset the
// stream, errors wrap ErrStreamState; also ErrUnknownStream.
func (c *Conn) StreamRead(id uint64, p []byte) (n int, fin bool, err error) {
	st, err := c.stream(id)
	if err != nil {
		return 0, false, err
	}
	if code, ok := st.recv.ResetCode(); ok {
		st.appRecvDone = true
		c.maybeFinish(st)
		return 0, false, fmt.Errorf("read on stream %d: reset by the peer with code %d: %w", id, code, ErrStreamState)
	}
	n, fin = st.recv.Read(p)
	if n < len(p) {
		st.readSignalled = false
	}
	if n > 0 {
		c.creditDue(st)
	}
	if fin {
		st.appRecvDone = true
		c.maybeFinish(st)
	}
	return n, fin, nil
}

// creditDue marks st's and the connection's credit for a check after
// bytes of st were read (StreamRead, or into a buffer StreamReadInto lent).
func (c *Conn) creditDue(st *streamState) {
	st.checkCredit = true
	c.maxDataCheck = true
	c.queueCtrl(st)
}

// StreamReadInto lends p to stream id's receiving half for a read that
// waits for data (package driver's parked reads): while p has room,
// STREAM frames that arrive in order with nothing before them to read
// are copied straight into p, and EventStreamReadable reports them. It
// returns the bytes the previous lend took, which the caller must count
// as read. p nil ends the lending; the caller must end it before it uses
// p. An unknown stream took nothing.
func (c *Conn) StreamReadInto(id uint64, p []byte) (taken int) {
	st, err := c.stream(id)
	if err != nil {
		return 0
	}
	return st.recv.ReadInto(p)
}

// StreamReset abandons the sending half with code: unsent and
// unacknowledged bytes are dropped and RESET_STREAM is sent. Errors wrap
// ErrUnknownStream.
func (c *Conn) StreamReset(id uint64, code wire.ErrorCode) error {
	st, err := c.stream(id)
	if err != nil {
		return err
	}
	if final, ok := st.send.Reset(code); ok {
		st.needReset, st.resetCode, st.resetFinal = true, code, final
		c.queueCtrl(st)
	}
	return nil
}

// StreamStopSending tells the peer that the application will read no more
// from id (STOP_SENDING with code); buffered and later bytes are
// discarded. Errors wrap ErrUnknownStream.
func (c *Conn) StreamStopSending(id uint64, code wire.ErrorCode) error {
	st, err := c.stream(id)
	if err != nil {
		return err
	}
	st.appRecvDone = true
	if st.recv.StopSending(code) {
		st.needStop, st.stopCode = true, code
		c.queueCtrl(st)
	}
	c.maybeFinish(st)
	return nil
}

// StreamBuffered returns the bytes written to id and not yet acknowledged
// by the peer (0 for an unknown stream).
func (c *Conn) StreamBuffered(id uint64) int {
	if st := c.streams[id]; st != nil {
		return st.send.Buffered()
	}
	return 0
}

// StreamSendLimit says what holds back the bytes written to id
// (stream.SendFree for an unknown stream).
func (c *Conn) StreamSendLimit(id uint64) stream.SendLimit {
	if st := c.streams[id]; st != nil {
		return st.send.Limit()
	}
	return stream.SendFree
}

// StreamReadable returns the bytes of id received in order and not yet
// read (0 for an unknown stream).
func (c *Conn) StreamReadable(id uint64) int {
	if st := c.streams[id]; st != nil && st.recv != nil {
		return st.recv.Readable()
	}
	return 0
}

// MaxDatagramBytes returns the largest payload SendDatagram accepts now:
// what fits one packet of the path MTU confirmed so far (PathMTU), so it
// changes as the search goes.
func (c *Conn) MaxDatagramBytes() int {
	space := c.pmtu.size - wire.MaxHeaderLen - tagSize
	return wire.MaxDatagramDataLen(space, false)
}

// PathMTU returns the datagram size data packets use now (see
// PathMTUStats.PathMTUBytes).
func (c *Conn) PathMTU() int { return c.pmtu.size }

// SendDatagram queues p (copied) to be sent once as an unreliable DATAGRAM
// frame, ahead of stream data. It is dropped, with an error wrapping
// ErrDatagramQueueFull, when Config.MaxDatagramQueue datagrams already wait
// (the path is congestion-limited); errors also wrap ErrDatagramTooLarge,
// ErrNotEstablished or ErrClosed.
func (c *Conn) SendDatagram(p []byte) error {
	if err := c.usable(); err != nil {
		return err
	}
	if len(p) > c.MaxDatagramBytes() {
		return fmt.Errorf("%d bytes, at most %d: %w", len(p), c.MaxDatagramBytes(), ErrDatagramTooLarge)
	}
	if c.dgOut.size >= c.cfg.MaxDatagramQueue {
		c.stats.DatagramsDropped++
		return ErrDatagramQueueFull
	}
	c.dgOut.push(append(c.dgBuf(), p...))
	return nil
}

// dgBuf returns an empty datagram buffer, recycled when possible.
func (c *Conn) dgBuf() []byte {
	if n := len(c.dgFree); n > 0 {
		b := c.dgFree[n-1]
		c.dgFree = c.dgFree[:n-1]
		return b[:0]
	}
	return make([]byte, 0, c.cfg.MaxUDPPayloadBytes)
}
