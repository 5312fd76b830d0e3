// Package edge runs a wanopt edge: the ingress that intercepts TCP on a TUN
// device (a gVisor netstack, package stack), the tunnel to the peer edge
// (package tunnel/driver), kept up with reconnects, the bridge that opens a
// tunnel stream for each intercepted flow (edge/bridge), the egress that
// connects the flows the peer opens (package egress), and the control
// socket (edge/control). cmd/wanopt parses flags into a Config and runs
// it; tests build edges the same way, in-process (an edge pair can talk
// over an in-memory bind: Config.Bind).
//
//	e, err := edge.New(cfg)
//	...
//	err = e.Run(ctx) // until ctx ends
package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanopt/wanopt/dgram"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/edge/metrics"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/ingress"
	"github.com/wanopt/wanopt/stack"
	"github.com/wanopt/wanopt/tun"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/driver"
	"github.com/wanopt/wanopt/tunnel/stream"
)

// Edge is one edge. Status and Flows may be called at any time, also
// concurrently with Run.
type Edge struct {
	cfg Config
	log *slog.Logger
	br  *ingress.Dialer
	// stamps is the responder's handshake memory for the process's life:
	// no initiation is answered twice, across every tunnel this edge
	// accepts.
	stamps *crypt.Timestamps
	// budget holds the memory of every flow of this edge, intercepted or
	// egressing (--memory-mib; see Config.buffers).
	budget *flow.Budget
	// router, with several upstreams (Config.Upstreams), picks the bridge
	// of each intercepted flow; nil: every flow goes through br.
	router *router
	// link is the one peer's tunnel's life (unused with upstreams or
	// branches, which keep their own).
	link *link
	// peer is where an initiator dials the one peer (nil for a
	// responder).
	peer *peerAddr
	// refusals counts and logs the initiations a responder (far edge,
	// hub) refused, over the process's life (nil for an initiator).
	refusals *driver.Refusals

	// stops are the control socket's and metrics server's (Run's
	// goroutine only).
	stops []func()
	// reloadMu makes reloads one at a time.
	reloadMu sync.Mutex
	// Set by Run (under mu): the ingress while it is open, the egress; and
	// cfg's Policy, which Reload changes.
	mu      sync.Mutex
	started time.Time
	// running: Run has started and not returned; stopping: its context
	// ended; ingressOpen: the TUN's stack is open and not yet closed.
	running, stopping, ingressOpen bool
	// serving: Run has set up what comes before the tunnels (Serving).
	serving bool
	// metricsAddr is where the metrics server listens (Config.Metrics
	// with its port chosen).
	metricsAddr string
	dev         *tun.Device
	st          *stack.Stack
	eg          *egress.Egress
	// hub and branches, for a hub (Config.Branches), instead of eg.
	hub      *driver.Hub
	run      *hubRun
	upRun    *upRun // a near edge's upstream loops
	branches []*branch
	// capture, if set, records the TUN's packets (--capture).
	capture *tun.Capture
	// near carries the clients' UDP and pings (nil without a TUN); far
	// sends the peer's on (set by Run). See datagram.go.
	near *dgram.Near
	far  atomic.Pointer[dgram.Far]
	// hubFars are a hub's branches' far sides (storeHubFarsLocked), for
	// the stack's divert functions.
	hubFars atomic.Pointer[[]*dgram.Far]
}

// New checks cfg and returns an edge ready to Run. It opens nothing yet.
func New(cfg Config) (*Edge, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	bp := cfg.buffers()
	e := &Edge{cfg: cfg, log: cfg.Logger, br: ingress.New(nil, cfg.Logger.With("sub", "bridge")), stamps: crypt.NewTimestamps(),
		budget: flow.NewBudget(bp.FlowLimit, bp.FlowFloorBytes, bp.GrantBytes)}
	now := time.Now()
	if cfg.Peer.IsValid() {
		e.link = newLink(true, cfg.Peer.String(), now)
		e.peer = newPeerAddr(cfg.Peer, cfg.PeerHost, cfg.Resolver, cfg.Logger.With("sub", "dns"))
	} else {
		e.link = newLink(false, "", now)
	}
	if cfg.Listen.IsValid() {
		e.refusals = driver.NewRefusals(cfg.Logger.With("sub", "handshake"))
	}
	if len(cfg.Upstreams) > 0 {
		e.router = &router{}
		var ups []*upstream
		for _, u := range cfg.Upstreams {
			ups = append(ups, newUpstream(u, cfg, now))
		}
		e.router.ups.Store(&ups)
	}
	if cfg.TUN != "" && !cfg.Transparent && len(cfg.Branches) == 0 {
		e.near = e.newNear()
	}
	return e, nil
}

// Run runs the edge until ctx ends, then resets the flows still open,
// closes the tunnel and the device, and returns nil. Errors are setup
// failures (the TUN device, the control socket); a tunnel that cannot
// reach its peer is retried, not an error. Run may be called once.
func (e *Edge) Run(ctx context.Context) error {
	cfg := e.config()
	e.mu.Lock()
	e.started = time.Now()
	e.running = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.running = false
		e.mu.Unlock()
	}()
	stopHook := context.AfterFunc(ctx, func() {
		e.mu.Lock()
		e.stopping = true
		e.mu.Unlock()
	})
	defer stopHook()
	e.link.wentDownAt(time.Now(), nil) // the wait starts now, not at New
	if cfg.TUN != "" {
		if err := e.openIngress(ctx); err != nil {
			return err
		}
		defer e.closeIngress()
	}
	var dialer flow.Dialer = &egress.KernelDialer{}
	if cfg.Transparent {
		dialer = e.stack()
	}
	if len(cfg.Branches) > 0 {
		return e.serveHub(ctx, cfg, dialer)
	}
	eg := egress.New(cfg.Policy, dialer, egress.Options{
		DialTimeout: cfg.DialTimeout,
		MaxFlows:    cfg.MaxFlows,
		IdleTimeout: max(0, cfg.FlowIdleTimeout),
		Budget:      e.budget,
		Logger:      e.log.With("sub", "egress"),
	})
	e.mu.Lock()
	e.eg = eg
	eg.SetPolicy(e.cfg.Policy) // a reload may have come since cfg was read
	e.mu.Unlock()
	stopFar := e.startFar(eg)
	defer stopFar()
	stopRates := e.sampleRates()
	defer stopRates()
	if err := e.serveControl(ctx, cfg); err != nil {
		return err
	}
	defer e.stopControl()
	e.log.Info("edge starting", "config", cfg.Summary())
	e.setServing()
	if e.near != nil && cfg.NearRules.HasTCPPass() {
		e.log.Warn(PassTCPWarning)
	}
	if e.router != nil {
		e.runUpstreams(ctx, cfg, eg)
	} else {
		e.tunnelLoop(ctx, eg)
	}
	e.logStopped(eg.Stats())
	return nil
}

// serveHub runs a hub (Config.Branches) until ctx ends.
func (e *Edge) serveHub(ctx context.Context, cfg Config, dialer flow.Dialer) error {
	stopRates := e.sampleRates()
	defer stopRates()
	if err := e.serveControl(ctx, cfg); err != nil {
		return err
	}
	defer e.stopControl()
	e.log.Info("edge starting", "config", cfg.Summary())
	e.setServing()
	err := e.runHub(ctx, cfg, dialer)
	var g egress.Stats
	for _, p := range e.peerStatus() {
		g = g.Add(p.Egress)
	}
	e.logStopped(g)
	return err
}

// serveControl starts the control socket and the metrics server, if
// configured; stopControl stops them.
func (e *Edge) serveControl(ctx context.Context, cfg Config) error {
	if cfg.Control != "" {
		stop, err := control.Serve(cfg.Control, e, e.log.With("sub", "control"))
		if err != nil {
			return err
		}
		e.stops = append(e.stops, stop)
	}
	if cfg.Metrics != "" {
		reg := metrics.Registry(e.Status)
		bound, stop, err := metrics.Serve(ctx, cfg.Metrics, reg, e.Ready, e.log.With("sub", "metrics"))
		if err != nil {
			e.stopControl()
			return err
		}
		e.mu.Lock()
		e.metricsAddr = bound
		e.mu.Unlock()
		e.stops = append(e.stops, stop)
	}
	return nil
}

func (e *Edge) stopControl() {
	for _, stop := range e.stops {
		stop()
	}
	e.stops = nil
}

// sampleRates updates the flows' current rates every second until the
// returned stop function is called (which waits for it).
func (e *Edge) sampleRates() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tk.C:
				if st := e.stack(); st != nil {
					st.SampleRates(now.Sub(last))
				}
				if eg := e.egress(); eg != nil {
					eg.SampleRates(now.Sub(last))
				}
				for _, b := range e.hubBranches() {
					b.eg.SampleRates(now.Sub(last))
				}
				last = now
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func (e *Edge) stack() *stack.Stack {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st
}

func (e *Edge) egress() *egress.Egress {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.eg
}

// openIngress opens (or creates and sets up) the TUN and starts the stack.
func (e *Edge) openIngress(ctx context.Context) error {
	cfg := e.config()
	mtu := cfg.MTU
	if cfg.TUNSetup && mtu == 0 {
		mtu = tun.DefaultMTU
	}
	dev, err := tun.Open(tun.Config{Name: cfg.TUN, MTU: mtu, Create: cfg.TUNSetup})
	if err != nil {
		return fmt.Errorf("open TUN %s: %w (create it with 'ip tuntap add dev %s mode tun user USER', or run with --tun-setup as root)", cfg.TUN, err, cfg.TUN)
	}
	if cfg.TUNSetup {
		err := tun.Setup(tun.SetupConfig{Name: cfg.TUN, Addrs: cfg.TUNAddrs, MTU: mtu, Routes: cfg.TUNRoutes})
		if err != nil {
			dev.Close()
			return fmt.Errorf("set up TUN %s: %w", cfg.TUN, err)
		}
	}
	bp := cfg.buffers()
	scfg := stack.Config{MTU: dev.MTU(), Logger: e.log.With("sub", "stack"), IdleTimeout: max(0, cfg.FlowIdleTimeout),
		ReceiveBuffer: stack.BufferRange{Min: 4 << 10, Default: bp.RecvFloor, Max: bp.RecvGrown},
		SendBuffer:    stack.BufferRange{Min: 4 << 10, Default: bp.SendFloor, Max: bp.SendGrown},
		Budget:        e.budget,
	}
	scfg.Divert = e.divert()
	scfg.DivertTCP = e.divertTCP()
	var capt *tun.Capture
	if cfg.CaptureDir != "" {
		if err := os.MkdirAll(cfg.CaptureDir, 0o750); err != nil {
			dev.Close()
			return fmt.Errorf("--capture %s: %w", cfg.CaptureDir, err)
		}
		// Headers are what the analyser needs; payload would fill the
		// files (and hold user data).
		path := filepath.Join(cfg.CaptureDir, "lan.pcap")
		capt, err = tun.NewCapture(tun.CaptureConfig{Path: path, SnapLen: 128})
		if err != nil {
			dev.Close()
			return fmt.Errorf("--capture: %w", err)
		}
		scfg.Tap = capt
		e.log.Info("capturing the TUN's packets", "file", path)
	}
	st, err := stack.New(ctx, dev.Fd(), e.flowDialer(), scfg)
	if err != nil {
		if capt != nil {
			capt.Close()
		}
		dev.Close()
		return fmt.Errorf("start the TCP stack on TUN %s: %w", cfg.TUN, err)
	}
	e.mu.Lock()
	e.dev, e.st, e.capture = dev, st, capt
	e.ingressOpen = true
	e.mu.Unlock()
	e.log.Info("intercepting TCP", "tun", cfg.TUN, "mtu", dev.MTU(), "offload", dev.Offload())
	return nil
}

// closeIngress resets the flows still open and releases the device.
func (e *Edge) closeIngress() {
	e.mu.Lock()
	dev, st, capt := e.dev, e.st, e.capture
	e.ingressOpen = false
	e.mu.Unlock()
	if err := st.Close(); err != nil {
		e.log.Warn("closing the TCP stack failed", "err", err)
	}
	if capt != nil {
		if err := capt.Close(); err != nil {
			e.log.Warn("closing the capture failed", "err", err)
		}
	}
	if err := dev.Close(); err != nil {
		e.log.Warn("closing the TUN device failed", "err", err)
	}
}

// tunnelLoop keeps a tunnel to the peer up until ctx ends: it dials (or
// listens), serves it, and starts over when it closes.
func (e *Edge) tunnelLoop(ctx context.Context, eg *egress.Egress) {
	e.keepUp(ctx, e.log, e.link, e.peer, e.connect, func(ctx context.Context, t *driver.Tunnel) { e.serve(ctx, t, eg) })
}

// keepUp opens a tunnel with open (to pa's address of the moment, for
// an initiator; pa is nil for a responder) and runs serve on it, again
// each time it closes, until ctx ends, keeping l up to date. A failed
// open is retried after a pause that doubles up to 10 s, unless the
// attempt itself waited longer (a handshake unanswered for
// --peer-timeout: the path may be back any moment, so it tries again at
// once) or the peer's host name moved (dialFollowing). While an
// initiator's tunnel is down, it warns what to check (watchDown).
func (e *Edge) keepUp(ctx context.Context, log *slog.Logger, l *link, pa *peerAddr, open func(context.Context, netip.AddrPort) (*driver.Tunnel, error), serve func(context.Context, *driver.Tunnel)) {
	if l.initiator {
		stop := e.watchDown(ctx, log, l)
		defer stop()
	}
	backoff := time.Second
	for ctx.Err() == nil {
		start := time.Now()
		var t *driver.Tunnel
		var err error
		if pa != nil {
			t, err = e.dialFollowing(ctx, l, pa, open)
		} else {
			t, err = open(ctx, netip.AddrPort{})
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, errPeerMoved) {
				l.dialFailed(nil) // its handshakes count; its error is none
				backoff = time.Second
				continue
			}
			l.dialFailed(err)
			if time.Since(start) > backoff {
				backoff = time.Second
			}
			log.Warn("could not connect to the peer; retrying", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = time.Second
		ts := t.Stats()
		l.cameUp(time.Now(), ts.PeerAddr.String(), ts.KeysAge)
		log.Info("tunnel up", "peer", ts.PeerAddr, "local", t.LocalAddr())
		serve(ctx, t)
		if ctx.Err() == nil {
			l.wentDownAt(time.Now(), t.Err())
			logDown(log, t.Err())
		}
	}
}

// logDown says that the tunnel closed and why: at INFO when the peer
// closed it (it stopped or restarted on purpose), else at WARN.
func logDown(log *slog.Logger, err error) {
	if errors.Is(err, tunnel.ErrPeerClosed) {
		log.Info("the peer closed the tunnel; reconnecting", "reason", err)
		return
	}
	log.Warn("tunnel down; reconnecting", "err", err)
}

// watchDown warns, while l's tunnel is down, that the far edge does not
// answer and what to check: after firstDownWarning, then at intervals
// doubling up to maxDownWarning. It runs until the returned stop is
// called (which waits for it).
func (e *Edge) watchDown(ctx context.Context, log *slog.Logger, l *link) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	key := e.config().PrivateKey.PublicKey().Base64()
	go func() {
		defer close(done)
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tk.C:
				due, attempts, down := l.warnDue(now)
				if !due {
					continue
				}
				s := l.snapshot(now, 0)
				attrs := []any{"peer", s.Peer, "attempts", attempts, "down_for", down.Round(time.Second),
					"check", "that the far edge has this edge's public key " + key + " (its --peer-key or --branch), that UDP reaches " + s.Peer + " (no firewall drops it), and that the far edge runs"}
				if s.LastError != "" {
					attrs = append(attrs, "last_error", s.LastError)
				}
				log.Warn("no answer from the far edge", attrs...)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// logStopped logs the edge's end with its egress and bridge counts.
func (e *Edge) logStopped(g egress.Stats) {
	b := e.br.Stats()
	if e.router != nil {
		for _, u := range e.router.list() {
			b = b.Add(u.br.Stats())
		}
	}
	e.log.Info("edge stopped",
		slog.Group("egress", "connected", g.Connected, "not_allowed", g.NotAllowed, "denied", g.Denied, "refused", g.Refused,
			"unreachable", g.Unreachable, "timed_out", g.TimedOut, "failed", g.Failed, "bytes_up", g.BytesUp, "bytes_down", g.BytesDown),
		slog.Group("bridge", "opened", b.Opened, "refused", b.Refused, "not_allowed", b.NotAllowed,
			"unreachable", b.Unreachable, "timed_out", b.TimedOut, "failed", b.Failed))
}

// tunnelConfig is the tunnel.Config of a tunnel to peer, whose streams
// may hold budgetBytes.
func (e *Edge) tunnelConfig(cfg Config, peer crypt.PublicKey, budgetBytes uint64, log *slog.Logger) tunnel.Config {
	return tunnel.Config{
		PrivateKey: cfg.PrivateKey, PeerPublicKey: peer, Congestion: cfg.CC,
		IdleTimeout: cfg.PeerTimeout, InitialBandwidthBps: cfg.WANRateBps, Timestamps: e.stamps,
		Stream: stream.Config{BudgetBytes: budgetBytes,
			InitialStreamWindow: streamFloorBytes, MinSendBufferBytes: streamFloorBytes},
		Logger: log.With("sub", "tunnel"),
	}
}

// serve runs one tunnel until it closes or ctx ends.
func (e *Edge) serve(ctx context.Context, t *driver.Tunnel, eg *egress.Egress) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	egDone := make(chan error, 1)
	go func() { egDone <- eg.Serve(sctx, t) }()
	e.br.SetTunnel(t)
	e.setDatagramTunnel(t)
	select {
	case <-t.Done():
	case <-ctx.Done():
		e.log.Info("stopping: closing flows and the tunnel")
	}
	e.br.SetTunnel(nil)
	e.setDatagramTunnel(nil)
	if st := e.stack(); ctx.Err() != nil && st != nil {
		// Reset the intercepted flows while the tunnel still carries the
		// far side's end of them.
		st.Close()
	}
	cancel()
	if err := <-egDone; err != nil && !errors.Is(err, driver.ErrTunnelClosed) {
		e.log.Warn("egress stopped", "err", err)
	}
	t.Close()
}

// connect opens the tunnel: Dial to peer for the initiator, Listen
// (waiting for the peer) for the responder.
func (e *Edge) connect(ctx context.Context, peer netip.AddrPort) (*driver.Tunnel, error) {
	cfg := e.config()
	dc := driver.Config{
		Tunnel:     e.tunnelConfig(cfg, cfg.PeerKey, cfg.buffers().TunnelBytes, e.log),
		Logger:     e.log.With("sub", "driver"),
		OnDatagram: e.onDatagram,
		Refusals:   e.refusals,
	}
	if cfg.Bind != nil {
		b, err := cfg.Bind()
		if err != nil {
			return nil, fmt.Errorf("open the tunnel's socket: %w", err)
		}
		dc.Bind = b
	}
	if cfg.Peer.IsValid() {
		dc.RemoteAddr = peer
		dc.OnHandshakeSent = e.link.handshakesSent
		dc.Tunnel.MaxUDPPayloadBytes = tunnel.MaxUDPPayloadBytesForMTU(peer.Addr(), cfg.withDefaults().TunnelMTU) // IPv6's headers are larger
		if peer.Addr().Is4() {
			dc.Network = "udp4"
		}
		t, err := driver.Dial(ctx, dc)
		if err != nil {
			return nil, fmt.Errorf("dial the peer at %v: %w", peer, err)
		}
		return t, nil
	}
	dc.LocalAddr = cfg.Listen
	dc.Tunnel.MaxUDPPayloadBytes = tunnel.MaxUDPPayloadBytesForMTU(cfg.Listen.Addr(), cfg.withDefaults().TunnelMTU) // [::]: IPv6's, fits both
	if cfg.Listen.Addr().Is4() {
		dc.Network = "udp4"
	}
	e.log.Info("waiting for the peer", "listen", cfg.Listen)
	t, err := driver.Listen(ctx, dc)
	if err != nil {
		return nil, fmt.Errorf("listen for the peer on %v: %w", cfg.Listen, err)
	}
	return t, nil
}

// Dial opens a flow from src to dst through the tunnel, as if the ingress
// had intercepted it: the peer's egress connects dst (if its policy allows)
// and the returned Conn carries the flow. Errors wrap flow.ErrRefused,
// flow.ErrNotAllowed, flow.ErrUnreachable (also while no tunnel is up) or
// flow.ErrTimeout.
func (e *Edge) Dial(ctx context.Context, src, dst netip.AddrPort) (flow.Conn, error) {
	return e.flowDialer().Dial(ctx, src, dst)
}

// flowDialer carries intercepted flows: the router with several
// upstreams, else the one peer's bridge.
func (e *Edge) flowDialer() flow.Dialer {
	if e.router != nil {
		return e.router
	}
	return e.br
}

func (e *Edge) hubOf() *driver.Hub {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hub
}
