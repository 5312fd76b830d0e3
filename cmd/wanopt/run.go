package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"github.com/wanopt/wanopt/dgram"
	"github.com/wanopt/wanopt/edge"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/internal/cpulimit"
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
		fmt.Fprintf(stdout, "configuration OK: %s\n", cfg.Summary())
		if cfg.TUN != "" && cfg.NearRules.HasTCPPass() {
			fmt.Fprintf(stdout, "note: %s\n", edge.PassTCPWarning)
		}
		return nil
	}
	var h slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel})
	if cfg.LogJSON {
		h = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel})
	}
	log := slog.New(h)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.Procs > 0 {
		runtime.GOMAXPROCS(cfg.Procs)
	} else {
		followed := make(chan struct{})
		go func() {
			defer close(followed)
			cpulimit.Self.Follow(ctx, 2*time.Second, log.With("sub", "cpulimit"))
		}()
		defer func() { stop(); <-followed }()
	}
	cfg.Reload = reloader(args, cfg)
	if dir := os.Getenv("WANOPT_CPUPROFILE_DIR"); dir != "" {
		stopProfile, err := startCPUProfile(dir, cfg.Role(), log)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	return runEdge(ctx, cfg, log)
}

// reloader reads the same command line again for a reload, and with it
// the config file: what the operator edited. Settings of the command
// itself (logging, threads) need a restart, as some of the edge's do.
func reloader(args []string, cfg *runConfig) func() (edge.Config, error) {
	return func() (edge.Config, error) {
		next, err := parseRunConfig(args, io.Discard)
		if err != nil {
			return edge.Config{}, err
		}
		if next.LogLevel != cfg.LogLevel || next.LogJSON != cfg.LogJSON || next.Procs != cfg.Procs {
			return edge.Config{}, errors.New("--log-level, --log-format and --procs cannot change without a restart")
		}
		return next.Config, nil
	}
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

// runEdge runs an edge with cfg until ctx ends.
func runEdge(ctx context.Context, cfg *runConfig, log *slog.Logger) error {
	ec := cfg.Config
	ec.Logger = log
	e, err := edge.New(ec)
	if err != nil {
		return err
	}
	// The garbage collector works to keep the process within the budget
	// and the fixed overhead, unless the operator set GOMEMLIMIT.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(ec.RuntimeMemoryLimit())
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-hup:
				if _, err := e.Reload(); err != nil {
					log.Error("SIGHUP: configuration not reloaded", "err", err)
				}
			case <-done:
				return
			}
		}
	}()
	return e.Run(ctx)
}

// runReload is 'wanopt reload': the running edge reads its configuration
// again, as on SIGHUP, and says what changed or why it refused.
func runReload(args []string, stdout, stderr io.Writer) error {
	fs, path, js := controlFlags("reload", stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var r control.Reloaded
	if err := queryControl(*path, "reload", &r); err != nil {
		return err
	}
	if *js {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	if r.Error != "" {
		return errors.New(r.Error)
	}
	if *js {
		return nil
	}
	if len(r.Changed) == 0 {
		fmt.Fprintln(stdout, "reloaded: nothing changed")
	}
	for _, c := range r.Changed {
		fmt.Fprintln(stdout, "reloaded:", c)
	}
	return nil
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
	var r control.Status
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
		fmt.Fprintf(stdout, "        sent %d B, received %d B, lost %d packets, retransmitted %d B, %d streams open, stream buffers %.1f of %.0f MiB, %d B unread\n",
			t.BytesSent, t.BytesReceived, t.PacketsLost, t.Retransmitted, t.StreamsOpen, float64(t.BudgetUsedBytes)/(1<<20), float64(t.BudgetBytes)/(1<<20), t.UnreadBytes)
		fmt.Fprintf(stdout, "        path mtu: %s\n", pathMTULine(t))
		fmt.Fprintf(stdout, "        security: %d unauthenticated datagrams, %d replayed packets, %d replayed and %d refused handshakes, %d resumes declined, %d client restarts, %d REJECTs sent, %d rekeys; handshake gate: %d bad mac1, %d cookies sent, %d rate limited\n",
			t.DroppedUnauthenticated, t.DroppedReplays, t.HandshakeReplays, t.HandshakesRefused, t.ResumesDeclined, t.ClientRestarts, t.RejectsSent, t.Rekeys,
			t.HandshakesBadMAC, t.CookiesSent, t.HandshakesRateLimited)
	} else if len(r.Peers) == 0 {
		fmt.Fprintln(stdout, "tunnel: down")
	}
	for _, p := range r.Peers {
		dg := ""
		if s := p.Datagrams; s != nil {
			dg = fmt.Sprintf("; datagrams: udp %d up, %d down; ping %d up, %d down; %d flows; dropped %d (%d not allowed)",
				s.UDP.PacketsUp, s.UDP.PacketsDown, s.ICMP.PacketsUp, s.ICMP.PacketsDown, s.Flows, s.Drops.Total(), s.Drops.NotAllowed)
		}
		if t := p.Tunnel; t != nil {
			capped := ""
			if t.RateCapBps != 0 {
				capped = fmt.Sprintf(", share cap %.1f Mbit/s", float64(t.RateCapBps)/1e6)
			}
			fmt.Fprintf(stdout, "branch %s: up, peer %s, srtt %v, bandwidth %.1f Mbit/s, pacing %.1f Mbit/s%s, path mtu %s, sent %d B, received %d B, %d streams open; egress %d flows, connected %d, not allowed %d%s; policy %s\n",
				p.Name, t.Peer, t.SmoothedRTT.Round(100*time.Microsecond), float64(t.BandwidthBps)/1e6, float64(t.PacingRateBps)/1e6, capped, pathMTULine(t), t.BytesSent, t.BytesReceived, t.StreamsOpen,
				p.Egress.Active, p.Egress.Connected, p.Egress.NotAllowed, dg, p.Policy)
		} else {
			fmt.Fprintf(stdout, "branch %s: down (key %s); egress connected %d%s; policy %s\n", p.Name, p.Key, p.Egress.Connected, dg, p.Policy)
		}
	}
	if h := r.Hub; h != nil {
		fmt.Fprintf(stdout, "hub: %d initiations from unknown keys, %d packets for no session (%d REJECTs), %d dropped while a branch was behind; handshake gate: %d bad mac1, %d cookies sent, %d rate limited\n",
			h.UnknownKey, h.UnknownIndex, h.Rejects, h.QueueDrops, h.Gate.BadMAC, h.Gate.CookiesSent, h.Gate.RateLimited)
	}
	if s := r.Ingress; s != nil {
		fmt.Fprintf(stdout, "ingress: %d flows, %d SYNs (%d dropped), dialed %d, refused %d, not allowed %d, unreachable %d, timed out %d, errors %d, idle timeouts %d, over budget %d\n",
			s.ActiveFlows, s.SYNs, s.ForwarderDrops, s.Dialed, s.Refused, s.NotAllowed, s.Unreachable, s.Timeouts, s.DialErrors, s.IdleTimeouts, s.OverBudget)
	}
	g := r.Egress
	fmt.Fprintf(stdout, "egress: %d flows, %d streams, connected %d, not allowed %d, denied %d, refused %d, unreachable %d, timed out %d, overloaded %d, over budget %d, failed %d, idle timeouts %d, %d B up, %d B down\n",
		g.Active, g.Streams, g.Connected, g.NotAllowed, g.Denied, g.Refused, g.Unreachable, g.TimedOut, g.Overloaded, g.OverBudget, g.Failed, g.IdleTimeouts, g.BytesUp, g.BytesDown)
	for _, d := range []struct {
		name string
		s    *dgram.Stats
	}{{"datagrams in", r.DatagramIngress}, {"datagrams out", r.DatagramEgress}} {
		if d.s == nil {
			continue
		}
		s, x := d.s, d.s.Drops
		fmt.Fprintf(stdout, "%s: udp %d pkts/%d B up, %d pkts/%d B down; ping %d up, %d down; passed tcp %d pkts/%d B up, %d pkts/%d B down, %d flows; %d flows (%d opened, %d expired); dropped: %d by near rules, %d not allowed, %d too big (%d answered, %d over the answers' rate), %d queue full, %d malformed, %d unsupported, %d no tunnel, %d flow limit, %d unmatched answers, %d socket errors\n",
			d.name, s.UDP.PacketsUp, s.UDP.BytesUp, s.UDP.PacketsDown, s.UDP.BytesDown, s.ICMP.PacketsUp, s.ICMP.PacketsDown,
			s.TCP.PacketsUp, s.TCP.BytesUp, s.TCP.PacketsDown, s.TCP.BytesDown, s.TCPFlows, s.Flows, s.FlowsOpened, s.FlowsExpired,
			x.Policy, x.NotAllowed, x.TooBig, s.TooBigAnswered, s.TooBigLimited, x.QueueFull, x.Malformed, x.Unsupported, x.NoTunnel, x.FlowLimit, x.Unmatched, x.SocketErrors)
	}
	m := r.Memory
	fmt.Fprintf(stdout, "memory: %d of %d flows admitted (%d KiB floor each), %d refused; grants %.1f of %.1f MiB held, %d taken, %d refused\n",
		m.Flows, m.MaxFlows, m.FloorBytes>>10, m.FlowsRefused, float64(m.GrantedBytes)/(1<<20), float64(m.GrantLimitBytes)/(1<<20), m.Grants, m.GrantsRefused)
	return nil
}

// runFlows is 'wanopt flows': the flows through the edge now.
func runFlows(args []string, stdout, stderr io.Writer) error {
	fs, path, js := controlFlags("flows", stderr)
	why := fs.Bool("why", false, "add what limits each flow now, as this edge sees it: client-window, client-sends, server-window, server-sends, tunnel, memory, far-edge or near-edge (the other edge's side: ask it), idle")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var fl []control.Flow
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
	head := "SIDE\tACTION\tSOURCE\tDESTINATION\tSTATE\tUP (B)\tDOWN (B)\tUP Mbit/s\tDOWN Mbit/s\tTUNNEL RTT\tAGE"
	if *why {
		head += "\tWHY"
	}
	fmt.Fprintln(tw, head)
	for _, f := range fl {
		side := f.Side
		if f.Peer != "" {
			side += "/" + f.Peer // a hub's branch
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%.1f\t%.1f\t%v\t%v", side, f.Action, f.Src, f.Dst, f.State, f.BytesUp, f.BytesDown,
			float64(f.RateUpBps)/1e6, float64(f.RateDownBps)/1e6, f.TunnelRTT.Round(100*time.Microsecond), f.Age.Round(time.Millisecond))
		if *why {
			fmt.Fprintf(tw, "\t%s", f.Why)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// pathMTULine says what the tunnel's path MTU discovery found: the UDP
// payload size and the IP packet it makes.
func pathMTULine(t *control.Tunnel) string {
	state := "found"
	if t.PathMTUSearching {
		state = "searching"
	}
	return fmt.Sprintf("%d B datagrams (%s; ceiling %d B, %d probes lost, %d black holes)",
		t.PathMTUBytes, state, t.PathMTUCeiling, t.PMTUProbesLost, t.PMTUBlackHoles)
}
