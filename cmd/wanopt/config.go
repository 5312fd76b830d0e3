package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/wanopt/wanopt/internal/units"
	"github.com/wanopt/wanopt/stack/egress"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// runConfig is the validated configuration of 'wanopt run'. It is built
// from flags and an optional config file by parseRunConfig; run.go builds
// the subsystems from it, so they never see flags or files.
type runConfig struct {
	// TUN is the device the ingress intercepts on; empty: no ingress.
	TUN string
	// TUNSetup creates the device if needed and sets its addresses, MTU,
	// transmit queue and routes (CAP_NET_ADMIN).
	TUNSetup   bool
	TUNAddrs   []netip.Prefix
	TUNRoutes  []netip.Prefix
	MTU        int // 0: keep the device's (attach) or tun.DefaultMTU (setup)
	PrivateKey crypt.PrivateKey
	KeyFile    string
	PeerKey    crypt.PublicKey
	// Exactly one of Listen (responder, the far edge) and Peer (initiator,
	// the near edge) is set.
	Listen, Peer netip.AddrPort
	// Policy is the egress policy; with no rules the edge runs no egress.
	Policy egress.Policy
	// Transparent connects flows from the client's address through the
	// TUN's stack (--egress transparent) instead of a kernel socket.
	Transparent bool
	DialTimeout time.Duration
	// PeerTimeout ends the tunnel, and with it every flow, after this long
	// without a word from the peer (tunnel.Config.IdleTimeout).
	PeerTimeout time.Duration
	// WANRateBps is the WAN's bottleneck rate if the operator gave it
	// (--wan-rate); 0: the tunnel probes it.
	WANRateBps uint64
	MaxFlows   int
	CaptureDir string // pcap of the TUN's packets; "" for none
	// MemoryMiB is the memory budget for flow buffers (see buffers).
	MemoryMiB int
	// Procs is GOMAXPROCS for the edge (--procs); 0: Go's default.
	Procs    int
	CC       tunnel.CongestionControl
	LogLevel slog.Level
	// Control is the unix socket 'wanopt status' and 'flows' query; empty:
	// none.
	Control string
	// Check validates and exits.
	Check bool
}

// The memory budget (--memory-mib). The default gives the tunnel its
// 64 MiB stream budget (enough for 250 Mbit/s at 1 s of RTT twice over) and
// the intercepted connections gVisor's own buffer maxima (4 MiB receive,
// 6 MiB send).
const (
	defaultMemoryMiB = 128
	minMemoryMiB     = 16
	maxMemoryMiB     = 1 << 20
)

// minPeerTimeout keeps a few keepalives (every 10 s, or a third of the
// timeout) inside --peer-timeout.
const minPeerTimeout = 5 * time.Second

// bufferPlan is how the memory budget is split.
type bufferPlan struct {
	// TunnelBytes bounds the tunnel's stream buffers and windows over all
	// flows (tunnel stream.Config.BudgetBytes).
	TunnelBytes uint64
	// Receive and send buffer ranges of each intercepted connection.
	RecvMin, RecvDefault, RecvMax int
	SendMin, SendDefault, SendMax int
}

// buffers splits the memory budget. Only the tunnel's share is a hard cap
// over all flows; gVisor has no stack-wide limit, so the connections' share
// is a per-connection maximum, and buffers are only allocated as data waits
// in them. The LAN side's round trip is short: those buffers need not hold
// the WAN's bandwidth-delay product, which the tunnel's stream windows
// (sized from it) already do.
func (c *runConfig) buffers() bufferPlan {
	total := c.MemoryMiB << 20
	clamp := func(v, lo, hi int) int { return max(lo, min(v, hi)) }
	p := bufferPlan{
		TunnelBytes: uint64(total / 2),
		RecvMin:     4 << 10, SendMin: 4 << 10,
		RecvMax: clamp(total/32, 256<<10, 4<<20),
		SendMax: clamp(total*3/64, 256<<10, 6<<20),
	}
	p.RecvDefault, p.SendDefault = min(1<<20, p.RecvMax), min(1<<20, p.SendMax)
	return p
}

// Ingress reports whether this edge intercepts flows on a TUN.
func (c *runConfig) Ingress() bool { return c.TUN != "" }

// Egress reports whether this edge connects flows for its peer.
func (c *runConfig) Egress() bool { return len(c.Policy.Rules) > 0 }

// Role names the edge's tunnel role for logs.
func (c *runConfig) Role() string {
	if c.Peer.IsValid() {
		return "initiator"
	}
	return "responder"
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
	config, tun, key, peerKey, listen, peer, cc, logLevel, control, capture, egress, wanRate string
	tunSetup, check                                                                          bool
	tunAddrs, routes, allow                                                                  []string
	mtu, maxFlows, memoryMiB, procs                                                          int
	dialTimeout, peerTimeout                                                                 time.Duration
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
	fs.StringVar(&f.key, "key", "", "this edge's private key `FILE` (from 'wanopt keygen')")
	fs.StringVar(&f.peerKey, "peer-key", "", "the peer edge's public key, `BASE64`")
	fs.StringVar(&f.listen, "listen", "", "accept the peer's tunnel on UDP `ADDR:PORT` (responder; ':PORT' for every address)")
	fs.StringVar(&f.peer, "peer", "", "open the tunnel to the peer at UDP `ADDR:PORT` (initiator)")
	fs.StringArrayVar(&f.allow, "allow", nil, "egress: connect flows to `CIDR[:PORTS]`, e.g. 198.18.2.0/24:80,443,8000-8100 (repeatable; none: no egress, every flow refused)")
	fs.StringVar(&f.egress, "egress", "kernel", "egress: how to connect servers: kernel (a socket from this host's address; no privileges) or transparent (from the client's own address through the TUN's stack, so servers see the real client; needs --tun and the clients' networks routed into the TUN)")
	fs.DurationVar(&f.dialTimeout, "dial-timeout", egress.DefaultDialTimeout, "egress: give up connecting to a server after this long")
	fs.DurationVar(&f.peerTimeout, "peer-timeout", tunnel.DefaultIdleTimeout, "end the tunnel and reset its flows after this long without a word from the peer; the default outlasts Linux TCP's own retransmission budget (about 15 minutes), so flows outlive any outage TCP would have survived")
	fs.IntVar(&f.maxFlows, "max-flows", egress.DefaultMaxFlows, "egress: flows connected at once; more are refused")
	fs.IntVar(&f.memoryMiB, "memory-mib", defaultMemoryMiB, "memory budget for flow data, `MiB`: half for the tunnel's stream buffers and windows (all flows), and each intercepted connection's TCP buffers grow to at most 1/32 (receive) and 3/64 (send) of it")
	fs.IntVar(&f.procs, "procs", 0, "run the edge's goroutines on at most `N` threads at once (GOMAXPROCS). 1 spends about an eighth less CPU per byte at 250 Mbit/s, as no second thread spins waiting for work, and caps the edge at one core; 0: Go's default, every CPU (or the cgroup's CPU limit)")
	fs.StringVar(&f.cc, "cc", "bbr", "tunnel congestion control: bbr or cubic")
	fs.StringVar(&f.wanRate, "wan-rate", "", "the WAN link's rate toward the peer if known, e.g. 50mbit or 1gbit: a new tunnel starts sending at it instead of probing up from ten packets (on a 600 ms path that takes about 5 s); measurements then take over. Empty: probe")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
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
	c := &runConfig{TUN: f.tun, TUNSetup: f.tunSetup, MTU: f.mtu, KeyFile: f.key, DialTimeout: f.dialTimeout, PeerTimeout: f.peerTimeout, MaxFlows: f.maxFlows, Control: f.control, Check: f.check, CaptureDir: f.capture}
	switch {
	case f.capture != "" && f.tun == "":
		return bad("--capture records the packets of the TUN device: it needs --tun (the near edge)")
	case f.listen == "" && f.peer == "":
		return bad("say which end of the tunnel this edge is: --listen ADDR:PORT (far edge, responder) or --peer ADDR:PORT (near edge, initiator)")
	case f.listen != "" && f.peer != "":
		return bad("--listen and --peer are exclusive: an edge either accepts the tunnel or opens it")
	}
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
		if c.Peer, err = netip.ParseAddrPort(f.peer); err != nil || c.Peer.Port() == 0 || c.Peer.Addr().IsUnspecified() {
			return bad("--peer %q: want the far edge's ADDR:PORT, e.g. 198.18.0.2:4500", f.peer)
		}
	}
	if f.key == "" {
		return bad("--key FILE is required (make one with 'wanopt keygen > edge.key')")
	}
	raw, err := os.ReadFile(f.key)
	if err != nil {
		return bad("--key: %v", err)
	}
	if c.PrivateKey, err = crypt.ParsePrivateKey(strings.TrimSpace(string(raw))); err != nil {
		return bad("--key %s: %v (the file must hold one base64 key from 'wanopt keygen')", f.key, err)
	}
	if f.peerKey == "" {
		return bad("--peer-key BASE64 is required: the peer's public key ('wanopt pubkey < peer.key')")
	}
	if c.PeerKey, err = crypt.ParsePublicKey(strings.TrimSpace(f.peerKey)); err != nil {
		return bad("--peer-key: %v", err)
	}
	if c.PeerKey == c.PrivateKey.PublicKey() {
		return bad("--peer-key is this edge's own public key; give the other edge's")
	}
	if c.Policy, err = egress.ParsePolicy(f.allow); err != nil {
		return bad("--allow: %v", err)
	}
	switch strings.ToLower(f.egress) {
	case "kernel":
	case "transparent":
		if f.tun == "" {
			return bad("--egress transparent connects servers through the TUN device's stack: it needs --tun NAME, with the clients' networks routed into the device (--route CIDR)")
		}
		c.Transparent = true
	default:
		return bad("--egress %q: want kernel or transparent", f.egress)
	}
	if !c.Ingress() && !c.Egress() {
		return bad("this edge would do nothing: give --tun NAME to intercept flows (near edge) and/or --allow CIDR[:PORTS] to connect them (far edge)")
	}
	if len(f.tun) > 15 {
		return bad("--tun %q: interface names have at most 15 bytes", f.tun)
	}
	if (len(f.tunAddrs) > 0 || len(f.routes) > 0) && !f.tunSetup {
		return bad("--tun-addr and --route need --tun-setup")
	}
	if f.tunSetup && f.tun == "" {
		return bad("--tun-setup needs --tun NAME")
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
	if f.mtu != 0 && (f.mtu < 1280 || f.mtu > 65535) {
		return bad("--mtu %d: want 1280 to 65535", f.mtu)
	}
	if f.dialTimeout <= 0 {
		return bad("--dial-timeout %v: must be positive", f.dialTimeout)
	}
	if f.peerTimeout < minPeerTimeout {
		return bad("--peer-timeout %v: want at least %v (keepalives go every 10 s)", f.peerTimeout, minPeerTimeout)
	}
	if f.maxFlows <= 0 {
		return bad("--max-flows %d: must be positive", f.maxFlows)
	}
	if f.memoryMiB < minMemoryMiB || f.memoryMiB > maxMemoryMiB {
		return bad("--memory-mib %d: want %d to %d", f.memoryMiB, minMemoryMiB, maxMemoryMiB)
	}
	c.MemoryMiB = f.memoryMiB
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
	if f.wanRate != "" {
		if c.WANRateBps, err = units.ParseRate(f.wanRate); err != nil || c.WANRateBps == 0 {
			return bad("--wan-rate %q: want a rate such as 50mbit, 250mbit or 1gbit (bits per second)", f.wanRate)
		}
	}
	if err := c.LogLevel.UnmarshalText([]byte(f.logLevel)); err != nil {
		return bad("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	return c, nil
}
