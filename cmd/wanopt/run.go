package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"github.com/wanopt/wanopt/dgram"
	"github.com/wanopt/wanopt/edge"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/internal/cpulimit"
	"golang.org/x/sys/unix"
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
		e, err := cfg.newEdge()
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "configuration OK: %s\n", e.Summary())
		if cfg.TUN != "" && cfg.NearRules.HasTCPPass() {
			fmt.Fprintf(stdout, "note: %s\n", passTCPNote)
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

// passTCPNote is what --check notes when a near rule passes TCP (the
// edge logs the same when it starts): only the far edge knows whether it
// can send the passed packets on.
const passTCPNote = "a --near-rule passes TCP unterminated: the far edge must run with --egress transparent (its own TUN, from which it sends the clients' packets on); a far edge with kernel egress drops them and counts them as unsupported datagrams ('wanopt status' there)"

// newEdge builds the edge the settings configure.
func (c *runConfig) newEdge() (runningEdge, error) {
	ec, err := c.roleConfig()
	if err != nil {
		return nil, err
	}
	return newEdge(ec)
}

// reloader reads the same command line again for a reload, and with it
// the config file: what the operator edited. Settings of the command
// itself (logging, threads) need a restart, as some of the edge's do.
func reloader(args []string, cfg *runConfig) func() (edge.Config, error) {
	return func() (edge.Config, error) {
		next, err := parseRunConfig(args, io.Discard)
		if err != nil {
			return nil, err
		}
		if next.LogLevel != cfg.LogLevel || next.LogJSON != cfg.LogJSON || next.Procs != cfg.Procs {
			return nil, errors.New("--log-level, --log-format and --procs cannot change without a restart")
		}
		if next.Control == "" {
			// The socket runEdge chose when --control was not given.
			next.Control = cfg.Control
		}
		return next.roleConfig()
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
	if cfg.Control == "" {
		cfg.Control = defaultControl(controlSocketDefault, log)
	}
	cfg.Logger = log
	e, err := cfg.newEdge()
	if err != nil {
		return err
	}
	// The garbage collector works to keep the process within the budget
	// and the fixed overhead, unless the operator set GOMEMLIMIT.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(e.Memory().RuntimeLimitBytes)
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
	stopNotify := notifySystemd(ctx, e, e.Role(), log)
	defer stopNotify()
	return inFlags(e.Run(ctx))
}

// defaultControl returns path, the control socket of an edge run without
// --control, once its directory exists and this process may create the
// socket there; else "" (no control socket) after a warning. Only a
// --control given explicitly makes a socket that cannot be made an error.
func defaultControl(path string, log *slog.Logger) string {
	dir := filepath.Dir(path)
	warn := func(why string, err error) string {
		log.Warn("no control socket: status, flows and reload will not reach this edge", "sub", "control", "path", path,
			"why", why, "err", err, "hint", "give --control PATH (a writable place), or run with the rights to create "+dir)
		return ""
	}
	// Group and others may enter it; the socket's own mode (0660) says
	// who may talk to the edge.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return warn("cannot create the directory", err)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return warn("the directory is not writable", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return warn("another edge answers there", errors.New("socket in use"))
	}
	return path
}

// runReload is 'wanopt reload': the running edge reads its configuration
// again, as on SIGHUP, and says what changed or why it refused.
func runReload(args []string, stdout, stderr io.Writer) error {
	var r control.Reloaded
	js, done, err := askEdge("reload", reloadSummary, args, stdout, &r, nil)
	if done || err != nil {
		return err
	}
	if r.Error != "" {
		return errors.New(r.Error)
	}
	if js {
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
// into v (the lab's tests ask the edges they start).
func queryControl(path, req string, v any) error {
	if path == "" {
		path = controlSocketDefault
	}
	return control.Query(path, req, v)
}

// The paragraphs of the control commands' help.
const (
	statusSummary = `Show a running edge's tunnels and counters, asked over its control socket.
For each tunnel: up or down, since when, the last handshake and, while it
is down, the handshake attempts unanswered and the last error; on a far
edge, the initiations it refused (unknown keys). Then the flows' counters
and the memory budget. n/a marks a figure without a sample yet. Exit
status: 0 when every tunnel is up, 3 when one is down (or a far edge has
no peer yet), 1 when the edge cannot be reached, 2 for a bad command line.`
	flowsSummary = `List the flows through a running edge now, asked over its control socket:
those it intercepted (ingress) and those it connected (egress), with their
state, bytes and rates each way (up: client to server) and the tunnel's
round trip.`
	reloadSummary = `Make a running edge read its configuration again, as SIGHUP does, and
print what changed. A configuration that does not validate, or that
changes what only a restart can (keys, addresses, the TUN, the memory
budget), is refused with the reason, and the running one stays.`
)

// controlFlags is the flag set of a command that asks a running edge
// (status, flows, reload): the socket and --json.
func controlFlags(name string) (*pflag.FlagSet, *string, *bool) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("control", controlSocketDefault, "the edge's control socket `PATH` (its --control)")
	js := fs.Bool("json", false, "print the edge's answer as JSON")
	return fs, path, js
}

// parseControl parses the command line of the control command name into
// fs (from controlFlags, with the command's own flags added). done
// reports that --help or -h printed the help on stdout; a bad command
// line is a usage error.
func parseControl(fs *pflag.FlagSet, name, summary string, args []string, stdout io.Writer) (done bool, err error) {
	if done, err := parseCommand(fs, "wanopt "+name+" [flags]", summary, args, stdout); done || err != nil {
		return done, err
	}
	if fs.NArg() > 0 {
		return false, usagef("unexpected arguments %q: %s takes only flags", fs.Args(), name)
	}
	return false, nil
}

// askEdge is a control command, name: it parses the command line (the
// command's own flags added by more, if set), asks the edge for name's
// answer into v, and prints it as JSON with --json. done reports that
// --help printed the help, and nothing was asked.
func askEdge(name, summary string, args []string, stdout io.Writer, v any, more func(*pflag.FlagSet)) (js, done bool, err error) {
	fs, path, jsFlag := controlFlags(name)
	if more != nil {
		more(fs)
	}
	if done, err := parseControl(fs, name, summary, args, stdout); done || err != nil {
		return false, done, err
	}
	if err := control.Query(*path, name, v); err != nil {
		return false, false, err
	}
	if !*jsFlag {
		return false, false, nil
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return true, false, enc.Encode(v)
}

// tunnelDown is the exit of 'wanopt status' when a tunnel is down (status
// 3): scripts and health checks tell it from an edge not answering (1).
type tunnelDown struct{ msg string }

func (e tunnelDown) Error() string { return e.msg }
func (e tunnelDown) ExitCode() int { return 3 }

// runStatus is 'wanopt status': the edge's tunnels and counters.
func runStatus(args []string, stdout, stderr io.Writer) error {
	var r control.Status
	js, done, err := askEdge("status", statusSummary, args, stdout, &r, nil)
	if done || err != nil {
		return err
	}
	if !js {
		printStatus(stdout, r, time.Now())
	}
	if down := downTunnels(r); len(down) > 0 {
		return tunnelDown{fmt.Sprintf("%s down", strings.Join(down, ", "))}
	}
	return nil
}

// downTunnels names the edge's tunnels that are down.
func downTunnels(r control.Status) []string {
	var down []string
	if len(r.Peers) == 0 && r.Tunnel == nil {
		down = append(down, "tunnel")
	}
	for _, p := range r.Peers {
		if p.Tunnel == nil {
			down = append(down, peerKind(r)+" "+p.Name)
		}
	}
	return down
}

// peerKind is what the edge's Peers are: a near edge's upstreams or a
// hub's branches.
func peerKind(r control.Status) string {
	if r.Role == "initiator" {
		return "upstream"
	}
	return "branch"
}

// printStatus writes the status for people: a block per subject, its
// title line first, then one labelled fact a line.
func printStatus(w io.Writer, r control.Status, now time.Time) {
	p := &blockWriter{w: w}
	p.title("edge: %s, up %v", r.Role, r.Uptime.Round(time.Second))
	p.wrapped("config", r.Config)
	if len(r.Peers) == 0 {
		name := r.PeerName
		if name == "" {
			name = "peer"
		}
		p.title("tunnel: %s", tunnelHead(r.TunnelState, r.Tunnel != nil, now))
		p.line("peer", "%s, key %s", name, orNA(r.PeerKey))
		printTunnel(p, r.TunnelState, r.Tunnel, r.Role, now)
	}
	for _, peer := range r.Peers {
		p.title("%s %s: %s", peerKind(r), peer.Name, tunnelHead(peer.TunnelState, peer.Tunnel != nil, now))
		p.line("key", "%s", peer.Key)
		if peerKind(r) == "upstream" {
			p.line("routes", "%s", orNA(strings.Join(peer.Routes, ", ")))
		} else {
			p.line("policy", "%s", orText(peer.Policy, "nothing allowed"))
		}
		printTunnel(p, peer.TunnelState, peer.Tunnel, r.Role, now)
		if peerKind(r) == "branch" {
			g := peer.Egress
			p.line("egress", "%d flows, connected %d, not allowed %d", g.Active, g.Connected, g.NotAllowed)
		}
		if s := peer.Datagrams; s != nil {
			p.line("datagrams", "udp %d up, %d down; ping %d up, %d down; %d flows; dropped %d (%d not allowed)",
				s.UDP.PacketsUp, s.UDP.PacketsDown, s.ICMP.PacketsUp, s.ICMP.PacketsDown, s.Flows, s.Drops.Total(), s.Drops.NotAllowed)
		}
	}
	if h := r.Hub; h != nil {
		p.title("hub: %d initiations from unknown keys, %d packets for no session", h.UnknownKey, h.UnknownIndex)
		p.line("answers", "%d REJECTs sent, %d dropped while a branch was behind, %d malformed", h.Rejects, h.QueueDrops, h.Malformed)
		p.line("handshake gate", "%d bad mac1, %d cookies sent, %d rate limited", h.Gate.BadMAC, h.Gate.CookiesSent, h.Gate.RateLimited)
	}
	if f := r.Refused; f != nil {
		p.title("handshakes refused: %d since the edge started", f.Total())
		p.line("by reason", "%d unknown key, %d bad mac1, %d unauthenticated, %d replays, %d rate limited",
			f.UnknownKey, f.BadMAC, f.Unauthenticated, f.Replays, f.RateLimited)
		if l := f.Last; l != nil {
			p.line("last", "%s from %s, %s", strings.ReplaceAll(l.Reason, "_", " "), l.From, ago(now, l.At))
			if l.Key != "" {
				p.line("its key", "%s", l.Key)
			}
			switch l.Reason {
			case "unknown_key":
				p.line("hint", "if that edge should connect, give its key as --peer-key or --branch NAME:KEY")
			case "bad_mac":
				p.line("hint", "the knocking edge lacks this edge's public key: check its --peer-key")
			}
		}
	}
	if s := r.Ingress; s != nil {
		p.title("ingress: %d flows, %d SYNs (%d dropped)", s.ActiveFlows, s.SYNs, s.ForwarderDrops)
		p.line("dialed", "%d; refused %d, not allowed %d, unreachable %d, timed out %d, errors %d",
			s.Dialed, s.Refused, s.NotAllowed, s.Unreachable, s.Timeouts, s.DialErrors)
		p.line("ended", "%d idle timeouts, %d over the memory budget", s.IdleTimeouts, s.OverBudget)
	}
	g := r.Egress
	p.title("egress: %d flows, %d streams", g.Active, g.Streams)
	p.line("connected", "%d; not allowed %d, denied %d, refused %d, unreachable %d, timed out %d", g.Connected, g.NotAllowed, g.Denied, g.Refused, g.Unreachable, g.TimedOut)
	p.line("turned away", "%d overloaded, %d over the memory budget, %d failed, %d idle timeouts", g.Overloaded, g.OverBudget, g.Failed, g.IdleTimeouts)
	p.line("traffic", "%s up, %s down", bytesText(g.BytesUp), bytesText(g.BytesDown))
	for _, d := range []struct {
		name string
		s    *dgram.Stats
	}{{"datagrams in", r.DatagramIngress}, {"datagrams out", r.DatagramEgress}} {
		if d.s == nil {
			continue
		}
		s := d.s
		p.title("%s: udp %d up (%s), %d down (%s)", d.name, s.UDP.PacketsUp, bytesText(s.UDP.BytesUp), s.UDP.PacketsDown, bytesText(s.UDP.BytesDown))
		p.line("ping", "%d up, %d down", s.ICMP.PacketsUp, s.ICMP.PacketsDown)
		p.line("passed tcp", "%d up (%s), %d down (%s), %d flows", s.TCP.PacketsUp, bytesText(s.TCP.BytesUp), s.TCP.PacketsDown, bytesText(s.TCP.BytesDown), s.TCPFlows)
		p.line("flows", "%d (%d opened, %d expired)", s.Flows, s.FlowsOpened, s.FlowsExpired)
		p.line("dropped", "%s", dropsText(s))
	}
	m := r.Memory
	p.title("memory: %d of %d flows admitted (%s floor each), %d refused", m.Flows, m.MaxFlows, bytesText(uint64(m.FloorBytes)), m.FlowsRefused)
	p.line("grants", "%s of %s held, %d taken, %d refused", bytesText(uint64(m.GrantedBytes)), bytesText(uint64(m.GrantLimitBytes)), m.Grants, m.GrantsRefused)
}

// tunnelHead is a tunnel's title: up or down, for how long and since when.
func tunnelHead(ts *control.TunnelState, up bool, now time.Time) string {
	state := "down"
	if up {
		state = "up"
	}
	if ts == nil || ts.Since.IsZero() {
		return state
	}
	return fmt.Sprintf("%s for %v (since %s)", state, now.Sub(ts.Since).Round(time.Second), ts.Since.Local().Format(time.DateTime))
}

// printTunnel writes a tunnel's facts: while down, what its handshakes
// met; while up, its path, rates and counters.
func printTunnel(p *blockWriter, ts *control.TunnelState, t *control.Tunnel, role string, now time.Time) {
	if ts != nil {
		if ts.LastHandshake.IsZero() {
			p.line("last handshake", "none yet")
		} else {
			p.line("last handshake", "%s", ago(now, ts.LastHandshake))
		}
	}
	if t == nil {
		if ts != nil {
			if ts.Peer != "" {
				p.line("address", "%s", withHost(ts.Peer, ts))
			}
			switch {
			case role == "initiator":
				p.line("attempts", "%d handshake%s since it was last up, none answered", ts.HandshakeAttempts, plural(ts.HandshakeAttempts))
			default:
				p.line("waiting", "for the peer's handshake")
			}
			if ts.LastError != "" {
				p.line("last error", "%s", ts.LastError)
			}
		}
		return
	}
	cc := t.Congestion
	if t.BBRMode != "" {
		cc = fmt.Sprintf("%s (%s, %d ProbeRTTs)", cc, t.BBRMode, t.ProbeRTTs)
	}
	p.line("address", "%s, %s, %s", withHost(t.Peer, ts), cc, t.Cipher)
	if t.MinRTT > 0 {
		p.line("rtt", "%s smoothed, %s min", msText(t.SmoothedRTT), msText(t.MinRTT))
	} else {
		p.line("rtt", "n/a (no sample yet)")
	}
	bw := "n/a"
	if t.BandwidthBps > 0 {
		bw = rateText(t.BandwidthBps)
	}
	capped := ""
	if t.RateCapBps != 0 {
		capped = ", share cap " + rateText(t.RateCapBps)
	}
	recv := "n/a"
	if t.RecvRateBps > 0 {
		recv = rateText(t.RecvRateBps)
	}
	p.line("rates", "bandwidth %s, pacing %s%s, receiving %s", bw, rateText(t.PacingRateBps), capped, recv)
	p.line("window", "cwnd %s, in flight %s", bytesText(uint64(t.Cwnd)), bytesText(uint64(t.InFlight)))
	p.line("sent", "%s in %d packets; %d lost, %s retransmitted, %d probe timeouts", bytesText(t.BytesSent), t.PacketsSent, t.PacketsLost, bytesText(t.Retransmitted), t.PTOs)
	p.line("received", "%s in %d packets", bytesText(t.BytesReceived), t.PacketsReceived)
	p.line("streams", "%d open, buffers %s of %s, %s unread", t.StreamsOpen, bytesText(t.BudgetUsedBytes), bytesText(t.BudgetBytes), bytesText(t.UnreadBytes))
	p.line("datagrams", "%d sent, %d received, %d dropped", t.DatagramsSent, t.DatagramsReceived, t.DatagramsDropped)
	p.line("path mtu", "%s", pathMTULine(t))
	p.line("security", "%d unauthenticated datagrams, %d replayed packets, %d rekeys", t.DroppedUnauthenticated, t.DroppedReplays, t.Rekeys)
	p.line("handshakes", "%d replayed, %d refused, %d resumes declined, %d client restarts, %d REJECTs sent",
		t.HandshakeReplays, t.HandshakesRefused, t.ResumesDeclined, t.ClientRestarts, t.RejectsSent)
	p.line("handshake gate", "%d bad mac1, %d cookies sent, %d rate limited", t.HandshakesBadMAC, t.CookiesSent, t.HandshakesRateLimited)
}

// withHost is a peer's address with the host name it was resolved from,
// if any.
func withHost(addr string, ts *control.TunnelState) string {
	if ts == nil || ts.Host == "" {
		return addr
	}
	return addr + " (" + ts.Host + ")"
}

// dropsText lists a datagram side's drops that happened, or "none".
func dropsText(s *dgram.Stats) string {
	x := s.Drops
	var parts []string
	for _, d := range []struct {
		n    uint64
		what string
	}{{x.Policy, "by near rules"}, {x.NotAllowed, "not allowed"}, {x.TooBig, fmt.Sprintf("too big (%d answered, %d over the answers' rate)", s.TooBigAnswered, s.TooBigLimited)},
		{x.QueueFull, "queue full"}, {x.Malformed, "malformed"}, {x.Unsupported, "unsupported"}, {x.NoTunnel, "no tunnel"},
		{x.FlowLimit, "flow limit"}, {x.Unmatched, "unmatched answers"}, {x.SocketErrors, "socket errors"}} {
		if d.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", d.n, d.what))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// blockWriter writes status blocks: a title line, then indented
// "label: fact" lines.
type blockWriter struct{ w io.Writer }

func (b *blockWriter) title(format string, a ...any) {
	fmt.Fprintf(b.w, format+"\n", a...)
}

func (b *blockWriter) line(label, format string, a ...any) {
	fmt.Fprintf(b.w, "  %s: %s\n", label, fmt.Sprintf(format, a...))
}

// wrapped writes a long fact (the configuration's summary) over lines of
// at most about 80 columns, broken after commas.
func (b *blockWriter) wrapped(label, text string) {
	const width = 80
	prefix := "  " + label + ": "
	indent := strings.Repeat(" ", len(prefix))
	line := prefix
	for i, part := range strings.SplitAfter(text, ", ") {
		if i > 0 && len(line)+len(strings.TrimRight(part, " ")) > width {
			fmt.Fprintln(b.w, strings.TrimRight(line, " "))
			line = indent
		}
		line += part
	}
	fmt.Fprintln(b.w, strings.TrimRight(line, " "))
}

// rateText is a rate in bits per second for people: kbit/s, Mbit/s or
// Gbit/s.
func rateText(bps uint64) string {
	switch v := float64(bps); {
	case v >= 1e9:
		return fmt.Sprintf("%.2f Gbit/s", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1f Mbit/s", v/1e6)
	default:
		return fmt.Sprintf("%.1f kbit/s", v/1e3)
	}
}

// bytesText is a byte count for people: B, KiB, MiB or GiB.
func bytesText(n uint64) string {
	switch v := float64(n); {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", v/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	default:
		return fmt.Sprintf("%d B", n)
	}
}

// msText is a duration in milliseconds.
func msText(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

// ago says how long before now t was, and when.
func ago(now, t time.Time) string {
	return fmt.Sprintf("%v ago (%s)", now.Sub(t).Round(time.Second), t.Local().Format(time.DateTime))
}

func plural(n uint64) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func orNA(s string) string { return orText(s, "n/a") }

func orText(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// runFlows is 'wanopt flows': the flows through the edge now.
func runFlows(args []string, stdout, stderr io.Writer) error {
	var fl []control.Flow
	var why *bool
	js, done, err := askEdge("flows", flowsSummary, args, stdout, &fl, func(fs *pflag.FlagSet) {
		why = fs.Bool("why", false, "add what limits each flow now, as this edge sees it: client-window, client-sends, server-window, server-sends, tunnel, memory, far-edge or near-edge (the other edge's side: ask it), idle")
	})
	if done || err != nil || js {
		return err
	}
	if len(fl) == 0 {
		fmt.Fprintln(stdout, "no flows")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	head := "SIDE\tACTION\tSOURCE\tDESTINATION\tSTATE\tUP\tDOWN\tUP RATE\tDOWN RATE\tTUNNEL RTT\tAGE"
	if *why {
		head += "\tWHY"
	}
	fmt.Fprintln(tw, head)
	for _, f := range fl {
		side := f.Side
		if f.Peer != "" {
			side += "/" + f.Peer // a hub's branch
		}
		rtt := "n/a"
		if f.TunnelRTT > 0 {
			rtt = msText(f.TunnelRTT)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%v", side, f.Action, f.Src, f.Dst, f.State, bytesText(f.BytesUp), bytesText(f.BytesDown),
			rateText(f.RateUpBps), rateText(f.RateDownBps), rtt, f.Age.Round(time.Second))
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
