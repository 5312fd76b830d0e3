package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// Tunnel is one tunnel connection to one peer, driven by its own
// goroutines (see the package doc). All methods are safe for concurrent
// use.
type Tunnel struct {
	cfg    Config
	log    *slog.Logger
	bc     bind.Conn
	client bool

	ctx    context.Context // cancelled by Close: stops the driver and the reader
	cancel context.CancelFunc

	reqs        chan request         // application → driver; unbuffered
	rxq         chan *rxBatch        // reader → driver: filled batches
	rxFree      chan *rxBatch        // driver → reader: empty batches
	accept      chan *IncomingStream // driver → AcceptStream; bounded backlog
	established chan struct{}        // closed at EventEstablished
	readerDone  chan struct{}        // closed when the reader goroutine returns
	sleeperDone chan struct{}        // closed when the sleeper goroutine returns (or never started)
	done        chan struct{}        // closed when the driver goroutine returns

	dgq    chan []byte // SendDatagram → driver: datagrams to send (Config.DatagramQueue)
	dgFree chan []byte // driver → SendDatagram: their buffers, for reuse
	// maxDatagram is the Conn's MaxDatagramBytes, which follows its path
	// MTU search: the driver goroutine stores it after every flush.
	maxDatagram atomic.Int64
	// dgBufCap is the capacity of datagram queue buffers: the largest
	// datagram the Conn's ceiling allows, so one buffer serves any size.
	dgBufCap int

	rxDropped    atomic.Uint64 // datagrams the reader dropped (driver behind)
	dgQueueDrops atomic.Uint64 // SendDatagram found dgq full
	// Datagrams the Conn refused, and the peer's nobody claimed (the
	// driver goroutine counts them).
	dgNotSent, dgUnclaimed atomic.Uint64
	rxHolds                atomic.Uint64 // reads held back for more datagrams (Config.RxHold)
	// rxHoldMax is the reader's longest hold (rxHoldCap of Config.RxHold
	// and the path's RTT), in ns: the driver goroutine updates it after a
	// received batch that changed it.
	rxHoldMax atomic.Int64
	// The reader's waits (readwait.go): the reader sets rxWaiting while
	// ReadBatch waits for the socket; while the driver sets rxWantWait, the
	// reader signals rxWait (capacity 1) as it starts to wait.
	rxWaiting, rxWantWait atomic.Bool
	rxWait                chan struct{}

	// Set by the driver goroutine before it closes done; read after done.
	err        error // why the tunnel closed (wraps ErrTunnelClosed)
	finalStats Stats

	closeOnce sync.Once
	closeErr  error

	// Driver-owned: touched only by the driver goroutine (state.go).
	d driverState
}

// Dial opens a tunnel to the server at cfg.RemoteAddr whose key is
// cfg.Tunnel.PeerPublicKey, and returns once the handshake completed. ctx
// bounds the handshake only (as in net.Dialer): cancelling it later does
// not close the tunnel; Close does. Without an answer the handshake fails
// after cfg.Tunnel.IdleTimeout with an error wrapping
// tunnel.ErrHandshakeTimeout. Errors also wrap ErrConfig, ctx.Err() or the
// socket's error.
func Dial(ctx context.Context, cfg Config) (*Tunnel, error) {
	return start(ctx, cfg, true)
}

// Listen serves one tunnel for one client: it opens a UDP socket on
// cfg.LocalAddr (or uses cfg.Bind), answers the first handshake from a
// key that cfg.Tunnel.AllowPeer (or cfg.Tunnel.PeerPublicKey) allows, and
// returns once that client has confirmed the session. The peer's address
// is learned from its packets and follows it when it changes (NAT
// rebinding). Until a client comes, the server state restarts after
// every cfg.Tunnel.IdleTimeout; ctx bounds the wait, and the socket is
// closed when Listen fails.
//
// One Listen serves one connection: when it closes, call Listen again to
// serve the next. For many peers on one socket, see Hub.
func Listen(ctx context.Context, cfg Config) (*Tunnel, error) {
	return start(ctx, cfg, false)
}

func start(ctx context.Context, cfg Config, client bool) (*Tunnel, error) {
	what := "listen"
	if client {
		what = "dial"
	}
	cfg, err := cfg.resolve(client)
	if err != nil {
		if cfg.Bind != nil {
			cfg.Bind.Close()
		}
		return nil, err
	}
	bc := cfg.Bind
	if bc == nil {
		opts := cfg.BindOptions
		if opts.Logger == nil {
			opts.Logger = cfg.Logger
		}
		bc, err = bind.Listen(cfg.Network, cfg.LocalAddr, opts)
		if err != nil {
			return nil, fmt.Errorf("driver: %s: opening the UDP socket: %w", what, err)
		}
	}
	var conn *tunnel.Conn
	now := monotime.Now()
	if client {
		conn, err = tunnel.NewClientConn(cfg.Tunnel, now)
	} else {
		conn, err = tunnel.NewServerConn(cfg.Tunnel, now)
	}
	if err != nil {
		bc.Close()
		return nil, fmt.Errorf("driver: %s: %w", what, err)
	}
	t := newTunnel(cfg, bc, conn, client)
	t.log.Info("tunnel starting", "local", bc.LocalAddr(), "remote", cfg.RemoteAddr, "client", client,
		"batch", bc.BatchSize())
	go t.readLoop()
	if t.d.sleepReq != nil {
		go t.sleepLoop()
	} else {
		close(t.sleeperDone)
	}
	go t.run()

	select {
	case <-t.established:
		return t, nil
	case <-t.done:
		return nil, fmt.Errorf("driver: %s: handshake failed: %w", what, t.err)
	case <-ctx.Done():
		t.Close()
		return nil, fmt.Errorf("driver: %s: waiting for the handshake: %w", what, ctx.Err())
	}
}

// newTunnel builds a Tunnel around an open socket and Conn.
func newTunnel(cfg Config, bc bind.Conn, conn *tunnel.Conn, client bool) *Tunnel {
	ctx, cancel := context.WithCancel(context.Background())
	t := &Tunnel{
		cfg:         cfg,
		log:         cfg.Logger,
		bc:          bc,
		client:      client,
		ctx:         ctx,
		cancel:      cancel,
		reqs:        make(chan request),
		rxq:         make(chan *rxBatch, cfg.RxBatches),
		rxFree:      make(chan *rxBatch, cfg.RxBatches),
		accept:      make(chan *IncomingStream, cfg.AcceptBacklog),
		established: make(chan struct{}),
		readerDone:  make(chan struct{}),
		sleeperDone: make(chan struct{}),
		done:        make(chan struct{}),
		dgq:         make(chan []byte, cfg.DatagramQueue),
		dgFree:      make(chan []byte, cfg.DatagramQueue),
		dgBufCap:    conn.Stats().PathMTUCeilingBytes,
		rxWait:      make(chan struct{}, 1),
	}
	t.maxDatagram.Store(int64(conn.MaxDatagramBytes()))
	t.rxHoldMax.Store(int64(cfg.RxHold))
	bufLen := rxBufLen(cfg)
	for range cfg.RxBatches {
		t.rxFree <- newRxBatch(bc.BatchSize(), bufLen)
	}
	t.d.init(t, conn, cfg)
	t.rxWaiting.Store(true) // until the reader's first batch
	if wn, ok := bc.(bind.WaitNotifier); ok {
		wn.OnReadWait(t.readerWaits) // before the reader starts
		t.d.waitHook = true
	}
	return t
}

// Close closes the tunnel: it sends the peer a CLOSE frame (the peer's
// streams fail with ErrTunnelClosed wrapping tunnel.ErrPeerClosed), wakes
// every blocked call on the tunnel and its streams (they return errors
// wrapping ErrTunnelClosed), stops the goroutines and closes the socket.
// It returns when all of that is done. Stream data not yet acknowledged
// is abandoned: for a graceful end, CloseWrite the streams and read them
// to io.EOF first. Closing twice returns nil.
func (t *Tunnel) Close() error {
	first := false
	t.closeOnce.Do(func() {
		first = true
		t.cancel()
		<-t.done
		t.closeErr = t.d.sockErr
	})
	if !first {
		<-t.done
		return nil
	}
	return t.closeErr
}

// Done is closed when the tunnel has closed (Close, the peer's CLOSE, an
// idle timeout) and its goroutines have stopped; Err then says why.
func (t *Tunnel) Done() <-chan struct{} { return t.done }

// Err returns nil while the tunnel runs, and afterwards why it closed (an
// error wrapping ErrTunnelClosed and the reason from package tunnel).
func (t *Tunnel) Err() error {
	select {
	case <-t.done:
		return t.err
	default:
		return nil
	}
}

// LocalAddr returns the socket's bound address.
func (t *Tunnel) LocalAddr() netip.AddrPort { return t.bc.LocalAddr() }

// call hands req to the driver and waits for its answer on reply. The
// driver answers every request it takes before taking another, so the
// wait is short; if the driver has stopped, the tunnel's error returns.
func (t *Tunnel) call(req request, reply chan result) result {
	req.reply = reply
	select {
	case t.reqs <- req:
		return <-reply
	case <-t.done:
		return result{err: t.err}
	}
}

// callRead passes a read to the driver and waits for its reply: at once,
// or when the driver has filled the parked read (parked.go). The read
// deadline and Close cancel a parked read; the reply then carries what it
// gathered, with os.ErrDeadlineExceeded or ErrStreamClosed when nothing.
func (t *Tunnel) callRead(req request, s *Stream) result {
	req.reply = s.rreply
	select {
	case t.reqs <- req:
	case <-t.done:
		return result{err: t.err}
	}
	var why error
	select {
	case r := <-s.rreply:
		return r
	case <-s.rdl.wait():
		why = os.ErrDeadlineExceeded
	case <-s.closed:
		why = ErrStreamClosed
	}
	// The driver replies to the parked read (perhaps it just did) before
	// it answers the cancel, or it has ended and replied at shutdown.
	t.call(request{op: opCancelRead, s: s}, s.rcancel)
	r := <-s.rreply
	if r.n == 0 && r.err == nil && !r.fin {
		r.err = why
	}
	return r
}

// Stats is a snapshot of a tunnel's counters.
type Stats struct {
	// Tunnel is the connection's snapshot (packets, bytes, RTT, BBR).
	Tunnel tunnel.Stats
	// Bind is the socket's (system calls, offloads, drops).
	Bind bind.Stats

	// DatagramsIn and DatagramsOut count datagrams handed to and taken
	// from the Conn; RxBatches and TxBatches the ReadBatch results and
	// WriteBatch calls that carried them.
	DatagramsIn, DatagramsOut uint64
	RxBatches, TxBatches      uint64
	// TimerWakeups counts firings of the driver's Go timer, SleepWakeups
	// those of the sleeper (deadlines under 2 ms, Linux); Loops counts
	// iterations of the driver loop (wakeups for any reason).
	TimerWakeups, SleepWakeups, Loops uint64
	// RxDropped counts datagrams the reader dropped because the driver
	// was RxBatches batches behind.
	RxDropped uint64
	// RxHolds counts reads the reader held back to let datagrams gather
	// (Config.RxHold).
	RxHolds uint64
	// TxErrors counts WriteBatch calls that failed (datagrams lost).
	TxErrors uint64
	// DatagramQueueDrops counts datagrams SendDatagram refused because
	// Config.DatagramQueue were waiting; DatagramsNotSent those the Conn
	// then refused; DatagramsUnclaimed the peer's datagrams dropped for want
	// of a Config.OnDatagram.
	DatagramQueueDrops, DatagramsNotSent, DatagramsUnclaimed uint64
	// AcceptOverflow counts peer streams refused because AcceptBacklog
	// streams already waited.
	AcceptOverflow uint64
	// RejectsSent counts REJECTs a server sent in answer to data for a
	// session it does not hold (a client of its life before a restart).
	// Rehandshakes counts new handshakes a client started on a REJECT
	// naming its session; the session is replaced only when one completes.
	RejectsSent, Rehandshakes uint64
	// ClientRestarts counts sessions a server replaced because its client
	// handshook again while established (a restarted near edge).
	ClientRestarts uint64
	// ResumesDeclined counts handshakes a server declined because the
	// client said it still holds the live session (after a forged REJECT).
	ResumesDeclined uint64
	// InitiationsRefused counts initiations a server refused while
	// established: replayed, forged, or from a key not allowed (the
	// session's own Conn counts those before it is established).
	InitiationsRefused uint64
	// Gate (server) counts what the handshake gate did with initiations
	// before any Diffie-Hellman: bad mac1, cookies sent under load, rate
	// limited, admitted.
	Gate tunnel.GateStats
	// KeysAge is how long ago the session in use was keyed (the last
	// handshake or rekey); 0 before the first.
	KeysAge time.Duration
	// PeerAddr is where datagrams go (the server learns it).
	PeerAddr netip.AddrPort
}

// Stats returns a snapshot of the tunnel's counters, also after it closed
// (then the last one).
func (t *Tunnel) Stats() Stats {
	var s Stats
	r := t.call(request{op: opStats, stats: &s}, make(chan result, 1))
	if r.err != nil {
		<-t.done
		return t.finalStats
	}
	return s
}

// SetRateCap holds the tunnel's sending rate (datagram payload) to at
// most capBps bits per second from now on; 0 lifts the cap. A hub that
// divides its link among its branches sets it (see package share and
// tunnel.Conn.SetRateCap).
func (t *Tunnel) SetRateCap(capBps uint64) error {
	return t.call(request{op: opRateCap, code: capBps}, make(chan result, 1)).err
}

// OpenStream opens a stream for a TCP flow from src to dst and waits for
// the peer's answer: the far edge connects to dst first. It returns the
// stream once the peer accepted; an *OpenError (wrapping ErrOpenRefused,
// ErrOpenUnreachable, ErrOpenTimedOut, ErrOpenNotAllowed, ...) when it
// answered otherwise; an error wrapping ctx.Err() when ctx ended first
// (the stream is then reset); tunnel.ErrStreamLimit when too many streams
// are open; ErrTunnelClosed when the tunnel closed.
func (t *Tunnel) OpenStream(ctx context.Context, src, dst netip.AddrPort) (*Stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("driver: open stream %v -> %v: %w", src, dst, err)
	}
	r := t.call(request{op: opOpen, src: src, dst: dst}, make(chan result, 1))
	if r.err != nil {
		return nil, fmt.Errorf("driver: open stream %v -> %v: %w", src, dst, r.err)
	}
	s := r.s
	select {
	case code := <-s.opened:
		if code != wire.OpenOK {
			s.stopTimers()
			return nil, &OpenError{Code: code, Src: src, Dst: dst}
		}
		return s, nil
	case <-ctx.Done():
		s.abort()
		return nil, fmt.Errorf("driver: open stream %v -> %v: waiting for the far edge's answer: %w", src, dst, ctx.Err())
	case <-t.done:
		s.stopTimers()
		return nil, fmt.Errorf("driver: open stream %v -> %v: %w", src, dst, t.err)
	}
}

// AcceptStream returns the next stream the peer opened, waiting for one
// until ctx ends or the tunnel closes. Answer it with Accept or Reject
// promptly: the peer's OpenStream waits for the answer. At most
// Config.AcceptBacklog streams wait here; the peer's further opens are
// refused with wire.OpenResourceLimit.
func (t *Tunnel) AcceptStream(ctx context.Context) (*IncomingStream, error) {
	select {
	case in := <-t.accept:
		return in, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("driver: accept stream: %w", ctx.Err())
	case <-t.done:
		return nil, fmt.Errorf("driver: accept stream: %w", t.err)
	}
}

// isClosedConnErr reports whether err is the Conn's "not usable" error.
func isClosedConnErr(err error) bool {
	return errors.Is(err, tunnel.ErrClosed) || errors.Is(err, tunnel.ErrNotEstablished)
}

// rxBufLen is the size of each receive buffer: this tunnel's
// MaxUDPPayloadBytes, but never less than tunnel.DefaultMaxUDPPayloadBytes,
// so a peer sized for IPv4 is heard by an edge that sends smaller packets
// (an IPv6 peer's, see tunnel.MaxUDPPayloadBytesFor).
func rxBufLen(cfg Config) int {
	return max(cfg.Tunnel.MaxUDPPayloadBytes, tunnel.DefaultMaxUDPPayloadBytes)
}
