// Package egress is the far edge's end of the tunnel: it accepts the
// streams the near edge opens for intercepted flows, checks each
// destination against a Policy, connects to it with a Dialer and answers
// the near edge with the outcome (which its client sees as a completed
// handshake, a RST or silence). Then it copies both ways with half-close.
//
// The zero Policy allows nothing, so a misconfigured edge refuses
// everything rather than becoming an open proxy.
//
// # Outcomes
//
//	connect result                      answer
//	connected                           Accept
//	ECONNREFUSED, ECONNRESET (a RST)    OpenRefused
//	EHOSTUNREACH, ENETUNREACH, ...      OpenUnreachable
//	no answer within DialTimeout        OpenTimedOut
//	flow.ErrX from the Dialer           the matching answer
//	MaxFlows flows already open         OpenResourceLimit
//	not TCP                             OpenUnsupported
//	anything else                       OpenError
//
// # Ends of a flow
//
// flow.Relay copies both ways: each direction's FIN is passed on by itself,
// and a reset or failure on either side resets both (the stream with
// driver.CodeTCPReset, so the near edge resets its client; the server's
// socket with a RST).
package egress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/internal/meter"
	"github.com/wanopt/wanopt/tunnel/driver"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// KernelDialer connects from this host's own address with a kernel TCP
// socket. It implements flow.Dialer; src is not used.
type KernelDialer struct {
	net.Dialer
	// ReceiveBufferBytes is the receive buffer asked for on each socket
	// before it connects (see DefaultReceiveBufferBytes); 0 takes the
	// default, a negative value leaves the kernel's auto-tuning alone.
	ReceiveBufferBytes int
}

// DefaultReceiveBufferBytes is the receive buffer of a connection to a
// server. A LAN server sends a response faster than the relay moves it
// into the stream, and the kernel sizes an auto-tuned buffer from what the
// reader took in the last (microsecond) round trip, so the far edge
// advertised zero windows at the start of large files while the tunnel had
// room (`wanbench f5`). A fixed buffer takes the burst whole; the kernel
// allocates it only as data waits. It needs CAP_NET_ADMIN
// (SO_RCVBUFFORCE): without it net.core.rmem_max would cap it below what
// auto-tuning reaches, so the socket keeps auto-tuning.
const DefaultReceiveBufferBytes = 4 << 20

// Dial connects dst.
func (d *KernelDialer) Dial(ctx context.Context, _, dst netip.AddrPort) (flow.Conn, error) {
	// Unmapped: the address the policy checked last is the one connected.
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	nd := d.Dialer
	if size := cmp.Or(d.ReceiveBufferBytes, DefaultReceiveBufferBytes); size > 0 {
		control := nd.Control
		nd.Control = func(network, address string, rc syscall.RawConn) error {
			if control != nil {
				if err := control(network, address, rc); err != nil {
					return err
				}
			}
			// Best effort: a socket left auto-tuning still works.
			return rc.Control(func(fd uintptr) { forceReceiveBuffer(int(fd), size) })
		}
	}
	c, err := nd.DialContext(ctx, "tcp", dst.String())
	if err != nil {
		return nil, err
	}
	return wrapRaw(c.(*net.TCPConn)), nil
}

// Defaults for Options.
const (
	// DefaultDialTimeout is about how long a client's kernel retries its
	// SYN (at 1, 3 and 7 s on Linux) before the application gives up.
	DefaultDialTimeout = 10 * time.Second
	// DefaultMaxFlows bounds the flows open at once.
	DefaultMaxFlows = 4096
)

// Options configure an Egress. Zero fields take the defaults.
type Options struct {
	// DialTimeout bounds each connection attempt to a destination.
	DialTimeout time.Duration
	// MaxFlows bounds the flows being connected or relayed at once, over
	// all Serve calls; more are answered wire.OpenResourceLimit.
	MaxFlows int
	// IdleTimeout resets a flow that moved no byte either way for this
	// long (see flow.RelayOptions.IdleTimeout); 0: never.
	IdleTimeout time.Duration
	// Budget, if set, holds the flows' memory: each reserves its floor
	// before the destination is dialled (answered wire.OpenResourceLimit
	// when it cannot) and its relay grows its buffers only with a grant
	// (see flow.Budget).
	Budget *flow.Budget
	// Logger receives events (per flow at Debug); nil discards them.
	Logger *slog.Logger
}

// Stats counts flows since New. Bytes count completed writes.
type Stats struct {
	// Streams is the number of streams the near edge opened.
	Streams uint64
	// Outcomes. NotAllowed: no rule allows the destination; Denied: a
	// --deny rule or the special-address list refused it (see Policy).
	Connected, NotAllowed, Denied, Refused, Unreachable, TimedOut, Overloaded, Failed uint64
	// IdleTimeouts counts flows reset after Options.IdleTimeout unused.
	IdleTimeouts uint64
	// OverBudget counts flows refused because Options.Budget could not
	// hold another.
	OverBudget uint64
	// Active is the number of flows being connected or relayed now.
	Active int64
	// BytesUp: near edge → server; BytesDown: server → near edge.
	BytesUp, BytesDown uint64
}

// Add returns the sum of s and o (the egresses of a hub's branches).
func (s Stats) Add(o Stats) Stats {
	return Stats{Streams: s.Streams + o.Streams, Connected: s.Connected + o.Connected, NotAllowed: s.NotAllowed + o.NotAllowed,
		Denied: s.Denied + o.Denied, Refused: s.Refused + o.Refused, Unreachable: s.Unreachable + o.Unreachable,
		TimedOut: s.TimedOut + o.TimedOut, Overloaded: s.Overloaded + o.Overloaded, Failed: s.Failed + o.Failed,
		IdleTimeouts: s.IdleTimeouts + o.IdleTimeouts, OverBudget: s.OverBudget + o.OverBudget, Active: s.Active + o.Active,
		BytesUp: s.BytesUp + o.BytesUp, BytesDown: s.BytesDown + o.BytesDown}
}

// FlowInfo is a snapshot of one relayed flow.
type FlowInfo struct {
	Src, Dst           netip.AddrPort
	BytesUp, BytesDown uint64
	// RateUpBps and RateDownBps are the rates over the last interval of
	// SampleRates, in bits per second.
	RateUpBps, RateDownBps uint64
	Started                time.Time
	// Why says what limits the flow now, from this edge's side (see
	// flow.RelayState.Why).
	Why flow.Limit
}

// Egress serves the streams of one or more tunnels. Its methods are safe
// for concurrent use.
type Egress struct {
	policy atomic.Pointer[Policy] // SetPolicy swaps it
	dialer flow.Dialer
	opts   Options
	log    *slog.Logger
	sem    chan struct{}

	streams, connected, notAllowed, denied, refused, unreachable, timedOut, overloaded, failed, idled, overBudget atomic.Uint64
	local                                                                                                         localAddrs
	active                                                                                                        atomic.Int64

	mu    sync.Mutex
	flows map[*relayed]struct{}
	// doneUp and doneDown are the bytes of flows that ended (under mu).
	doneUp, doneDown uint64
}

// relayed is one flow being relayed.
type relayed struct {
	src, dst         netip.AddrPort
	started          time.Time
	up, down         atomic.Uint64
	rateUp, rateDown meter.Rate
	relay            flow.RelayState
}

// New returns an Egress that connects to what policy allows with dialer
// (nil: a KernelDialer).
func New(policy Policy, dialer flow.Dialer, opts Options) *Egress {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.MaxFlows <= 0 {
		opts.MaxFlows = DefaultMaxFlows
	}
	if dialer == nil {
		dialer = &KernelDialer{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Egress{
		dialer: dialer,
		opts:   opts,
		log:    log,
		sem:    make(chan struct{}, opts.MaxFlows),
		flows:  make(map[*relayed]struct{}),
	}
	e.policy.Store(&policy)
	return e
}

// Policy returns the policy in force.
func (e *Egress) Policy() Policy { return *e.policy.Load() }

// SetPolicy replaces the policy for the flows opened from now on; flows
// already connected go on, as a firewall's established connections do.
func (e *Egress) SetPolicy(p Policy) { e.policy.Store(&p) }

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
			e.log.Warn("too many flows; refusing", "max_flows", e.opts.MaxFlows, "dst", in.Dst())
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
	if why := e.policy.Load().Check(dst, e.local.contains); why != "" {
		if why == notAllowed {
			e.notAllowed.Add(1)
			log.Debug("destination not allowed by policy")
		} else {
			e.denied.Add(1)
			log.Info("destination refused", "why", why)
		}
		_ = in.Reject(wire.OpenNotAllowed)
		return
	}
	if !e.opts.Budget.Admit() {
		e.overBudget.Add(1)
		log.Debug("memory budget full; refusing")
		_ = in.Reject(wire.OpenResourceLimit)
		return
	}
	defer e.opts.Budget.Leave()
	dctx, cancel := context.WithTimeout(ctx, e.opts.DialTimeout)
	c, err := e.dialer.Dial(dctx, src, dst)
	cancel()
	if err != nil {
		code := e.openCode(err)
		log.Debug("connect failed", "answer", code, "err", err)
		_ = in.Reject(code)
		return
	}
	// Listed before the near edge hears it is connected, so its client
	// never sees a flow that 'wanopt flows' does not show.
	f := &relayed{src: src, dst: dst, started: time.Now()}
	e.mu.Lock()
	e.flows[f] = struct{}{}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.flows, f)
		e.doneUp += f.up.Load()
		e.doneDown += f.down.Load()
		e.mu.Unlock()
	}()
	// Counted before the near edge hears it is connected, as the flow is
	// listed: a status query right after the client's connect sees it.
	e.connected.Add(1)
	s, err := in.Accept()
	if err != nil {
		log.Debug("accept stream failed", "err", err)
		_ = flow.Abort(c)
		return
	}
	// The server's end is the LAN side: its bytes go down, toward the
	// near edge.
	flow.Relay(ctx, c, TunnelEnd{Stream: s}, flow.RelayOptions{LANToWAN: &f.down, WANToLAN: &f.up, Log: log,
		IdleTimeout: e.opts.IdleTimeout, Idled: func() { e.idled.Add(1) }, Budget: e.opts.Budget, State: &f.relay})
	log.Debug("flow closed", "up", f.up.Load(), "down", f.down.Load())
}

// openCode maps a connect error to the answer the near edge gets, and
// counts it.
func (e *Egress) openCode(err error) wire.OpenCode {
	var ne net.Error
	switch {
	case errors.Is(err, flow.ErrNotAllowed):
		e.notAllowed.Add(1)
		return wire.OpenNotAllowed
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, flow.ErrRefused):
		e.refused.Add(1)
		return wire.OpenRefused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.EHOSTDOWN), errors.Is(err, syscall.ENETDOWN), errors.Is(err, flow.ErrUnreachable):
		e.unreachable.Add(1)
		return wire.OpenUnreachable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, flow.ErrTimeout),
		errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		e.timedOut.Add(1)
		return wire.OpenTimedOut
	default:
		e.failed.Add(1)
		return wire.OpenError
	}
}

// Stats returns a snapshot of the counters.
func (e *Egress) Stats() Stats {
	e.mu.Lock()
	up, down := e.doneUp, e.doneDown
	for f := range e.flows {
		up += f.up.Load()
		down += f.down.Load()
	}
	e.mu.Unlock()
	return Stats{
		Streams:      e.streams.Load(),
		Connected:    e.connected.Load(),
		NotAllowed:   e.notAllowed.Load(),
		Denied:       e.denied.Load(),
		IdleTimeouts: e.idled.Load(),
		OverBudget:   e.overBudget.Load(),
		Refused:      e.refused.Load(),
		Unreachable:  e.unreachable.Load(),
		TimedOut:     e.timedOut.Load(),
		Overloaded:   e.overloaded.Load(),
		Failed:       e.failed.Load(),
		Active:       e.active.Load(),
		BytesUp:      up,
		BytesDown:    down,
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
	fs := make([]*relayed, 0, len(e.flows))
	for f := range e.flows {
		fs = append(fs, f)
		out = append(out, FlowInfo{Src: f.src, Dst: f.dst, BytesUp: f.up.Load(), BytesDown: f.down.Load(),
			RateUpBps: f.rateUp.Bps(), RateDownBps: f.rateDown.Bps(), Started: f.started})
	}
	e.mu.Unlock()
	// The server's end is the LAN side: its bytes go down. Asking the
	// stream is a call into the driver, outside the lock.
	for i, f := range fs {
		out[i].Why = f.relay.Why(out[i].RateDownBps, out[i].RateUpBps)
	}
	slices.SortFunc(out, func(a, b FlowInfo) int { return a.Started.Compare(b.Started) })
	return out
}
