package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/wanopt/wanopt/dgram"
	"github.com/wanopt/wanopt/edge"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/internal/units"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// runConfig is the validated configuration of 'wanopt run': the edge's
// configuration and what only the command uses. parseRunConfig builds it
// from flags and an optional config file, so the edge never sees either.
type runConfig struct {
	edge.Config
	// Procs is GOMAXPROCS for the edge (--procs); 0: Go's default.
	Procs    int
	LogLevel slog.Level
	// LogJSON writes logs as JSON lines (--log-format json).
	LogJSON bool
	// Check validates and exits.
	Check bool
}

const runUsage = `Usage: wanopt run [flags]

Run an edge. The near edge intercepts TCP on a TUN device and dials its peer
(--tun, --peer); the far edge listens for it and connects the flows to the
servers its policy allows (--listen, --allow). One edge may do both.

Examples:
  far edge:  wanopt run --key b.key --peer-key A_PUB --listen 198.18.0.2:4500 --allow 198.18.2.0/24:80,443
  near edge: wanopt run --key a.key --peer-key B_PUB --peer 198.18.0.2:4500 --tun wo0
  validate:  wanopt run --config /etc/wanopt/edge.conf --check

A config file holds one flag per line, 'name = value' with the long flag name
('#' starts a comment; repeat a line for repeatable flags). Flags given on the
command line replace the file's value of the same name.

Flags:
`

// runFlags holds the raw flag values.
type runFlags struct {
	config, tun, key, peerKey, listen, peer, cc, logLevel, logFormat, control, capture, egress, wanRate, hubRate, metrics string
	tunSetup, check                                                                                                       bool
	tunAddrs, routes, allow, deny, branches, branchAllow, upstreams, upstreamRoutes, nearRules                            []string
	mtu, tunnelMTU, maxFlows, memoryMiB, procs                                                                            int
	dialTimeout, peerTimeout, flowIdle                                                                                    time.Duration
}

func newRunFlagSet(f *runFlags, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, runUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.config, "config", "", "read flags from `FILE` ('name = value' lines)")
	fs.BoolVar(&f.check, "check", false, "validate the configuration (and read the key) and exit")
	fs.StringVar(&f.tun, "tun", "", "intercept TCP on the TUN device `NAME` (the near edge)")
	fs.BoolVar(&f.tunSetup, "tun-setup", false, "create the TUN device if missing and set its address, MTU and routes (needs CAP_NET_ADMIN)")
	fs.StringArrayVar(&f.tunAddrs, "tun-addr", nil, "with --tun-setup: address of the TUN device, `CIDR` (repeatable)")
	fs.StringArrayVar(&f.routes, "route", nil, "with --tun-setup: route `CIDR` into the TUN device (repeatable)")
	fs.IntVar(&f.mtu, "mtu", 0, "MTU of the TUN device (default: keep the device's; 1500 with --tun-setup)")
	fs.StringVar(&f.key, "key", "", "this edge's private key `FILE` (from 'wanopt keygen --out FILE'; mode 0600 or stricter)")
	fs.StringVar(&f.peerKey, "peer-key", "", "the peer edge's public key, `BASE64`")
	fs.StringVar(&f.listen, "listen", "", "accept the peer's tunnel on UDP `ADDR:PORT` (responder; ':PORT' for every address)")
	fs.StringVar(&f.peer, "peer", "", "open the tunnel to the peer at UDP `ADDR:PORT` (initiator)")
	fs.StringArrayVar(&f.allow, "allow", nil, "egress: connect flows to `CIDR[:PORTS]`, e.g. 198.18.2.0/24:80,443,8000-8100 (repeatable; none: no egress, every flow refused)")
	fs.StringArrayVar(&f.branches, "branch", nil, "make this edge a hub serving the near edge NAME, whose public key is KEY, on --listen: `NAME:KEY` (repeatable; instead of --peer-key). Each branch gets its own tunnel, flows and status")
	fs.StringArrayVar(&f.upstreams, "upstream", nil, "dial the far edge NAME, whose public key is KEY, at ADDR:PORT: `NAME:KEY@ADDR:PORT` (repeatable; instead of --peer and --peer-key). Each intercepted flow goes to the upstream whose --upstream-route holds its destination, the most specific winning")
	fs.StringArrayVar(&f.upstreamRoutes, "upstream-route", nil, "send flows to CIDR through upstream NAME: `NAME:CIDR` (repeatable; a prefix belongs to one upstream)")
	fs.StringArrayVar(&f.branchAllow, "branch-allow", nil, "egress: let branch NAME's flows also reach CIDR[:PORTS], beside what --allow gives every branch: `NAME:CIDR[:PORTS]` (repeatable)")
	fs.StringArrayVar(&f.deny, "deny", nil, "egress: never connect `CIDR[:PORTS]`, whatever --allow says (repeatable). Loopback, unspecified, link-local (169.254.0.0/16, fe80::/10), multicast, broadcast, IPv4-mapped IPv6 and this host's own addresses are refused without it, unless an --allow rule names them explicitly (e.g. --allow 127.0.0.1/32:8080)")
	fs.StringArrayVar(&f.nearRules, "near-rule", nil, "near edge: what to do with the flows the TUN brings, decided on a flow's first packet by the first rule that matches it: `ACTION:PROTO:CIDR[:PORTS]` (repeatable, in order). ACTION is optimise (terminate TCP and carry it as a tunnel stream), pass (carry the IP packets unterminated as tunnel datagrams, so TCP keeps its end-to-end handshake and options) or drop; PROTO is tcp, udp, icmp or any; CIDR[:PORTS] is the destination as --allow spells it. E.g. pass:tcp:198.18.2.2/32:22, drop:udp:0.0.0.0/0:137-139. Without a match TCP is optimised and the rest passed. Passing TCP needs the far edge to run --egress transparent; reloadable")
	fs.StringVar(&f.egress, "egress", "kernel", "egress: how to connect servers: kernel (a socket from this host's address; no privileges) or transparent (from the client's own address through the TUN's stack, so servers see the real client, for TCP, UDP and ping alike; needs --tun and the clients' networks, IPv4 and IPv6, routed into the TUN)")
	fs.DurationVar(&f.dialTimeout, "dial-timeout", egress.DefaultDialTimeout, "egress: give up connecting to a server after this long")
	fs.DurationVar(&f.peerTimeout, "peer-timeout", tunnel.DefaultIdleTimeout, "end the tunnel and reset its flows after this long without a word from the peer; the default outlasts Linux TCP's own retransmission budget (about 15 minutes), so flows outlive any outage TCP would have survived")
	fs.DurationVar(&f.flowIdle, "flow-idle-timeout", edge.DefaultFlowIdleTimeout, "reset a flow that moved no byte either way for this long (a flow waiting on a slow receiver or a WAN outage is not idle); 0: never")
	fs.IntVar(&f.maxFlows, "max-flows", egress.DefaultMaxFlows, "flows open at once, intercepted and connected; more are refused (the memory budget, --memory-mib, may allow fewer)")
	fs.IntVar(&f.memoryMiB, "memory-mib", edge.DefaultMemoryMiB, "memory budget for flows, `MiB`: a quarter for the tunnel's stream buffers and windows, a quarter for the larger buffers of streaming flows, and half for the floors of the flows admitted (about 150 KiB each; more flows are refused); the process needs about 40 MiB beside it")
	fs.IntVar(&f.procs, "procs", 0, "run the edge's goroutines on at most `N` threads at once (GOMAXPROCS); 0: chosen every 2 s, one thread while the edge's cgroup holds it to one CPU or less or while it uses well under a core (less than 0.35 of one, until it uses more than 0.7), else Go's default, every CPU (or the cgroup's CPU limit)")
	fs.StringVar(&f.cc, "cc", "bbr", "tunnel congestion control: bbr or cubic")
	fs.StringVar(&f.hubRate, "hub-rate", "", "at a hub: the rate of the link its branches share, e.g. 250mbit; the hub divides it fairly among the branches that use it (each tunnel is capped at its share, recomputed every 100 ms). Without it, tunnels that start apart keep unequal shares behind a full queue. Empty: no caps")
	fs.IntVar(&f.tunnelMTU, "tunnel-mtu", 1500, "the largest IP packet the tunnel sends, `BYTES`: its path MTU discovery probes up to it and settles on what the path carries (a PPPoE or IPsec underlay carries less than 1500); 'wanopt status' shows the size found. A hub's branches stay within 1500")
	fs.StringVar(&f.wanRate, "wan-rate", "", "the WAN link's rate toward the peer if known, e.g. 50mbit or 1gbit: a new tunnel starts sending at it instead of probing up from ten packets (on a 600 ms path that takes about 5 s); measurements then take over. Empty: probe")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text (key=value) or json (one object per line)")
	fs.StringVar(&f.metrics, "metrics", "", "serve Prometheus metrics on http://`ADDR`/metrics, e.g. 127.0.0.1:9550 (off by default; the metrics show what 'wanopt status' shows, so keep ADDR private)")
	fs.StringVar(&f.control, "control", "", "answer 'wanopt status' and 'wanopt flows' on the unix socket `PATH`")
	fs.StringVar(&f.capture, "capture", "", "write the headers (128 bytes) of every packet crossing the TUN device to pcap files in `DIR` (lan.pcap, rotated at 64 MiB, 4 kept), for 'wanopt analyze'")
	return fs
}

// parseRunConfig parses args (and the config file they name) and validates
// the result. Errors wrap errUsage for a bad command line or configuration.
func parseRunConfig(args []string, stderr io.Writer) (*runConfig, error) {
	var f runFlags
	fs := newRunFlagSet(&f, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected arguments %q: run takes only flags", errUsage, fs.Args())
	}
	if f.config != "" {
		if err := applyConfigFile(fs, f.config); err != nil {
			return nil, err
		}
	}
	return f.validate()
}

// applyConfigFile sets every flag the file names that the command line did
// not set.
func applyConfigFile(fs *pflag.FlagSet, path string) error {
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: config file: %v", errUsage, err)
	}
	defer file.Close()
	onCmdline := map[string]bool{}
	fs.Visit(func(fl *pflag.Flag) { onCmdline[fl.Name] = true })
	sc := bufio.NewScanner(file)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, val, ok := strings.Cut(line, "=")
		name, val = strings.TrimSpace(name), strings.TrimSpace(val)
		if !ok {
			name, val = line, "true" // a bare boolean flag
		}
		fl := fs.Lookup(name)
		switch {
		case fl == nil:
			return fmt.Errorf("%w: %s:%d: unknown setting %q (settings are run's long flag names; see 'wanopt run --help')", errUsage, path, n, name)
		case name == "config" || name == "check":
			return fmt.Errorf("%w: %s:%d: %q cannot be set in a config file", errUsage, path, n, name)
		case onCmdline[name]:
			continue
		}
		if err := fs.Set(name, val); err != nil {
			return fmt.Errorf("%w: %s:%d: %s: %v", errUsage, path, n, name, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: config file %s: %v", errUsage, path, err)
	}
	return nil
}

// validate checks the flags and converts them; the key file is read here so
// that --check catches a missing or malformed key.
func (f *runFlags) validate() (*runConfig, error) {
	bad := func(format string, a ...any) (*runConfig, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{errUsage}, a...)...)
	}
	flowIdle := f.flowIdle
	if flowIdle == 0 {
		flowIdle = -1 // never, in edge.Config's terms
	}
	c := &runConfig{Config: edge.Config{TUN: f.tun, TUNSetup: f.tunSetup, MTU: f.mtu, DialTimeout: f.dialTimeout, PeerTimeout: f.peerTimeout, FlowIdleTimeout: flowIdle,
		MaxFlows: f.maxFlows, MemoryMiB: f.memoryMiB, Control: f.control, CaptureDir: f.capture}, Check: f.check}
	var err error
	if f.listen != "" {
		listen := f.listen
		if strings.HasPrefix(listen, ":") {
			listen = "[::]" + listen // every address, IPv4 and IPv6
		}
		if c.Listen, err = netip.ParseAddrPort(listen); err != nil {
			return bad("--listen %q: %v (want ADDR:PORT, e.g. 198.18.0.2:4500 or [::]:4500)", f.listen, err)
		}
	}
	if f.peer != "" {
		if c.Peer, err = netip.ParseAddrPort(f.peer); err != nil {
			return bad("--peer %q: want the far edge's ADDR:PORT, e.g. 198.18.0.2:4500", f.peer)
		}
	}
	if f.key != "" {
		if c.PrivateKey, err = readKeyFile(f.key); err != nil {
			return bad("%v", err)
		}
	}
	if f.peerKey != "" {
		if c.PeerKey, err = crypt.ParsePublicKey(strings.TrimSpace(f.peerKey)); err != nil {
			return bad("--peer-key: %v", err)
		}
	}
	if c.Policy, err = egress.ParsePolicy(f.allow, f.deny...); err != nil {
		return bad("--allow/--deny: %v", err)
	}
	if c.Branches, err = parseBranches(f.branches, f.branchAllow); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if c.NearRules, err = dgram.ParseNearRules(f.nearRules); err != nil {
		return bad("--near-rule: %v", err)
	}
	if c.Upstreams, err = parseUpstreams(f.upstreams, f.upstreamRoutes); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	switch strings.ToLower(f.egress) {
	case "kernel":
	case "transparent":
		c.Transparent = true
	default:
		return bad("--egress %q: want kernel or transparent", f.egress)
	}
	for _, s := range f.tunAddrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return bad("--tun-addr %q: %v (want CIDR, e.g. 198.18.3.1/30)", s, err)
		}
		c.TUNAddrs = append(c.TUNAddrs, p)
	}
	for _, s := range f.routes {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return bad("--route %q: %v (want CIDR, e.g. 198.18.2.0/24)", s, err)
		}
		c.TUNRoutes = append(c.TUNRoutes, p.Masked())
	}
	// Zero means the default in edge.Config; on the command line it is a
	// mistake.
	if f.dialTimeout <= 0 {
		return bad("--dial-timeout %v: must be positive", f.dialTimeout)
	}
	if f.maxFlows <= 0 {
		return bad("--max-flows %d: must be positive", f.maxFlows)
	}
	if f.memoryMiB == 0 {
		return bad("--memory-mib 0: want %d to %d", edge.MinMemoryMiB, edge.MaxMemoryMiB)
	}
	switch strings.ToLower(f.cc) {
	case "bbr":
		c.CC = tunnel.CCBBR
	case "cubic":
		c.CC = tunnel.CCCubic
	default:
		return bad("--cc %q: want bbr or cubic", f.cc)
	}
	if f.procs < 0 {
		return bad("--procs %d: want 0 (Go's default) or a number of threads", f.procs)
	}
	c.Procs = f.procs
	c.TunnelMTU = f.tunnelMTU
	if f.hubRate != "" {
		if c.HubRateBps, err = units.ParseRate(f.hubRate); err != nil || c.HubRateBps == 0 {
			return bad("--hub-rate %q: want a rate such as 250mbit or 1gbit (bits per second)", f.hubRate)
		}
	}
	if f.wanRate != "" {
		if c.WANRateBps, err = units.ParseRate(f.wanRate); err != nil || c.WANRateBps == 0 {
			return bad("--wan-rate %q: want a rate such as 50mbit, 250mbit or 1gbit (bits per second)", f.wanRate)
		}
	}
	if err := c.LogLevel.UnmarshalText([]byte(f.logLevel)); err != nil {
		return bad("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	switch f.logFormat {
	case "text":
	case "json":
		c.LogJSON = true
	default:
		return bad("--log-format %q: want text or json", f.logFormat)
	}
	if f.metrics != "" {
		if _, _, err := net.SplitHostPort(f.metrics); err != nil {
			return bad("--metrics %q: want HOST:PORT, e.g. 127.0.0.1:9550", f.metrics)
		}
		c.Metrics = f.metrics
	}
	if err := c.Config.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	return c, nil
}

// parseBranches reads --branch NAME:KEY and --branch-allow NAME:RULE.
func parseBranches(branches, allow []string) ([]edge.Branch, error) {
	var out []edge.Branch
	at := map[string]int{}
	for _, v := range branches {
		name, key, ok := strings.Cut(v, ":")
		if !ok {
			return nil, fmt.Errorf("--branch %q: want NAME:KEY, e.g. paris:BASE64KEY", v)
		}
		k, err := crypt.ParsePublicKey(key)
		if err != nil {
			return nil, fmt.Errorf("--branch %s: %v", name, err)
		}
		at[name] = len(out)
		out = append(out, edge.Branch{Name: name, Key: k})
	}
	for _, v := range allow {
		name, rule, ok := strings.Cut(v, ":")
		i, known := at[name]
		switch {
		case !ok:
			return nil, fmt.Errorf("--branch-allow %q: want NAME:CIDR[:PORTS], e.g. paris:198.18.2.0/24:443", v)
		case !known:
			return nil, fmt.Errorf("--branch-allow %q: no --branch named %q", v, name)
		}
		r, err := egress.ParseRule(rule)
		if err != nil {
			return nil, fmt.Errorf("--branch-allow %q: %v", v, err)
		}
		out[i].Allow = append(out[i].Allow, r)
	}
	return out, nil
}

// parseUpstreams reads --upstream NAME:KEY@ADDR:PORT and --upstream-route
// NAME:CIDR.
func parseUpstreams(ups, routes []string) ([]edge.Upstream, error) {
	var out []edge.Upstream
	at := map[string]int{}
	for _, v := range ups {
		name, rest, ok1 := strings.Cut(v, ":")
		key, addr, ok2 := strings.Cut(rest, "@")
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("--upstream %q: want NAME:KEY@ADDR:PORT, e.g. dc1:BASE64KEY@198.18.0.2:4500", v)
		}
		k, err := crypt.ParsePublicKey(key)
		if err != nil {
			return nil, fmt.Errorf("--upstream %s: %v", name, err)
		}
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return nil, fmt.Errorf("--upstream %s: %q: want the far edge's ADDR:PORT", name, addr)
		}
		at[name] = len(out)
		out = append(out, edge.Upstream{Name: name, Key: k, Addr: ap})
	}
	for _, v := range routes {
		name, cidr, ok := strings.Cut(v, ":")
		i, known := at[name]
		switch {
		case !ok:
			return nil, fmt.Errorf("--upstream-route %q: want NAME:CIDR, e.g. dc1:198.18.2.0/24", v)
		case !known:
			return nil, fmt.Errorf("--upstream-route %q: no --upstream named %q", v, name)
		}
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			return nil, fmt.Errorf("--upstream-route %q: %v", v, err)
		}
		out[i].Routes = append(out[i].Routes, p.Masked())
	}
	return out, nil
}
