package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"github.com/wanopt/wanopt/internal/control"
	"github.com/wanopt/wanopt/stack"
	"github.com/wanopt/wanopt/stack/bridge"
	"github.com/wanopt/wanopt/stack/egress"
	"github.com/wanopt/wanopt/tun"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/driver"
	"github.com/wanopt/wanopt/tunnel/stream"
)

// runRun is 'wanopt run': the edge daemon.
func runRun(args []string, stdout, stderr io.Writer) error {
	cfg, err := parseRunConfig(args, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if cfg.Check {
		fmt.Fprintf(stdout, "configuration OK: %s\n", cfg.summary())
		return nil
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	if cfg.Procs > 0 {
		runtime.GOMAXPROCS(cfg.Procs)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dir := os.Getenv("WANOPT_CPUPROFILE_DIR"); dir != "" {
		stopProfile, err := startCPUProfile(dir, cfg.Role(), log)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	return runEdge(ctx, cfg, log)
}

// startCPUProfile writes a CPU profile of the whole run to
// DIR/ROLE-PID.pprof: a debugging aid for the lab (wanbench passes its
// environment on to the edges it starts).
func startCPUProfile(dir, role string, log *slog.Logger) (stop func(), err error) {
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", role, os.Getpid()))
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("WANOPT_CPUPROFILE_DIR: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("WANOPT_CPUPROFILE_DIR: %w", err)
	}
	log.Info("writing a CPU profile", "file", path)
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// summary describes the configuration in one line (no secrets).
func (c *runConfig) summary() string {
	s := c.Role()
	if c.Peer.IsValid() {
		s += " to " + c.Peer.String()
	} else {
		s += " on " + c.Listen.String()
	}
	s += fmt.Sprintf(", public key %s, peer %s, cc %v, memory %d MiB", c.PrivateKey.PublicKey().Base64(), c.PeerKey.Base64(), c.CC, c.MemoryMiB)
	if c.Ingress() {
		s += ", ingress on TUN " + c.TUN
	}
	if c.Egress() {
		s += ", egress to " + c.Policy.String()
		if c.Transparent {
			s += " (transparent, from the clients' addresses through TUN " + c.TUN + ")"
		}
	} else {
		s += ", no egress (flows from the peer are refused)"
	}
	return s
}

// edge is a running edge: the ingress (TUN, stack, bridge) when configured,
// the egress (always: with no policy it refuses every flow), and the tunnel
// of the moment.
type edge struct {
	cfg *runConfig
	log *slog.Logger
	dev *tun.Device
	st  *stack.Stack
	br  *bridge.Dialer
	eg  *egress.Egress
	// capture, if set, records the TUN's packets (--capture).
	capture *tun.Capture
}

// runEdge runs the edge until ctx ends, then closes flows, the tunnel and
// the device, and returns nil; errors are setup failures.
func runEdge(ctx context.Context, cfg *runConfig, log *slog.Logger) error {
	e := &edge{cfg: cfg, log: log, br: bridge.New(nil, log.With("sub", "bridge"))}
	if cfg.Ingress() {
		if err := e.openIngress(ctx); err != nil {
			return err
		}
		defer e.closeIngress()
	}
	var dialer egress.Dialer = &egress.KernelDialer{}
	if cfg.Transparent {
		dialer = stackDialer{e.st}
	}
	e.eg = egress.New(cfg.Policy, dialer, egress.Options{
		DialTimeout: cfg.DialTimeout,
		MaxFlows:    cfg.MaxFlows,
		Logger:      log.With("sub", "egress"),
	})
	stopRates := e.sampleRates()
	defer stopRates()
	if cfg.Control != "" {
		stop, err := e.serveControl(cfg.Control)
		if err != nil {
			return err
		}
		defer stop()
	}
	log.Info("edge starting", "config", cfg.summary())
	e.tunnelLoop(ctx)
	log.Info("edge stopped", "egress", fmt.Sprintf("%+v", e.eg.Stats()), "bridge", fmt.Sprintf("%+v", e.br.Stats()))
	return nil
}

// sampleRates updates the flows' current rates every second until the
// returned stop function is called (which waits for it).
func (e *edge) sampleRates() (stop func()) {
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
				if e.st != nil {
					e.st.SampleRates(now.Sub(last))
				}
				e.eg.SampleRates(now.Sub(last))
				last = now
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// stackDialer is the transparent egress: it connects from the client's
// address through the TUN's stack.
type stackDialer struct{ st *stack.Stack }

func (d stackDialer) Connect(ctx context.Context, src, dst netip.AddrPort) (egress.Conn, error) {
	c, err := d.st.DialTCP(ctx, src, dst)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// openIngress opens (or creates and sets up) the TUN and starts the stack.
func (e *edge) openIngress(ctx context.Context) error {
	cfg := e.cfg
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
	scfg := stack.Config{MTU: dev.MTU(), Logger: e.log.With("sub", "stack"),
		ReceiveBuffer: stack.BufferRange{Min: bp.RecvMin, Default: bp.RecvDefault, Max: bp.RecvMax},
		SendBuffer:    stack.BufferRange{Min: bp.SendMin, Default: bp.SendDefault, Max: bp.SendMax},
	}
	if cfg.CaptureDir != "" {
		if err := os.MkdirAll(cfg.CaptureDir, 0o750); err != nil {
			dev.Close()
			return fmt.Errorf("--capture %s: %w", cfg.CaptureDir, err)
		}
		// Headers are what the analyser needs; payload would fill the
		// files (and hold user data).
		capt, err := tun.NewCapture(tun.CaptureConfig{Path: filepath.Join(cfg.CaptureDir, "lan.pcap"), SnapLen: 128})
		if err != nil {
			dev.Close()
			return fmt.Errorf("--capture: %w", err)
		}
		e.capture, scfg.Tap = capt, capt
		e.log.Info("capturing the TUN's packets", "file", filepath.Join(cfg.CaptureDir, "lan.pcap"))
	}
	st, err := stack.New(ctx, dev.Fd(), e.br, scfg)
	if err != nil {
		dev.Close()
		return fmt.Errorf("start the TCP stack on TUN %s: %w", cfg.TUN, err)
	}
	e.dev, e.st = dev, st
	e.log.Info("intercepting TCP", "tun", cfg.TUN, "mtu", dev.MTU(), "offload", dev.Offload())
	return nil
}

// closeIngress resets the flows still open and releases the device.
func (e *edge) closeIngress() {
	if err := e.st.Close(); err != nil {
		e.log.Warn("closing the TCP stack", "err", err)
	}
	if e.capture != nil {
		if err := e.capture.Close(); err != nil {
			e.log.Warn("closing the capture", "err", err)
		}
	}
	if err := e.dev.Close(); err != nil {
		e.log.Warn("closing the TUN device", "err", err)
	}
}

// tunnelLoop keeps a tunnel to the peer up until ctx ends: it dials (or
// listens), serves it, and starts over when it closes.
func (e *edge) tunnelLoop(ctx context.Context) {
	backoff := time.Second
	for ctx.Err() == nil {
		start := time.Now()
		t, err := e.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if time.Since(start) > backoff {
				// The attempt itself waited (a handshake that went
				// unanswered for --peer-timeout): the path may be back
				// any moment, so try again at once rather than after a
				// growing pause; only quick failures back off.
				backoff = time.Second
			}
			e.log.Warn("tunnel: could not connect to the peer; retrying", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = time.Second
		e.log.Info("tunnel up", "peer", t.Stats().PeerAddr, "local", t.LocalAddr())
		e.serve(ctx, t)
	}
}

// serve runs one tunnel until it closes or ctx ends.
func (e *edge) serve(ctx context.Context, t *driver.Tunnel) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	egDone := make(chan error, 1)
	go func() { egDone <- e.eg.Serve(sctx, t) }()
	e.br.SetTunnel(t)
	select {
	case <-t.Done():
		e.log.Warn("tunnel down; reconnecting", "err", t.Err())
	case <-ctx.Done():
		e.log.Info("stopping: closing flows and the tunnel")
	}
	e.br.SetTunnel(nil)
	if ctx.Err() != nil && e.st != nil {
		// Reset the intercepted flows while the tunnel still carries the
		// far side's end of them.
		e.st.Close()
	}
	cancel()
	if err := <-egDone; err != nil && !errors.Is(err, driver.ErrTunnelClosed) {
		e.log.Warn("egress stopped", "err", err)
	}
	t.Close()
}

// connect opens the tunnel: Dial for the initiator, Listen (waiting for
// the peer) for the responder.
func (e *edge) connect(ctx context.Context) (*driver.Tunnel, error) {
	cfg := e.cfg
	dc := driver.Config{
		Tunnel: tunnel.Config{
			PrivateKey:          cfg.PrivateKey,
			PeerPublicKey:       cfg.PeerKey,
			Congestion:          cfg.CC,
			IdleTimeout:         cfg.PeerTimeout,
			InitialBandwidthBps: cfg.WANRateBps,
			Stream:              stream.Config{BudgetBytes: cfg.buffers().TunnelBytes},
			Logger:              e.log.With("sub", "tunnel"),
		},
		Logger: e.log.With("sub", "driver"),
	}
	if cfg.Peer.IsValid() {
		dc.RemoteAddr = cfg.Peer
		if cfg.Peer.Addr().Is4() {
			dc.Network = "udp4"
		}
		t, err := driver.Dial(ctx, dc)
		if err != nil {
			return nil, fmt.Errorf("dial the peer at %v: %w", cfg.Peer, err)
		}
		return t, nil
	}
	dc.LocalAddr = cfg.Listen
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

// The control socket: 'wanopt status' and 'wanopt flows' connect to the
// unix socket named by run's --control, send one line ("status" or
// "flows") and read one JSON document back.

// statusReport is what "status" answers.
type statusReport struct {
	Role    string        `json:"role"`
	Config  string        `json:"config"`
	Uptime  time.Duration `json:"uptime_ns"`
	Tunnel  *tunnelReport `json:"tunnel,omitempty"` // nil: down
	Ingress *stack.Stats  `json:"ingress,omitempty"`
	Bridge  bridge.Stats  `json:"bridge"`
	Egress  egress.Stats  `json:"egress"`
}

type tunnelReport struct {
	Peer          string        `json:"peer"`
	Congestion    string        `json:"congestion"`
	Cipher        string        `json:"cipher"`
	SmoothedRTT   time.Duration `json:"srtt_ns"`
	MinRTT        time.Duration `json:"min_rtt_ns"`
	BandwidthBps  uint64        `json:"bandwidth_bps"`
	PacingRateBps uint64        `json:"pacing_rate_bps"`
	Cwnd          int           `json:"cwnd"`
	InFlight      int           `json:"in_flight"`
	BytesSent     uint64        `json:"bytes_sent"`
	BytesReceived uint64        `json:"bytes_received"`
	PacketsLost   uint64        `json:"packets_lost"`
	Retransmitted uint64        `json:"stream_bytes_retransmitted"`
	PTOs          uint64        `json:"ptos"` // probe timeouts (an outage shows as a run of them)
	StreamsOpen   int           `json:"streams_open"`
	// The stream memory budget: in use and limit.
	BudgetUsedBytes uint64 `json:"budget_used_bytes"`
	BudgetBytes     uint64 `json:"budget_bytes"`
	// BBR's state and its ProbeRTT episodes so far (BBR only).
	BBRMode   string `json:"bbr_mode,omitempty"`
	ProbeRTTs int    `json:"probe_rtts"`
}

// flowReport is one line of "flows".
type flowReport struct {
	Side      string `json:"side"` // ingress (intercepted here) or egress (connected here)
	Src       string `json:"src"`
	Dst       string `json:"dst"`
	State     string `json:"state"`
	BytesUp   uint64 `json:"bytes_up"`
	BytesDown uint64 `json:"bytes_down"`
	// RateUpBps and RateDownBps are the rates over the last second.
	RateUpBps   uint64 `json:"rate_up_bps"`
	RateDownBps uint64 `json:"rate_down_bps"`
	// TunnelRTT is the tunnel's smoothed RTT, which every flow crosses
	// (0: tunnel down).
	TunnelRTT time.Duration `json:"tunnel_srtt_ns"`
	Age       time.Duration `json:"age_ns"`
}

func (e *edge) status(started time.Time) statusReport {
	r := statusReport{Role: e.cfg.Role(), Config: e.cfg.summary(), Uptime: time.Since(started), Bridge: e.br.Stats(), Egress: e.eg.Stats()}
	if t := e.br.Tunnel(); t != nil {
		s := t.Stats()
		r.Tunnel = &tunnelReport{
			Peer: s.PeerAddr.String(), Congestion: s.Tunnel.Congestion, Cipher: s.Tunnel.Cipher,
			SmoothedRTT: s.Tunnel.SmoothedRTT, MinRTT: s.Tunnel.MinRTT,
			BandwidthBps: s.Tunnel.BandwidthBps, PacingRateBps: s.Tunnel.PacingRateBps,
			Cwnd: s.Tunnel.CongestionWindow, InFlight: s.Tunnel.BytesInFlight,
			BytesSent: s.Tunnel.BytesSent, BytesReceived: s.Tunnel.BytesReceived,
			PacketsLost: s.Tunnel.PacketsLost, Retransmitted: s.Tunnel.StreamBytesRetransmitted,
			PTOs:            s.Tunnel.PTOs,
			StreamsOpen:     s.Tunnel.StreamsOpen,
			BudgetUsedBytes: s.Tunnel.BudgetUsedBytes, BudgetBytes: s.Tunnel.BudgetBytes,
		}
		if s.Tunnel.Congestion == "bbr" {
			r.Tunnel.BBRMode, r.Tunnel.ProbeRTTs = s.Tunnel.BBR.Mode.String(), s.Tunnel.BBR.ProbeRTTCount
		}
	}
	if e.st != nil {
		st := e.st.Stats()
		r.Ingress = &st
	}
	return r
}

func (e *edge) flows() []flowReport {
	var out []flowReport
	var srtt time.Duration
	if t := e.br.Tunnel(); t != nil {
		srtt = t.Stats().Tunnel.SmoothedRTT
	}
	if e.st != nil {
		for _, f := range e.st.Flows() {
			out = append(out, flowReport{Side: "ingress", Src: f.Src.String(), Dst: f.Dst.String(), State: f.State.String(),
				BytesUp: f.BytesUp, BytesDown: f.BytesDown, RateUpBps: f.RateUpBps, RateDownBps: f.RateDownBps, TunnelRTT: srtt, Age: f.Age})
		}
	}
	for _, f := range e.eg.Flows() {
		out = append(out, flowReport{Side: "egress", Src: f.Src.String(), Dst: f.Dst.String(), State: "relaying",
			BytesUp: f.BytesUp, BytesDown: f.BytesDown, RateUpBps: f.RateUpBps, RateDownBps: f.RateDownBps, TunnelRTT: srtt, Age: time.Since(f.Started)})
	}
	return out
}

// serveControl listens on the unix socket path and answers requests until
// the returned stop function is called (which waits for its goroutines and
// removes the socket).
func (e *edge) serveControl(path string) (stop func(), err error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %s: another wanopt is running there; stop it or choose another --control", path)
		}
		os.Remove(path) // stale, from a run that was killed
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w (choose a writable --control path)", err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	started := time.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				line, err := bufio.NewReader(io.LimitReader(c, 64)).ReadString('\n')
				if err != nil {
					return
				}
				var v any
				switch strings.TrimSpace(line) {
				case "status":
					v = e.status(started)
				case "flows":
					v = e.flows()
				default:
					v = map[string]string{"error": fmt.Sprintf("unknown request %q: want status or flows", strings.TrimSpace(line))}
				}
				json.NewEncoder(c).Encode(v)
			}()
		}
	}()
	e.log.Info("control socket listening", "path", path)
	return func() {
		ln.Close()
		wg.Wait()
	}, nil
}

// queryControl sends req to the control socket and decodes the answer
// into v.
func queryControl(path, req string, v any) error {
	if path == "" {
		return fmt.Errorf("%w: --control PATH is required: the socket 'wanopt run --control PATH' listens on", errUsage)
	}
	return control.Query(path, req, v)
}

func controlFlags(name string, stderr io.Writer) (*pflag.FlagSet, *string, *bool) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("control", "", "the control socket `PATH` given to 'wanopt run --control'")
	js := fs.Bool("json", false, "print the edge's JSON answer")
	return fs, path, js
}

// runStatus is 'wanopt status': the edge's tunnel and counters.
func runStatus(args []string, stdout, stderr io.Writer) error {
	fs, path, js := controlFlags("status", stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var r statusReport
	if err := queryControl(*path, "status", &r); err != nil {
		return err
	}
	if *js {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(stdout, "edge: %s, up %v\n", r.Config, r.Uptime.Round(time.Second))
	if t := r.Tunnel; t != nil {
		cc := t.Congestion
		if t.BBRMode != "" {
			cc = fmt.Sprintf("%s (%s, %d ProbeRTTs)", cc, t.BBRMode, t.ProbeRTTs)
		}
		fmt.Fprintf(stdout, "tunnel: up, peer %s, %s, %s, srtt %v, min rtt %v, bandwidth %.1f Mbit/s, pacing %.1f Mbit/s, cwnd %d B, in flight %d B\n",
			t.Peer, cc, t.Cipher, t.SmoothedRTT.Round(100*time.Microsecond), t.MinRTT.Round(100*time.Microsecond),
			float64(t.BandwidthBps)/1e6, float64(t.PacingRateBps)/1e6, t.Cwnd, t.InFlight)
		fmt.Fprintf(stdout, "        sent %d B, received %d B, lost %d packets, retransmitted %d B, %d streams open, stream buffers %.1f of %.0f MiB\n",
			t.BytesSent, t.BytesReceived, t.PacketsLost, t.Retransmitted, t.StreamsOpen, float64(t.BudgetUsedBytes)/(1<<20), float64(t.BudgetBytes)/(1<<20))
	} else {
		fmt.Fprintln(stdout, "tunnel: down")
	}
	if s := r.Ingress; s != nil {
		fmt.Fprintf(stdout, "ingress: %d flows, %d SYNs (%d dropped), dialed %d, refused %d, not allowed %d, unreachable %d, timed out %d, errors %d\n",
			s.ActiveFlows, s.SYNs, s.ForwarderDrops, s.Dialed, s.Refused, s.NotAllowed, s.Unreachable, s.Timeouts, s.DialErrors)
	}
	g := r.Egress
	fmt.Fprintf(stdout, "egress: %d flows, %d streams, connected %d, not allowed %d, refused %d, unreachable %d, timed out %d, overloaded %d, failed %d, %d B up, %d B down\n",
		g.Active, g.Streams, g.Connected, g.NotAllowed, g.Refused, g.Unreachable, g.TimedOut, g.Overloaded, g.Failed, g.BytesUp, g.BytesDown)
	return nil
}

// runFlows is 'wanopt flows': the flows through the edge now.
func runFlows(args []string, stdout, stderr io.Writer) error {
	fs, path, js := controlFlags("flows", stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var fl []flowReport
	if err := queryControl(*path, "flows", &fl); err != nil {
		return err
	}
	if *js {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(fl)
	}
	if len(fl) == 0 {
		fmt.Fprintln(stdout, "no flows")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SIDE\tSOURCE\tDESTINATION\tSTATE\tUP (B)\tDOWN (B)\tUP Mbit/s\tDOWN Mbit/s\tTUNNEL RTT\tAGE")
	for _, f := range fl {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%.1f\t%.1f\t%v\t%v\n", f.Side, f.Src, f.Dst, f.State, f.BytesUp, f.BytesDown,
			float64(f.RateUpBps)/1e6, float64(f.RateDownBps)/1e6, f.TunnelRTT.Round(100*time.Microsecond), f.Age.Round(time.Millisecond))
	}
	return tw.Flush()
}
