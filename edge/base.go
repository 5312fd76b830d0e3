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
	"time"

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

// base is what every role has: the memory plan and the flows' budget,
// the control socket and the metrics server, the life Ready and Serving
// report, the TUN device if the configuration has one, and the loop that
// keeps a tunnel up.
type base struct {
	// sh is the shared configuration as built: a reload changes only what
	// the role's own copy holds (the policy, the peers).
	sh  Shared
	log *slog.Logger
	mem MemoryPlan
	// budget holds the memory of every flow of this edge, intercepted or
	// egressing (see PlanMemory).
	budget *flow.Budget
	// stamps is the responder's handshake memory for the process's life:
	// no initiation is answered twice, across every tunnel this edge
	// accepts.
	stamps *crypt.Timestamps
	// summary describes the role's configuration in force.
	summary func() string

	// stops are the control socket's and metrics server's (Run's
	// goroutine only).
	stops []func()
	// reloadMu makes reloads one at a time.
	reloadMu sync.Mutex

	mu      sync.Mutex
	started time.Time
	// running: Run has started and not returned; stopping: its context
	// ended; ingressOpen: the TUN's stack is open and not yet closed;
	// serving: Run has set up what comes before the tunnels (Serving).
	running, stopping, ingressOpen, serving bool
	// metricsAddr is where the metrics server listens (Metrics with its
	// port chosen).
	metricsAddr string
	// The TUN device while it is open, its stack and its capture.
	dev     *tun.Device
	st      *stack.Stack
	capture *tun.Capture
}

// init sets b up for sh (defaults filled in): the one place the memory
// plan is made.
func (b *base) init(sh Shared, summary func(MemoryPlan) string) {
	b.sh, b.log = sh, sh.Logger
	b.mem = PlanMemory(sh.MemoryMiB, sh.MaxFlows)
	b.budget = flow.NewBudget(b.mem.FlowLimit, b.mem.FlowFloorBytes, b.mem.GrantBytes)
	b.stamps = crypt.NewTimestamps()
	b.summary = func() string { return summary(b.mem) }
}

// inForce reads a role's configuration c, which a reload changes under
// mu.
func inForce[C any](mu *sync.Mutex, c *C) C {
	mu.Lock()
	defer mu.Unlock()
	return *c
}

// Memory is how the edge splits its memory budget.
func (b *base) Memory() MemoryPlan { return b.mem }

// Summary describes the configuration in force in one line (no secrets).
func (b *base) Summary() string { return b.summary() }

// begin marks the edge running until the returned end is called, and
// stopping once ctx ends.
func (b *base) begin(ctx context.Context) (end func()) {
	b.mu.Lock()
	b.started = time.Now()
	b.running = true
	b.mu.Unlock()
	stopHook := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		b.stopping = true
		b.mu.Unlock()
	})
	return func() {
		stopHook()
		b.mu.Lock()
		b.running = false
		b.mu.Unlock()
	}
}

// serveControl starts the control socket and the metrics server, if
// configured, and marks the edge serving; stopControl stops them.
func (b *base) serveControl(ctx context.Context, src control.Source, ready metrics.Ready) error {
	if b.sh.Control != "" {
		stop, err := control.Serve(b.sh.Control, src, b.log.With("sub", "control"))
		if err != nil {
			return failed("Control", err, "{Control}")
		}
		b.stops = append(b.stops, stop)
	}
	if b.sh.Metrics != "" {
		reg := metrics.Registry(src.Status)
		bound, stop, err := metrics.Serve(ctx, b.sh.Metrics, reg, ready, b.log.With("sub", "metrics"))
		if err != nil {
			b.stopControl()
			return err
		}
		b.mu.Lock()
		b.metricsAddr = bound
		b.mu.Unlock()
		b.stops = append(b.stops, stop)
	}
	b.log.Info("edge starting", "config", b.summary())
	b.mu.Lock()
	b.serving = true
	b.mu.Unlock()
	return nil
}

func (b *base) stopControl() {
	for _, stop := range b.stops {
		stop()
	}
	b.stops = nil
}

// sampleRates updates the flows' current rates every second, the stack's
// and those of the egresses each returns, until the returned stop
// function is called (which waits for it).
func (b *base) sampleRates(egresses func() []*egress.Egress) (stop func()) {
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
				if st := b.stack(); st != nil {
					st.SampleRates(now.Sub(last))
				}
				for _, eg := range egresses() {
					eg.SampleRates(now.Sub(last))
				}
				last = now
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func (b *base) stack() *stack.Stack {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.st
}

// egressOptions are the options of an egress of this edge, logging to
// log.
func (b *base) egressOptions(log *slog.Logger) egress.Options {
	return egress.Options{DialTimeout: b.sh.DialTimeout, MaxFlows: b.sh.MaxFlows, IdleTimeout: max(0, b.sh.FlowIdleTimeout),
		Budget: b.budget, Logger: log}
}

// egressDialer connects the flows the peers open: kernel sockets, or
// with transparent egress the TUN's stack (open by then).
func (b *base) egressDialer() flow.Dialer {
	if b.sh.Transparent {
		return b.stack()
	}
	return &egress.KernelDialer{}
}

// writeOut is a far side's FarConfig.WritePacket: with transparent
// egress, the clients' passed TCP, UDP and echo requests go out of the
// TUN, whose kernel routes them to the servers from the clients'
// addresses; nil without.
func (b *base) writeOut() func([]byte) error {
	if !b.sh.Transparent {
		return nil
	}
	return b.writeTUN
}

// writeTUN writes p into the TUN's stack.
func (b *base) writeTUN(p []byte) error {
	st := b.stack()
	if st == nil {
		return errNoIngress
	}
	return st.WritePacket(p)
}

// errNoIngress: a packet came while the stack was not running.
var errNoIngress = errors.New("edge: no ingress to write the packet to")

// openIngress opens (or creates and sets up) the TUN and starts the stack
// on it: the flows it intercepts go to flows, the packets the divert
// functions claim to them.
func (b *base) openIngress(ctx context.Context, flows flow.Dialer, divert, divertTCP func([]byte) bool) error {
	cfg := b.sh.LAN
	mtu := cfg.MTU
	if cfg.TUNSetup && mtu == 0 {
		mtu = tun.DefaultMTU
	}
	dev, err := tun.Open(tun.Config{Name: cfg.TUN, MTU: mtu, Create: cfg.TUNSetup})
	if err != nil {
		return &FieldError{Field: "TUN", Err: err, Text: fmt.Sprintf("open {TUN} %s: %v (create it with 'ip tuntap add dev %s mode tun user USER', or run as root with {TUNSetup})", cfg.TUN, err, cfg.TUN)}
	}
	if cfg.TUNSetup {
		err := tun.Setup(tun.SetupConfig{Name: cfg.TUN, Addrs: cfg.TUNAddrs, MTU: mtu, Routes: cfg.TUNRoutes})
		if err != nil {
			dev.Close()
			return fmt.Errorf("set up TUN %s: %w", cfg.TUN, err)
		}
	}
	scfg := stack.Config{MTU: dev.MTU(), Logger: b.log.With("sub", "stack"), IdleTimeout: max(0, b.sh.FlowIdleTimeout),
		ReceiveBuffer: b.mem.Receive, SendBuffer: b.mem.Send, Budget: b.budget, Divert: divert, DivertTCP: divertTCP}
	var capt *tun.Capture
	if cfg.CaptureDir != "" {
		if err := os.MkdirAll(cfg.CaptureDir, 0o750); err != nil {
			dev.Close()
			return failed("CaptureDir", err, "{CaptureDir} %s", cfg.CaptureDir)
		}
		// Headers are what the analyser needs; payload would fill the
		// files (and hold user data).
		path := filepath.Join(cfg.CaptureDir, "lan.pcap")
		capt, err = tun.NewCapture(tun.CaptureConfig{Path: path, SnapLen: 128})
		if err != nil {
			dev.Close()
			return failed("CaptureDir", err, "{CaptureDir}")
		}
		scfg.Tap = capt
		b.log.Info("capturing the TUN's packets", "file", path)
	}
	st, err := stack.New(ctx, dev.Fd(), flows, scfg)
	if err != nil {
		if capt != nil {
			capt.Close()
		}
		dev.Close()
		return fmt.Errorf("start the TCP stack on TUN %s: %w", cfg.TUN, err)
	}
	b.mu.Lock()
	b.dev, b.st, b.capture = dev, st, capt
	b.ingressOpen = true
	b.mu.Unlock()
	b.log.Info("intercepting TCP", "tun", cfg.TUN, "mtu", dev.MTU(), "offload", dev.Offload())
	return nil
}

// closeIngress resets the flows still open and releases the device.
func (b *base) closeIngress() {
	b.mu.Lock()
	dev, st, capt := b.dev, b.st, b.capture
	b.ingressOpen = false
	b.mu.Unlock()
	if err := st.Close(); err != nil {
		b.log.Warn("closing the TCP stack failed", "err", err)
	}
	if capt != nil {
		if err := capt.Close(); err != nil {
			b.log.Warn("closing the capture failed", "err", err)
		}
	}
	if err := dev.Close(); err != nil {
		b.log.Warn("closing the TUN device failed", "err", err)
	}
}

// keepUp opens a tunnel with open (to pa's address of the moment, for
// an initiator; pa is nil for a responder) and runs serve on it, again
// each time it closes, until ctx ends, keeping l up to date. A failed
// open is retried after a pause that doubles up to 10 s, unless the
// attempt itself waited longer (a handshake unanswered for the peer
// timeout: the path may be back any moment, so it tries again at once)
// or the peer's host name moved (dialFollowing). While an initiator's
// tunnel is down, it warns what to check (watchDown).
func (b *base) keepUp(ctx context.Context, log *slog.Logger, l *link, pa *peerAddr, open func(context.Context, netip.AddrPort) (*driver.Tunnel, error), serve func(context.Context, *driver.Tunnel)) {
	if l.initiator {
		stop := b.watchDown(ctx, log, l)
		defer stop()
	}
	backoff := time.Second
	for ctx.Err() == nil {
		start := time.Now()
		var t *driver.Tunnel
		var err error
		if pa != nil {
			t, err = dialFollowing(ctx, l, pa, open)
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
func (b *base) watchDown(ctx context.Context, log *slog.Logger, l *link) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	key := b.sh.PrivateKey.PublicKey().Base64()
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
					"check", "that the far edge has this edge's public key " + key + " (as its peer's key or a branch's), that UDP reaches " + s.Peer + " (no firewall drops it), and that the far edge runs"}
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
func (b *base) logStopped(g egress.Stats, br ingress.Stats) {
	b.log.Info("edge stopped",
		slog.Group("egress", "connected", g.Connected, "not_allowed", g.NotAllowed, "denied", g.Denied, "refused", g.Refused,
			"unreachable", g.Unreachable, "timed_out", g.TimedOut, "failed", g.Failed, "bytes_up", g.BytesUp, "bytes_down", g.BytesDown),
		slog.Group("bridge", "opened", br.Opened, "refused", br.Refused, "not_allowed", br.NotAllowed,
			"unreachable", br.Unreachable, "timed_out", br.TimedOut, "failed", br.Failed))
}

// tunnelConfig is the tunnel.Config of a tunnel to peer, whose streams
// may hold budgetBytes, its packets sized for a path from local or to
// remote (IPv6's headers are larger; [::] takes IPv6's, which fits both).
func (b *base) tunnelConfig(peer crypt.PublicKey, budgetBytes uint64, addr netip.Addr, log *slog.Logger) tunnel.Config {
	return tunnel.Config{
		PrivateKey: b.sh.PrivateKey, PeerPublicKey: peer, Congestion: b.sh.CC,
		IdleTimeout: b.sh.PeerTimeout, InitialBandwidthBps: b.sh.WANRateBps, Timestamps: b.stamps,
		Stream: stream.Config{BudgetBytes: budgetBytes,
			InitialStreamWindow: streamFloorBytes, MinSendBufferBytes: streamFloorBytes},
		MaxUDPPayloadBytes: tunnel.MaxUDPPayloadBytesForMTU(addr, b.sh.TunnelMTU),
		Logger:             log.With("sub", "tunnel"),
	}
}

// network is the UDP network of a tunnel socket at addr: "udp4" for an
// IPv4 address, "udp" (both) else.
func network(addr netip.Addr) string {
	if addr.Is4() {
		return "udp4"
	}
	return "udp"
}

// Serving reports whether Run has set up everything that comes before
// the tunnels (the ingress, the control socket, the metrics listener) and
// now keeps them up: from then on a far edge (responder) is ready for its
// peers, though Ready says no until one has handshaken. A service
// manager's readiness waits for it on a far edge, for Ready on a near one.
func (b *base) Serving() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.serving && b.running && !b.stopping
}

// notReady is why the edge is not ready whatever its tunnels: not
// running, stopping, or its ingress not open; "" when none holds.
func (b *base) notReady() string {
	b.mu.Lock()
	running, stopping, ingress := b.running, b.stopping, b.ingressOpen
	b.mu.Unlock()
	switch {
	case !running:
		return "edge not running"
	case stopping:
		return "edge stopping"
	case b.sh.TUN != "" && !ingress:
		return fmt.Sprintf("ingress on TUN %s not open", b.sh.TUN)
	}
	return ""
}

// status is what every role's status holds: the configuration, the
// memory, the uptime and the stack's counters.
func (b *base) status(role string) control.Status {
	r := control.Status{Role: role, Config: b.summary()}
	m := b.budget.Stats()
	r.Memory = control.Memory{Flows: m.Flows, MaxFlows: m.MaxFlows, FloorBytes: m.FloorBytes,
		GrantedBytes: m.GrantedBytes, GrantLimitBytes: m.GrantLimitBytes, FlowsRefused: m.FlowsRefused, Grants: m.Grants, GrantsRefused: m.GrantsRefused}
	b.mu.Lock()
	started := b.started
	b.mu.Unlock()
	if !started.IsZero() {
		r.Uptime = time.Since(started)
	}
	if st := b.stack(); st != nil {
		s := st.Stats()
		r.Ingress = &s
	}
	return r
}

// refusedReason adds a responder's refused initiations to its reason: an
// edge knocking with a key not known here is the usual cause.
func refusedReason(refusals *driver.Refusals) string {
	s := refusals.Stats()
	var n uint64
	for _, c := range s.ByReason {
		n += c
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d initiation%s refused, the last (%s) from %v", n, plural(n), s.Last.Reason, s.Last.From)
}
