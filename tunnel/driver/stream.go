package driver

import (
	"errors"
	"fmt"
	"github.com/wanopt/wanopt/tunnel/stream"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanopt/wanopt/tunnel/wire"
)

// Stream is one reliable, ordered byte stream of a tunnel, carrying one
// intercepted flow. It implements io.Reader, io.Writer and io.Closer, with
// CloseWrite for half-close and net.Conn's deadline methods.
//
// Concurrency: one Read and one Write may run at the same time (the two
// copy loops of a proxy); concurrent Reads (or Writes) are serialised.
// CloseWrite, Close and the deadline setters may be called from any
// goroutine at any time; Close wakes a blocked Read or Write.
type Stream struct {
	t        *Tunnel
	id       uint64
	proto    wire.Proto
	src, dst netip.AddrPort

	writable chan struct{}      // capacity 1: EventStreamWritable (or stop-sending/closed)
	opened   chan wire.OpenCode // capacity 1: the peer's OPEN_RESULT (streams we open)

	closeOnce sync.Once
	closed    chan struct{} // closed by Close: wakes blocked Read and Write

	rmu     sync.Mutex
	rreply  chan result // a read's reply, sent when the driver has satisfied it
	rcancel chan result // the reply to opCancelRead
	rerr    error       // sticky read error (io.EOF, reset); guarded by rmu
	rdl     deadline

	wmu     sync.Mutex
	wreply  chan result
	werr    error // sticky write error; guarded by wmu
	wdl     deadline
	lending bool     // a Lend's room is outstanding; guarded by wmu
	lendBuf [][]byte // the slices a Lend returns, reused

	// peerReset is set by the driver (markPeerReset) once the peer reset
	// the stream or its session ended; atomic for WatchReset. watch is
	// WatchReset's f until the reset calls it or the watch stops.
	peerReset atomic.Bool
	watch     atomic.Pointer[func()]

	// d is the driver's view; only the driver goroutine touches it.
	d struct {
		gone      bool // the Conn forgot the stream (or refused/rejected it)
		closed    bool // Close (or an abort) was handled
		finQueued bool // CloseWrite was handled
		resetCode wire.ErrorCode
		answered  bool // opened got its code (streams we open)
		stopped   bool // the peer sent STOP_SENDING
		stopCode  wire.ErrorCode
		park      parkedRead // a Read waiting for data, if park.active (parked.go)
	}
}

// A Stream can stand in for a TCP connection.
var (
	_ net.Conn           = (*Stream)(nil)
	_ io.ReadWriteCloser = (*Stream)(nil)
)

func newStream(t *Tunnel, id uint64, proto wire.Proto, src, dst netip.AddrPort) *Stream {
	return &Stream{
		t:        t,
		id:       id,
		proto:    proto,
		src:      src,
		dst:      dst,
		writable: make(chan struct{}, 1),
		closed:   make(chan struct{}),
		rreply:   make(chan result, 1),
		rcancel:  make(chan result, 1),
		wreply:   make(chan result, 1),
	}
}

// ID returns the stream's tunnel ID (even: opened by the client).
func (s *Stream) ID() uint64 { return s.id }

// Src returns the flow's original source address (the TCP client).
func (s *Stream) Src() netip.AddrPort { return s.src }

// Dst returns the flow's original destination address (the TCP server).
func (s *Stream) Dst() netip.AddrPort { return s.dst }

// Proto returns the flow's transport protocol (wire.ProtoTCP).
func (s *Stream) Proto() wire.Proto { return s.proto }

// LocalAddr returns the flow's source as a *net.TCPAddr (for code that
// expects a net.Conn).
func (s *Stream) LocalAddr() net.Addr { return net.TCPAddrFromAddrPort(s.src) }

// RemoteAddr returns the flow's destination as a *net.TCPAddr.
func (s *Stream) RemoteAddr() net.Addr { return net.TCPAddrFromAddrPort(s.dst) }

// Read reads up to len(p) bytes, blocking until some are available, the
// peer's FIN (io.EOF, after every byte), a reset (a *StreamError), the
// read deadline (os.ErrDeadlineExceeded; the stream stays usable), Close
// (ErrStreamClosed) or the tunnel's end (ErrTunnelClosed). p is only used
// during the call.
func (s *Stream) Read(p []byte) (int, error) { return s.ReadGather(p, 1, 0) }

// ReadGather is Read for a proxy that forwards a bulk flow in large
// writes: once the first bytes are there, it keeps filling p until it
// holds atLeast bytes (at most len(p)), wait has passed since those first
// bytes, the stream fell quiet, or it ends (whatever came is returned;
// the end comes with the next call). The first byte is not delayed, and
// bytes after a pause longer than wait are returned at once. A passed
// read deadline returns what was gathered. The driver may stretch wait
// (parked.go) and fills p as data arrives, so the caller wakes once per
// gathered buffer.
func (s *Stream) ReadGather(p []byte, atLeast int, wait time.Duration) (int, error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if s.rerr != nil {
		return 0, s.rerr
	}
	if len(p) == 0 {
		return 0, nil
	}
	if err := s.ready(&s.rdl); err != nil {
		return 0, err
	}
	atLeast = min(max(atLeast, 1), len(p))
	r := s.t.callRead(request{op: opRead, s: s, buf: p, min: atLeast, wait: wait}, s)
	switch {
	case r.n == 0 && errors.Is(r.err, os.ErrDeadlineExceeded):
		return 0, r.err // not sticky: the stream stays usable
	case r.err != nil:
		s.rerr = r.err
		if r.n > 0 {
			return r.n, nil
		}
		return 0, r.err
	case r.fin:
		s.rerr = io.EOF
		if r.n > 0 {
			return r.n, nil
		}
		return 0, io.EOF
	}
	return r.n, nil
}

// Write writes all of p, blocking while the stream's send buffer is full.
// It returns early with the count written and the error on the write
// deadline (os.ErrDeadlineExceeded), after CloseWrite (ErrWriteClosed),
// when the peer stopped reading (a *StreamError), on Close
// (ErrStreamClosed) or the tunnel's end (ErrTunnelClosed). On a stream we
// opened, bytes are held until the peer accepted it. p is only used
// during the call.
func (s *Stream) Write(p []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.werr != nil {
		return 0, s.werr
	}
	if s.lending {
		return 0, fmt.Errorf("driver: write on stream %d while its room is lent (Lend)", s.id)
	}
	total := 0
	for len(p) > 0 {
		if err := s.ready(&s.wdl); err != nil {
			return total, err
		}
		r := s.t.call(request{op: opWrite, s: s, buf: p}, s.wreply)
		total += r.n
		p = p[r.n:]
		if r.err != nil {
			s.werr = r.err
			return total, r.err
		}
		if len(p) == 0 {
			break
		}
		s.waitWritable()
	}
	return total, nil
}

// waitWritable waits, the buffer being full, for EventStreamWritable, the
// write deadline, Close or the tunnel's end.
func (s *Stream) waitWritable() {
	select {
	case <-s.writable:
	case <-s.wdl.wait():
	case <-s.closed:
	case <-s.t.done:
	}
}

// Lend lends room in the stream's send buffer, so that a copy can read
// straight into it instead of handing bytes to Write, which copies them.
// It first commits the first filled bytes of the room the previous Lend
// returned (0 when none was filled or there was none), then lends room
// for up to want more bytes (none when want is 0) as one or more slices,
// the caller's to fill until the next Lend. It blocks until there is
// room for half of want (or MinSendBufferBytes, if less), so a copy from
// a socket reads large pieces. It fails as Write does; a failed Lend
// lends nothing and the bytes it was to commit are lost. Every Lend that
// returned room must be followed by another (want 0 at the end of the
// copy): until then the room is held against the tunnel's memory
// budget. The commit alone never blocks. Write fails while room is lent.
func (s *Stream) Lend(filled, want int) ([][]byte, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	commit := -1
	if s.lending {
		commit, s.lending = filled, false
	} else if filled > 0 {
		return nil, fmt.Errorf("driver: stream %d: %d bytes committed with nothing lent", s.id, filled)
	}
	for {
		ask := want
		if s.werr != nil || s.ready(&s.wdl) != nil {
			ask = 0
		}
		if commit < 0 && ask == 0 {
			break
		}
		r := s.t.call(request{op: opLend, s: s, commit: commit, min: ask, bufs: s.lendBuf[:0]}, s.wreply)
		commit = -1
		if r.err != nil {
			if s.werr == nil {
				s.werr = r.err
			}
			return nil, r.err
		}
		if len(r.bufs) > 0 {
			s.lendBuf, s.lending = r.bufs, true
			return r.bufs, nil
		}
		if ask == 0 {
			break
		}
		s.waitWritable()
	}
	if s.werr != nil {
		return nil, s.werr
	}
	if want > 0 {
		return nil, s.ready(&s.wdl)
	}
	return nil, nil
}

// ready returns the error that ends a Read or Write before it asks the
// driver: Close or a passed deadline.
func (s *Stream) ready(dl *deadline) error {
	select {
	case <-s.closed:
		return ErrStreamClosed
	default:
	}
	select {
	case <-dl.wait():
		return os.ErrDeadlineExceeded
	default:
	}
	return nil
}

// CloseWrite ends the sending half after the bytes written so far: the
// peer reads them and then io.EOF (TCP half-close). Reading goes on. A
// Write in progress may fail with ErrWriteClosed. Calling it again, or
// after Close, does nothing; after the tunnel closed it returns an error
// wrapping ErrTunnelClosed.
func (s *Stream) CloseWrite() error {
	r := s.t.call(request{op: opCloseWrite, s: s}, make(chan result, 1))
	return r.err
}

// Close closes both halves and wakes blocked Reads and Writes (they
// return ErrStreamClosed). The bytes written so far are still delivered,
// followed by a FIN, unless data from the peer was waiting unread: then
// the stream is reset, as TCP sends RST in that case. The peer is asked
// to stop sending; what it sends later is discarded. Closing twice, or
// after the tunnel closed, returns nil.
func (s *Stream) Close() error {
	return s.shut(opClose, 0)
}

// Abort is Reset(CodeTCPReset): a relayed TCP flow's RST carried across
// the tunnel, so the peer's relay resets its end too (a flow.Aborter).
func (s *Stream) Abort() error { return s.Reset(CodeTCPReset) }

// SendLimit says what holds back the bytes written to the stream now: the
// peer's window, the tunnel's congestion control, the memory budget, or
// nothing (stream.SendFree, also once the tunnel is closed).
func (s *Stream) SendLimit() stream.SendLimit {
	r := s.t.call(request{op: opSendLimit, s: s}, make(chan result, 1))
	if r.err != nil {
		return stream.SendFree
	}
	return stream.SendLimit(r.n)
}

// WatchReset calls f, on a goroutine of its own, once the peer has reset
// the stream (its RESET_STREAM, or a new session with a restarted peer),
// even while no Read waits on it (flow.ResetWatcher). The peer's graceful
// close, and STOP_SENDING alone, are not resets.
func (s *Stream) WatchReset(f func()) (stop func()) {
	s.watch.Store(&f)
	if s.peerReset.Load() {
		s.fireWatch()
	}
	return func() { s.watch.CompareAndSwap(&f, nil) }
}

// markPeerReset records, on the driver goroutine, that the peer reset the
// stream with code (or its session ended), and tells a WatchReset.
func (s *Stream) markPeerReset(code wire.ErrorCode) {
	s.d.resetCode = code
	s.peerReset.Store(true)
	s.fireWatch()
}

// fireWatch calls WatchReset's f if it has not been called or stopped.
func (s *Stream) fireWatch() {
	if f := s.watch.Swap(nil); f != nil {
		go (*f)()
	}
}

// Reset aborts both halves at once, as a TCP RST does: bytes not yet
// delivered are dropped, and the peer gets RESET_STREAM and STOP_SENDING
// with code (its Read fails at once with a *StreamError holding code, its
// Write with one whose StopSending is set). Blocked Reads and Writes here
// return ErrStreamClosed. After Close, a Reset, or the tunnel's end it
// does nothing and returns nil.
func (s *Stream) Reset(code wire.ErrorCode) error {
	return s.shut(opAbort, code)
}

// abort resets both halves (OpenStream gave up waiting).
func (s *Stream) abort() { _ = s.shut(opAbort, CodeNoError) }

func (s *Stream) shut(op opKind, code wire.ErrorCode) error {
	first := false
	s.closeOnce.Do(func() {
		first = true
		close(s.closed)
	})
	if !first {
		return nil
	}
	s.stopTimers()
	s.t.call(request{op: op, s: s, code: uint64(code)}, make(chan result, 1))
	return nil
}

// stopTimers releases the deadline timers.
func (s *Stream) stopTimers() {
	s.rdl.stop()
	s.wdl.stop()
}

// SetDeadline sets the read and write deadlines (net.Conn semantics): a
// blocked or later Read or Write past t fails with
// os.ErrDeadlineExceeded. The zero time means no deadline.
func (s *Stream) SetDeadline(t time.Time) error {
	s.rdl.set(t)
	s.wdl.set(t)
	return nil
}

// SetReadDeadline sets the read deadline (see SetDeadline).
func (s *Stream) SetReadDeadline(t time.Time) error {
	s.rdl.set(t)
	return nil
}

// SetWriteDeadline sets the write deadline (see SetDeadline). A Write
// that times out may have written some bytes.
func (s *Stream) SetWriteDeadline(t time.Time) error {
	s.wdl.set(t)
	return nil
}

// IncomingStream is a stream the peer opened, waiting for this side's
// answer: connect to Dst first, then Accept (or Reject with the outcome).
type IncomingStream struct {
	s        *Stream
	answered atomic.Bool
}

// ID returns the stream's tunnel ID.
func (in *IncomingStream) ID() uint64 { return in.s.id }

// Src returns the flow's original source address (the TCP client).
func (in *IncomingStream) Src() netip.AddrPort { return in.s.src }

// Dst returns the flow's original destination address (the TCP server).
func (in *IncomingStream) Dst() netip.AddrPort { return in.s.dst }

// Proto returns the flow's transport protocol.
func (in *IncomingStream) Proto() wire.Proto { return in.s.proto }

// Accept answers wire.OpenOK and returns the stream; data may flow both
// ways. Errors wrap ErrAlreadyAnswered or ErrTunnelClosed.
func (in *IncomingStream) Accept() (*Stream, error) {
	if in.answered.Swap(true) {
		return nil, ErrAlreadyAnswered
	}
	r := in.s.t.call(request{op: opAccept, s: in.s}, make(chan result, 1))
	if r.err != nil {
		return nil, r.err
	}
	return in.s, nil
}

// Reject answers code (not wire.OpenOK: wire.OpenRefused,
// wire.OpenUnreachable, wire.OpenTimedOut, wire.OpenNotAllowed, ...); the
// peer's OpenStream fails with the matching *OpenError. Errors wrap
// ErrAlreadyAnswered or ErrConfig (code is OpenOK); after the tunnel
// closed, Reject returns nil.
func (in *IncomingStream) Reject(code wire.OpenCode) error {
	if code == wire.OpenOK {
		return fmt.Errorf("%w: Reject needs a failure code, not wire.OpenOK; call Accept to accept", ErrConfig)
	}
	if in.answered.Swap(true) {
		return ErrAlreadyAnswered
	}
	in.s.t.call(request{op: opReject, s: in.s, code: uint64(code)}, make(chan result, 1))
	return nil
}

// deadline is a net.Conn-style deadline: a channel closed when it
// passes, re-armed by set. Its timer runs a short function, not a
// goroutine of ours.
type deadline struct {
	mu    sync.Mutex
	ch    chan struct{}
	fired bool
	gen   uint64
	timer *time.Timer
}

// set arms the deadline for t (zero: none), replacing the previous one.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cancelLocked()
	if d.ch == nil || d.fired {
		d.ch = make(chan struct{})
		d.fired = false
	}
	if t.IsZero() {
		return
	}
	dur := time.Until(t)
	if dur <= 0 {
		close(d.ch)
		d.fired = true
		return
	}
	gen := d.gen
	d.timer = time.AfterFunc(dur, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.gen == gen && !d.fired {
			close(d.ch)
			d.fired = true
		}
	})
}

// wait returns a channel closed once the deadline has passed.
func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ch == nil {
		d.ch = make(chan struct{})
	}
	return d.ch
}

// stop cancels the timer (the stream is done).
func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cancelLocked()
}

// cancelLocked stops the pending timer and makes a callback already under
// way a no-op (its generation no longer matches). d.mu must be held.
func (d *deadline) cancelLocked() {
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}
