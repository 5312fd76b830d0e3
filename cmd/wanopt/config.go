package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/wanopt/wanopt/edge"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/ingress"
	"github.com/wanopt/wanopt/internal/units"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// runConfig is the validated configuration of 'wanopt run': the edge's
// configuration and what only the command uses. parseRunConfig builds it
// from flags and an optional config file, so the edge never sees either.
type runConfig struct {
	edgeSettings
	// Procs is GOMAXPROCS for the edge (--procs); 0: Go's default.
	Procs    int
	LogLevel slog.Level
	// LogJSON writes logs as JSON lines (--log-format json).
	LogJSON bool
	// Check validates and exits.
	Check bool
}

// runSummary is the paragraph of 'wanopt run --help'.
const runSummary = `Run an edge. A near edge intercepts the TCP routed into a TUN device and
carries it to its peer (--tun, --peer); a far edge accepts the tunnel and
connects the flows its policy allows (--listen, --allow); one edge may do
both. Flags may come from a file (--config FILE, one 'name = value' line
each; the command line wins). Every flag is described in wanopt(8) and
docs/guide/configuration.md.`

// runExamples follow the paragraph of 'wanopt run --help'.
const runExamples = `Examples:
  far edge:  wanopt run --key far.key --peer-key NEAR_PUB --listen :4500 --allow 198.18.2.0/24:443
  near edge: wanopt run --key near.key --peer-key FAR_PUB --peer 192.0.2.2:4500 --tun wo0
  check:     wanopt run --config /etc/wanopt/near.conf --check`

// runFlags holds the raw flag values.
type runFlags struct {
	config, tun, key, peerKey, listen, peer, peerName, cc, logLevel, logFormat, control, capture, egress, wanRate, hubRate, metrics string
	tunSetup, check                                                                                                                 bool
	tunAddrs, routes, allow, deny, branches, branchAllow, upstreams, upstreamRoutes, nearRules                                      []string
	mtu, tunnelMTU, maxFlows, memoryMiB, procs                                                                                      int
	dialTimeout, peerTimeout, flowIdle                                                                                              time.Duration
	// src holds, for each flag the config file set, where each of its
	// values came from ("FILE:LINE"); flags set on the command line or
	// left at their default are absent.
	src map[string][]string
}

// runFlagGroups orders the flags of 'wanopt run' for its help and its
// manual page. Every flag is in one group (TestRunFlagGroups).
var runFlagGroups = []flagGroup{
	{title: "Configuration", names: []string{"config", "check"}},
	{title: "Keys and peers", names: []string{"key", "peer-key", "listen", "peer", "peer-name"}},
	{title: "Ingress (near edge)", names: []string{"tun", "tun-setup", "tun-addr", "route", "mtu", "near-rule"},
		note: "RULE is ACTION:PROTO:CIDR[:PORTS], e.g. pass:tcp:198.18.2.2/32:22 (first match wins)"},
	{title: "Egress policy (far edge)", names: []string{"allow", "deny", "egress", "dial-timeout"},
		note: "CIDR[:PORTS] is e.g. 198.18.2.0/24:80,443,8000-8100 or [2001:db8::/32]:443"},
	{title: "Hub and upstreams", names: []string{"branch", "branch-allow", "hub-rate", "upstream", "upstream-route"},
		note: "ADDR of --peer and --upstream may be a host name, looked up again while the tunnel is down"},
	{title: "Tunnel", names: []string{"cc", "wan-rate", "tunnel-mtu", "peer-timeout"},
		note: "RATE is bits per second with a unit: 50mbit, 50Mbps, 50M, 1gbit, 1Gbps"},
	{title: "Limits", names: []string{"memory-mib", "max-flows", "flow-idle-timeout", "procs"}},
	{title: "Operations", names: []string{"control", "metrics", "log-level", "log-format", "capture"},
		note: "without --control: " + controlSocketDefault + ", if /run/wanopt can be made"},
}

// controlSocketDefault is where 'wanopt run' answers, and status, flows and
// reload ask, when --control is not given.
const controlSocketDefault = "/run/wanopt/wanopt.sock"

// newRunFlagSet defines the flags of 'wanopt run': the one definition the
// help, the config file, the manual page, the completions and the
// configuration reference's test read. Each usage is one short line; the
// detail is in docs/guide/configuration.md. pflag's own messages go to
// out (the commands discard them and word their own errors).
func newRunFlagSet(f *runFlags, out io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {}
	fs.StringVar(&f.config, "config", "", "read flags from `FILE` ('name = value' lines)")
	fs.BoolVar(&f.check, "check", false, "check the configuration and the key, then exit")

	fs.StringVar(&f.key, "key", "", "read this edge's private key from `FILE`")
	fs.StringVar(&f.peerKey, "peer-key", "", "the peer edge's public key, `BASE64` ('wanopt pubkey')")
	fs.StringVar(&f.listen, "listen", "", "accept the tunnel on UDP `ADDR:PORT` (:PORT: every address)")
	fs.StringVar(&f.peer, "peer", "", "open the tunnel to UDP `ADDR:PORT` (or HOST:PORT)")
	fs.StringVar(&f.peerName, "peer-name", "", "the one peer's `NAME` in metrics and logs (default: peer)")

	fs.StringVar(&f.tun, "tun", "", "intercept the TCP routed into the TUN device `NAME`")
	fs.BoolVar(&f.tunSetup, "tun-setup", false, "create the device, set its addresses, MTU and routes")
	fs.StringArrayVar(&f.tunAddrs, "tun-addr", nil, "with --tun-setup: the device's address `CIDR`")
	fs.StringArrayVar(&f.routes, "route", nil, "with --tun-setup: route `CIDR` into the device")
	fs.IntVar(&f.mtu, "mtu", 0, "the device's MTU, `BYTES` (default: keep it, or 1500)")
	fs.StringArrayVar(&f.nearRules, "near-rule", nil, "optimise, pass or drop the flows `RULE` matches")

	fs.StringArrayVar(&f.allow, "allow", nil, "connect only flows to `CIDR[:PORTS]`")
	fs.StringArrayVar(&f.deny, "deny", nil, "never connect `CIDR[:PORTS]`, despite --allow")
	fs.StringVar(&f.egress, "egress", "kernel", "connect as `MODE`: kernel or transparent")
	fs.DurationVar(&f.dialTimeout, "dial-timeout", egress.DefaultDialTimeout, "give up connecting a server after `DURATION`")

	fs.StringArrayVar(&f.branches, "branch", nil, "be a hub for the near edge `NAME:KEY`")
	fs.StringArrayVar(&f.branchAllow, "branch-allow", nil, "let a branch reach more: `NAME:CIDR[:PORTS]`")
	fs.StringVar(&f.hubRate, "hub-rate", "", "at a hub: share the link's `RATE` fairly among branches")
	fs.StringArrayVar(&f.upstreams, "upstream", nil, "dial the far edge `NAME:KEY@ADDR:PORT`")
	fs.StringArrayVar(&f.upstreamRoutes, "upstream-route", nil, "route flows to CIDR via an upstream: `NAME:CIDR`")

	fs.StringVar(&f.cc, "cc", "bbr", "congestion control `NAME`: bbr or cubic")
	fs.StringVar(&f.wanRate, "wan-rate", "", "start the tunnel at the WAN's `RATE`, if known")
	fs.IntVar(&f.tunnelMTU, "tunnel-mtu", 1500, "the tunnel's largest IP packet, `BYTES`")
	fs.DurationVar(&f.peerTimeout, "peer-timeout", tunnel.DefaultIdleTimeout, "end the tunnel after `DURATION` of silence")

	fs.IntVar(&f.memoryMiB, "memory-mib", edge.DefaultMemoryMiB, "memory budget for flows, `MiB`")
	fs.IntVar(&f.maxFlows, "max-flows", egress.DefaultMaxFlows, "refuse flows beyond `N` open at once")
	fs.DurationVar(&f.flowIdle, "flow-idle-timeout", edge.DefaultFlowIdleTimeout, "reset flows idle for `DURATION` (0: never)")
	fs.IntVar(&f.procs, "procs", 0, "run on at most `N` threads (0: as the load needs)")

	fs.StringVar(&f.control, "control", "", "answer status, flows and reload on the socket `PATH`")
	fs.StringVar(&f.metrics, "metrics", "", "serve /metrics, /healthz and /readyz on HTTP `ADDR:PORT`")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log as `FORMAT`: text (key=value) or json")
	fs.StringVar(&f.capture, "capture", "", "write the TUN's packet headers to pcap files in `DIR`")

	for name, values := range map[string][]string{
		"cc": {"bbr", "cubic"}, "egress": {"kernel", "transparent"},
		"log-level": {"debug", "info", "warn", "error"}, "log-format": {"text", "json"},
	} {
		fs.SetAnnotation(name, valuesAnnotation, values)
	}
	return fs
}

// parseRunConfig parses args (and the config file they name) and validates
// the result. Errors are usage errors (errUsage) worded for the operator;
// --help gives pflag.ErrHelp. Notes that are not errors (a host name with
// several addresses) go to warn.
func parseRunConfig(args []string, warn io.Writer) (*runConfig, error) {
	var f runFlags
	fs := newRunFlagSet(&f, io.Discard)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected arguments %q: run takes only flags", fs.Args())
	}
	if f.config != "" {
		if err := f.applyConfigFile(fs, f.config); err != nil {
			return nil, err
		}
	}
	return f.validate(warn)
}

// applyConfigFile sets every flag the file names that the command line did
// not set, and records where each value came from.
func (f *runFlags) applyConfigFile(fs *pflag.FlagSet, path string) error {
	file, err := os.Open(path)
	if err != nil {
		return usagef("config file %s: %s", path, fileProblem(err))
	}
	defer file.Close()
	onCmdline := map[string]bool{}
	fs.Visit(func(fl *pflag.Flag) { onCmdline[fl.Name] = true })
	first := map[string]int{} // line of a non-repeatable setting
	f.src = map[string][]string{}
	sc := bufio.NewScanner(file)
	for n := 1; sc.Scan(); n++ {
		at := fmt.Sprintf("%s:%d", path, n)
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, val, hasVal := strings.Cut(line, "=")
		name, val = strings.TrimSpace(name), strings.TrimSpace(val)
		fl := fs.Lookup(name)
		switch {
		case fl == nil && strings.HasPrefix(name, "-") && fs.Lookup(strings.TrimLeft(name, "-")) != nil:
			return usagef("%s: write the setting %q without dashes: %s = …", at, name, strings.TrimLeft(name, "-"))
		case fl == nil:
			return usagef("%s: unknown setting %q (settings are run's long flag names; see 'wanopt help run')", at, name)
		case name == "config" || name == "check":
			return usagef("%s: %q cannot be set in a config file, only on the command line", at, name)
		case !hasVal && fl.Value.Type() != "bool":
			return usagef("%s: %s needs a value: %s = %s", at, name, name, placeholder(fl))
		case hasVal && val == "":
			return usagef("%s: %s has no value (remove the line to leave it unset)", at, name)
		}
		if !hasVal {
			val = "true" // a bare boolean flag
		}
		if _, repeatable := fl.Value.(pflag.SliceValue); !repeatable {
			if l, dup := first[name]; dup {
				return usagef("%s: %s is given twice, here and on line %d (only repeatable settings such as allow take several lines)", at, name, l)
			}
			first[name] = n
		}
		if onCmdline[name] {
			continue
		}
		if err := fs.Set(name, val); err != nil {
			return usagef("%s: %s %s", at, name, valueProblem(err))
		}
		f.src[name] = append(f.src[name], at)
	}
	if err := sc.Err(); err != nil {
		return usagef("config file %s: %s", path, fileProblem(err))
	}
	return nil
}

// label names the i-th value of the flag name for an error: "--allow" on
// the command line, "FILE:LINE: allow" from the config file.
func (f *runFlags) label(name string, i int) string {
	if at := f.src[name]; i < len(at) {
		return at[i] + ": " + name
	}
	return "--" + name
}

// mentioned matches the flags an error names.
var mentioned = regexp.MustCompile(`--([a-z][a-z0-9-]*)`)

// annotate adds to msg where the config file set the flags it names, so
// that an error about a combination of settings still leads to the lines.
func (f *runFlags) annotate(msg string) string {
	var at []string
	seen := map[string]bool{}
	for _, m := range mentioned.FindAllStringSubmatch(msg, -1) {
		name := m[1]
		if seen[name] {
			continue
		}
		seen[name] = true
		for _, a := range f.src[name] {
			at = append(at, a+" "+name)
		}
	}
	if len(at) == 0 {
		return msg
	}
	return msg + " (" + strings.Join(at, ", ") + ")"
}

// validate checks the flags and converts them; the key file is read here so
// that --check catches a missing or malformed key, and host names are
// resolved here (the edge looks them up again while a tunnel is down).
func (f *runFlags) validate(warn io.Writer) (*runConfig, error) {
	flowIdle := f.flowIdle
	if flowIdle == 0 {
		flowIdle = -1 // never, in edge.Shared's terms
	}
	c := &runConfig{edgeSettings: edgeSettings{Shared: edge.Shared{LAN: edge.LAN{TUN: f.tun, TUNSetup: f.tunSetup, MTU: f.mtu, CaptureDir: f.capture},
		DialTimeout: f.dialTimeout, PeerTimeout: f.peerTimeout, FlowIdleTimeout: flowIdle,
		MaxFlows: f.maxFlows, MemoryMiB: f.memoryMiB, Control: f.control, Resolver: lookupIP, FieldName: flagOf}, PeerName: f.peerName}, Check: f.check}
	var err error
	if f.listen != "" {
		if c.Listen, err = parseListen(f.listen); err != nil {
			return nil, usagef("%s %s: %v", f.label("listen", 0), f.listen, err)
		}
	}
	if f.peer != "" {
		if c.Peer, c.PeerHost, err = resolveAddrPort(f.peer, warn, f.label("peer", 0)); err != nil {
			return nil, usagef("%s %s: %v", f.label("peer", 0), f.peer, err)
		}
	}
	if f.key != "" {
		if c.PrivateKey, err = readKeyFile(f.key); err != nil {
			return nil, usagef("%s", f.annotate(err.Error()))
		}
	}
	if f.peerKey != "" {
		if c.PeerKey, err = crypt.ParsePublicKey(strings.TrimSpace(f.peerKey)); err != nil {
			return nil, usagef("%s: %v", f.label("peer-key", 0), err)
		}
	}
	for i, s := range f.allow {
		r, err := egress.ParseRule(s)
		if err != nil {
			return nil, usagef("%s %s: %s", f.label("allow", i), s, ruleProblem(s))
		}
		c.Policy.Rules = append(c.Policy.Rules, r)
	}
	for i, s := range f.deny {
		r, err := egress.ParseRule(s)
		if err != nil {
			return nil, usagef("%s %s: %s", f.label("deny", i), s, ruleProblem(s))
		}
		c.Policy.Deny = append(c.Policy.Deny, r)
	}
	if c.Branches, err = f.parseBranches(); err != nil {
		return nil, err
	}
	for i, s := range f.nearRules {
		r, err := ingress.ParseRule(s)
		if err != nil {
			return nil, usagef("%s %s: %s", f.label("near-rule", i), s, nearRuleProblem(s))
		}
		c.NearRules = append(c.NearRules, r)
	}
	if c.Upstreams, err = f.parseUpstreams(warn); err != nil {
		return nil, err
	}
	switch strings.ToLower(f.egress) {
	case "kernel":
	case "transparent":
		c.Transparent = true
	default:
		return nil, usagef("%s %s: want kernel or transparent", f.label("egress", 0), f.egress)
	}
	for i, s := range f.tunAddrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, usagef("%s %s: %s (want CIDR, e.g. 198.18.3.1/30)", f.label("tun-addr", i), s, prefixProblem(s))
		}
		c.TUNAddrs = append(c.TUNAddrs, p)
	}
	for i, s := range f.routes {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, usagef("%s %s: %s (want CIDR, e.g. 198.18.2.0/24)", f.label("route", i), s, prefixProblem(s))
		}
		c.TUNRoutes = append(c.TUNRoutes, p.Masked())
	}
	for _, x := range []struct {
		name string
		n    int
	}{{"tun-addr", len(f.tunAddrs)}, {"route", len(f.routes)}} {
		if x.n > 0 && (!f.tunSetup || f.tun == "") {
			return nil, usagef("%s", f.annotate(fmt.Sprintf("--%s needs --tun-setup and --tun: the edge sets it when it sets up the TUN device", x.name)))
		}
	}
	// Zero means the default in edge.Shared; on the command line it is a
	// mistake.
	if f.dialTimeout <= 0 {
		return nil, usagef("%s %v: must be positive", f.label("dial-timeout", 0), f.dialTimeout)
	}
	if f.maxFlows <= 0 {
		return nil, usagef("%s %d: must be positive", f.label("max-flows", 0), f.maxFlows)
	}
	if f.memoryMiB == 0 {
		return nil, usagef("%s 0: want %d to %d", f.label("memory-mib", 0), edge.MinMemoryMiB, edge.MaxMemoryMiB)
	}
	switch strings.ToLower(f.cc) {
	case "bbr":
		c.CC = tunnel.CCBBR
	case "cubic":
		c.CC = tunnel.CCCubic
	default:
		return nil, usagef("%s %s: want bbr or cubic", f.label("cc", 0), f.cc)
	}
	if f.procs < 0 {
		return nil, usagef("%s %d: want 0 (chosen as the load needs) or a number of threads", f.label("procs", 0), f.procs)
	}
	c.Procs = f.procs
	c.TunnelMTU = f.tunnelMTU
	for _, r := range []struct {
		name, val string
		bps       *uint64
	}{{"hub-rate", f.hubRate, &c.HubRateBps}, {"wan-rate", f.wanRate, &c.WANRateBps}} {
		if r.val == "" {
			continue
		}
		v, err := units.ParseRate(r.val)
		if err == nil && v == 0 {
			err = errors.New("want a rate above zero (leave it out for none)")
		}
		if err != nil {
			return nil, usagef("%s %s: %v", f.label(r.name, 0), r.val, err)
		}
		*r.bps = v
	}
	if err := c.LogLevel.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, usagef("%s %s: want debug, info, warn or error", f.label("log-level", 0), f.logLevel)
	}
	switch f.logFormat {
	case "text":
	case "json":
		c.LogJSON = true
	default:
		return nil, usagef("%s %s: want text or json", f.label("log-format", 0), f.logFormat)
	}
	if f.metrics != "" {
		if _, port, err := net.SplitHostPort(f.metrics); err != nil || port == "" {
			return nil, usagef("%s %s: want ADDR:PORT, e.g. 127.0.0.1:9550", f.label("metrics", 0), f.metrics)
		}
		c.Metrics = f.metrics
	}
	ec, err := c.roleConfig()
	if err == nil {
		err = inFlags(edge.Check(ec))
	}
	if err != nil {
		return nil, usagef("%s", f.annotate(err.Error()))
	}
	return c, nil
}

// parseListen reads --listen ADDR:PORT, or :PORT for every address.
func parseListen(s string) (netip.AddrPort, error) {
	if strings.HasPrefix(s, ":") {
		s = "[::]" + s // every address, IPv4 and IPv6
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, errors.New("want ADDR:PORT, e.g. 198.18.0.2:4500, [2001:db8::2]:4500 or :4500")
	}
	if _, err := parsePortNumber(port); err != nil {
		return netip.AddrPort{}, err
	}
	if looksLikeAddress(host) {
		return netip.AddrPort{}, fmt.Errorf("%s is not an IP address (want ADDR:PORT, e.g. 198.18.0.2:4500 or :4500)", host)
	}
	return netip.AddrPort{}, fmt.Errorf("--listen takes an address of this host, not a host name (want ADDR:PORT, e.g. 198.18.0.2:4500, or :4500 for every address)")
}

// lookupIP resolves a host name (a variable, so that tests need no DNS).
var lookupIP = func(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// resolveAddrPort reads ADDR:PORT or HOST:PORT, resolving a host name now,
// and returns the address and the host name (empty for an address): the
// edge starts with that address and looks the name up again while its
// tunnel is down. A name with several addresses takes the first, which
// it notes on warn.
func resolveAddrPort(s string, warn io.Writer, label string) (_ netip.AddrPort, host string, _ error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, "", nil
	}
	host, portS, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return netip.AddrPort{}, "", errors.New("want ADDR:PORT or HOST:PORT, e.g. 192.0.2.2:4500, [2001:db8::2]:4500 or far.example.net:4500")
	}
	port, err := parsePortNumber(portS)
	if err != nil {
		return netip.AddrPort{}, "", err
	}
	if looksLikeAddress(host) {
		return netip.AddrPort{}, "", fmt.Errorf("%s is not an IP address", host)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := lookupIP(ctx, host)
	if err != nil || len(addrs) == 0 {
		why := "it has no address"
		var dnsErr *net.DNSError
		switch {
		case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
			why = "no such host"
		case errors.As(err, &dnsErr) && dnsErr.IsTimeout, errors.Is(err, context.DeadlineExceeded):
			why = "the DNS server did not answer"
		case err != nil:
			why = "the lookup failed"
		}
		return netip.AddrPort{}, "", fmt.Errorf("the host name %s did not resolve (%s): check the name and this host's DNS, or give the address", host, why)
	}
	a := addrs[0].Unmap()
	if len(addrs) > 1 && warn != nil {
		fmt.Fprintf(warn, "note: %s %s: %s has %d addresses; using %s\n", label, s, host, len(addrs), a)
	}
	return netip.AddrPortFrom(a, port), host, nil
}

// looksLikeAddress reports whether host was meant as an IP address (digits
// and dots, or a colon) rather than a name.
func looksLikeAddress(host string) bool {
	return strings.Contains(host, ":") || strings.Trim(host, "0123456789.") == ""
}

// parsePortNumber reads a UDP or TCP port, 1 to 65535.
func parsePortNumber(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return uint16(n), nil
}

// parseBranches reads --branch NAME:KEY and --branch-allow NAME:RULE.
func (f *runFlags) parseBranches() ([]edge.Branch, error) {
	var out []edge.Branch
	at := map[string]int{}
	for i, v := range f.branches {
		l := f.label("branch", i)
		name, key, ok := strings.Cut(v, ":")
		if !ok {
			return nil, usagef("%s %s: want NAME:KEY, e.g. paris:BASE64KEY", l, v)
		}
		k, err := crypt.ParsePublicKey(key)
		if err != nil {
			return nil, usagef("%s %s: %v", l, name, err)
		}
		at[name] = len(out)
		out = append(out, edge.Branch{Name: name, Key: k})
	}
	for i, v := range f.branchAllow {
		l := f.label("branch-allow", i)
		name, rule, ok := strings.Cut(v, ":")
		j, known := at[name]
		switch {
		case !ok:
			return nil, usagef("%s %s: want NAME:CIDR[:PORTS], e.g. paris:198.18.2.0/24:443", l, v)
		case !known:
			return nil, usagef("%s %s: no --branch named %q", l, v, name)
		}
		r, err := egress.ParseRule(rule)
		if err != nil {
			return nil, usagef("%s %s: %s", l, v, ruleProblem(rule))
		}
		out[j].Allow = append(out[j].Allow, r)
	}
	return out, nil
}

// parseUpstreams reads --upstream NAME:KEY@ADDR:PORT (or HOST:PORT,
// resolved now and kept beside the address) and --upstream-route
// NAME:CIDR.
func (f *runFlags) parseUpstreams(warn io.Writer) ([]edge.Upstream, error) {
	var out []edge.Upstream
	at := map[string]int{}
	for i, v := range f.upstreams {
		l := f.label("upstream", i)
		name, rest, ok1 := strings.Cut(v, ":")
		key, addr, ok2 := strings.Cut(rest, "@")
		if !ok1 || !ok2 {
			return nil, usagef("%s %s: want NAME:KEY@ADDR:PORT, e.g. dc1:BASE64KEY@198.18.0.2:4500", l, v)
		}
		k, err := crypt.ParsePublicKey(key)
		if err != nil {
			return nil, usagef("%s %s: %v", l, name, err)
		}
		ap, host, err := resolveAddrPort(addr, warn, l+" "+name)
		if err != nil {
			return nil, usagef("%s %s: %s: %v", l, name, addr, err)
		}
		at[name] = len(out)
		out = append(out, edge.Upstream{Name: name, Key: k, Addr: ap, Host: host})
	}
	for i, v := range f.upstreamRoutes {
		l := f.label("upstream-route", i)
		name, cidr, ok := strings.Cut(v, ":")
		j, known := at[name]
		switch {
		case !ok:
			return nil, usagef("%s %s: want NAME:CIDR, e.g. dc1:198.18.2.0/24", l, v)
		case !known:
			return nil, usagef("%s %s: no --upstream named %q", l, v, name)
		}
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			return nil, usagef("%s %s: %s (want NAME:CIDR, e.g. dc1:198.18.2.0/24)", l, v, prefixProblem(cidr))
		}
		out[j].Routes = append(out[j].Routes, p.Masked())
	}
	return out, nil
}
