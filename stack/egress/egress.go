// Package egress is the far edge's end of the tunnel: it accepts the
// streams the near edge opens for intercepted flows, checks each
// destination against a Policy, connects to it with a Dialer and answers
// the near edge with the outcome (which the near edge turns into
// what its client sees: a completed handshake, a RST or silence). Then it
// copies both ways with half-close.
//
// # Policy
//
// The egress connects only to destinations its Policy allows; the zero
// Policy allows nothing, so a misconfigured edge refuses everything rather
// than becoming an open proxy. Denied flows are answered
// wire.OpenNotAllowed.
//
// # Outcomes
//
//	connect result                      answer
//	connected                           Accept
//	ECONNREFUSED, ECONNRESET (a RST)    OpenRefused
//	EHOSTUNREACH, ENETUNREACH, ...      OpenUnreachable
//	no answer within DialTimeout        OpenTimedOut
//	MaxFlows flows already open         OpenResourceLimit
//	not TCP                             OpenUnsupported
//	anything else                       OpenError
//
// # Ends of a flow
//
// Each direction ends independently: the near edge's FIN (io.EOF from the
// stream) becomes CloseWrite on the server socket, the server's FIN becomes
// CloseWrite on the stream. Resets are carried end to end: a server reset
// (ECONNRESET, or any other socket error) resets the stream
// (driver.CodeTCPReset), so the near edge's read fails at once and it
// resets its client; the near edge resetting the stream (its client's RST),
// stopping to read, or the stream failing resets the server socket
// (SO_LINGER 0, a RST).
package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wanopt/wanopt/internal/meter"
	"github.com/wanopt/wanopt/tunnel/driver"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// Conn is a connection to a destination.
type Conn interface {
	io.ReadWriteCloser
	// CloseWrite sends a FIN; the destination may go on sending.
	CloseWrite() error
}

// Dialer connects a flow's destination dst. src is the client's address: a
// transparent dialer connects from it, a kernel one ignores it.
// Errors wrapping syscall errnos (ECONNREFUSED, EHOSTUNREACH, ETIMEDOUT…)
// choose the answer the near edge gets. A Conn with an Abort method is
// reset with it; a *net.TCPConn with SO_LINGER 0.
type Dialer interface {
	Connect(ctx context.Context, src, dst netip.AddrPort) (Conn, error)
}

// KernelDialer connects from this host's own address with a kernel TCP
// socket.
type KernelDialer struct{ net.Dialer }

// Connect implements Dialer; src is not used.
func (d *KernelDialer) Connect(ctx context.Context, _, dst netip.AddrPort) (Conn, error) {
	c, err := d.DialContext(ctx, "tcp", dst.String())
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// Defaults for Options.
const (
	// DefaultDialTimeout is about how long a client's kernel retries its
	// SYN before the application usually gives up on a silent server
	// (1 s, 3 s and 7 s into the attempt on Linux).
	DefaultDialTimeout = 10 * time.Second
	// DefaultMaxFlows bounds the flows open at once.
	DefaultMaxFlows = 4096
	// DefaultCopyBuffer is each direction's copy buffer.
	DefaultCopyBuffer = 64 << 10
)

// Options configure an Egress. Zero fields take the defaults.
type Options struct {
	// DialTimeout bounds each connection attempt to a destination.
	DialTimeout time.Duration
	// MaxFlows bounds the flows being connected or relayed at once, over
	// all Serve calls; more are answered wire.OpenResourceLimit.
	MaxFlows int
	// CopyBuffer is the size of each direction's copy buffer.
	CopyBuffer int
	// Logger receives events (per flow at Debug); nil discards them.
	Logger *slog.Logger
}

// Stats counts flows since New. Bytes count completed writes.
type Stats struct {
	// Streams is the number of streams the near edge opened.
	Streams uint64
	// Outcomes.
	Connected, NotAllowed, Refused, Unreachable, TimedOut, Overloaded, Failed uint64
	// Active is the number of flows being connected or relayed now.
	Active int64
	// BytesUp: near edge → server; BytesDown: server → near edge.
	BytesUp, BytesDown uint64
}

// FlowInfo is a snapshot of one relayed flow.
type FlowInfo struct {
	Src, Dst           netip.AddrPort
	BytesUp, BytesDown uint64
	// RateUpBps and RateDownBps are the rates over the last interval of
	// SampleRates, in bits per second.
	RateUpBps, RateDownBps uint64
	Started                time.Time
}

// Egress serves the streams of one or more tunnels. Its methods are safe
// for concurrent use.
type Egress struct {
	policy Policy
	dialer Dialer
	opts   Options
	log    *slog.Logger
	sem    chan struct{}
	bufs   sync.Pool

	streams, connected, notAllowed, refused, unreachable, timedOut, overloaded, failed atomic.Uint64
	active                                                                             atomic.Int64
	bytesUp, bytesDown                                                                 atomic.Uint64

	mu    sync.Mutex
	flows map[*flow]struct{}
}

type flow struct {
	src, dst         netip.AddrPort
	started          time.Time
	up, down         atomic.Uint64
	rateUp, rateDown meter.Rate
}

// New returns an Egress that connects to what policy allows with dialer
// (nil: a KernelDialer).
func New(policy Policy, dialer Dialer, opts Options) *Egress {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.MaxFlows <= 0 {
		opts.MaxFlows = DefaultMaxFlows
	}
	if opts.CopyBuffer <= 0 {
		opts.CopyBuffer = DefaultCopyBuffer
	}
	if dialer == nil {
		dialer = &KernelDialer{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Egress{
		policy: policy,
		dialer: dialer,
		opts:   opts,
		log:    log,
		sem:    make(chan struct{}, opts.MaxFlows),
		flows:  make(map[*flow]struct{}),
	}
	e.bufs.New = func() any { b := make([]byte, opts.CopyBuffer); return &b }
	return e
}

// Serve is New(policy, dialer, Options{}).Serve(ctx, t).
func Serve(ctx context.Context, t *driver.Tunnel, policy Policy, dialer Dialer) error {
	return New(policy, dialer, Options{}).Serve(ctx, t)
}

// Serve accepts t's incoming streams until ctx ends or t closes, and
// returns once every flow it started has ended. When ctx ends, open flows
// are torn down (server sockets reset, streams closed) and Serve returns
// nil; when the tunnel closes it returns t's error (wrapping
// driver.ErrTunnelClosed), after its flows failed with it.
func (e *Egress) Serve(ctx context.Context, t *driver.Tunnel) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: flows end promptly
	for {
		in, err := t.AcceptStream(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("egress: accept flows from the tunnel: %w", err)
		}
		e.streams.Add(1)
		select {
		case e.sem <- struct{}{}:
		default:
			e.overloaded.Add(1)
			e.log.Warn("egress: too many flows; refusing", "max_flows", e.opts.MaxFlows, "dst", in.Dst())
			_ = in.Reject(wire.OpenResourceLimit)
			continue
		}
		e.active.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-e.sem; e.active.Add(-1) }()
			e.handle(ctx, in)
		}()
	}
}

// handle connects one incoming stream's destination and relays the flow.
func (e *Egress) handle(ctx context.Context, in *driver.IncomingStream) {
	src, dst := in.Src(), in.Dst()
	log := e.log.With("src", src, "dst", dst)
	if in.Proto() != wire.ProtoTCP {
		e.failed.Add(1)
		_ = in.Reject(wire.OpenUnsupported)
		return
	}
	if !e.policy.Allows(dst) {
		e.notAllowed.Add(1)
		log.Debug("egress: destination not allowed by policy")
		_ = in.Reject(wire.OpenNotAllowed)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, e.opts.DialTimeout)
	c, err := e.dialer.Connect(dctx, src, dst)
	cancel()
	if err != nil {
		code := e.openCode(err)
		log.Debug("egress: connect failed", "answer", code, "err", err)
		_ = in.Reject(code)
		return
	}
	s, err := in.Accept()
	if err != nil {
		log.Debug("egress: accept stream failed", "err", err)
		resetConn(c)
		return
	}
	e.connected.Add(1)
	f := &flow{src: src, dst: dst, started: time.Now()}
	e.mu.Lock()
	e.flows[f] = struct{}{}
	e.mu.Unlock()
	e.relay(ctx, f, s, c, log)
	e.mu.Lock()
	delete(e.flows, f)
	e.mu.Unlock()
	log.Debug("egress: flow closed", "up", f.up.Load(), "down", f.down.Load())
}

// openCode maps a connect error to the answer the near edge gets, and
// counts it.
func (e *Egress) openCode(err error) wire.OpenCode {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		e.refused.Add(1)
		return wire.OpenRefused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.EHOSTDOWN), errors.Is(err, syscall.ENETDOWN):
		e.unreachable.Add(1)
		return wire.OpenUnreachable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT),
		errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		e.timedOut.Add(1)
		return wire.OpenTimedOut
	default:
		e.failed.Add(1)
		return wire.OpenError
	}
}

// relay copies both ways until both directions ended; see the package doc
// for how each end is passed on. ctx ending tears the flow down.
func (e *Egress) relay(ctx context.Context, f *flow, s *driver.Stream, c Conn, log *slog.Logger) {
	stop := context.AfterFunc(ctx, func() {
		resetConn(c)
		s.Reset(driver.CodeTCPReset)
	})
	defer stop()
	// resetBoth ends the flow as a RST both ways. The stream is reset
	// first: closing the socket wakes the other direction, whose own
	// teardown must not reach the stream before the reset.
	resetBoth := func() {
		s.Reset(driver.CodeTCPReset)
		resetConn(c)
	}

	upDone := make(chan struct{})
	go func() { // near edge → server
		defer close(upDone)
		rerr, werr := e.copy(c, s, &f.up, &e.bytesUp)
		switch {
		case werr != nil: // server reset or failed
			log.Debug("egress: server write failed; resetting stream", "err", werr)
			resetBoth()
		case rerr == io.EOF: // near edge's FIN
			if err := c.CloseWrite(); err != nil {
				log.Debug("egress: server close-write failed; resetting stream", "err", err)
				resetBoth()
			}
		default: // stream reset by the near edge (its client's RST), failed or closed
			log.Debug("egress: stream read ended; resetting server", "err", rerr)
			resetBoth()
		}
	}()

	rerr, werr := e.copy(s, c, &f.down, &e.bytesDown) // server → near edge
	switch {
	case werr != nil: // near edge stopped reading (client reset) or stream failed
		log.Debug("egress: stream write failed; resetting server", "err", werr)
		resetBoth()
	case rerr == io.EOF: // server's FIN
		if err := s.CloseWrite(); err != nil {
			log.Debug("egress: stream close-write failed", "err", err)
			resetBoth()
		}
	default: // server reset or failed
		log.Debug("egress: server read failed; resetting stream", "err", rerr)
		resetBoth()
	}
	<-upDone
	c.Close()
	s.Close()
}

// copy copies src to dst until src ends, counting bytes in n and total. It
// returns src's error (io.EOF at a clean end) or dst's error.
func (e *Egress) copy(dst io.Writer, src io.Reader, n, total *atomic.Uint64) (rerr, werr error) {
	bp := e.bufs.Get().(*[]byte)
	defer e.bufs.Put(bp)
	buf := *bp
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return nil, werr
			}
			n.Add(uint64(k))
			total.Add(uint64(k))
		}
		if err != nil {
			return err, nil
		}
	}
}

// resetConn closes c with a RST.
func resetConn(c Conn) {
	switch c := c.(type) {
	case interface{ Abort() error }:
		_ = c.Abort()
		return
	case *net.TCPConn:
		_ = c.SetLinger(0)
	}
	_ = c.Close()
}

// Stats returns a snapshot of the counters.
func (e *Egress) Stats() Stats {
	return Stats{
		Streams:     e.streams.Load(),
		Connected:   e.connected.Load(),
		NotAllowed:  e.notAllowed.Load(),
		Refused:     e.refused.Load(),
		Unreachable: e.unreachable.Load(),
		TimedOut:    e.timedOut.Load(),
		Overloaded:  e.overloaded.Load(),
		Failed:      e.failed.Load(),
		Active:      e.active.Load(),
		BytesUp:     e.bytesUp.Load(),
		BytesDown:   e.bytesDown.Load(),
	}
}

// SampleRates updates the flows' current rates: the owner calls it at a
// steady interval (every second) with the time since the previous call.
// Calls must not overlap.
func (e *Egress) SampleRates(interval time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for f := range e.flows {
		f.rateUp.Sample(f.up.Load(), interval)
		f.rateDown.Sample(f.down.Load(), interval)
	}
}

// Flows returns a snapshot of the flows being relayed, oldest first.
func (e *Egress) Flows() []FlowInfo {
	e.mu.Lock()
	out := make([]FlowInfo, 0, len(e.flows))
	for f := range e.flows {
		out = append(out, FlowInfo{Src: f.src, Dst: f.dst, BytesUp: f.up.Load(), BytesDown: f.down.Load(),
			RateUpBps: f.rateUp.Bps(), RateDownBps: f.rateDown.Bps(), Started: f.started})
	}
	e.mu.Unlock()
	slices.SortFunc(out, func(a, b FlowInfo) int { return a.Started.Compare(b.Started) })
	return out
}
