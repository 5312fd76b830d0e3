// Package lab builds the wanopt test labs: network namespaces joined by the
// userspace WAN emulator (bench/wanem), addressed only from the benchmarking
// ranges 198.18.0.0/15 and 2001:2::/48. Close removes everything a lab
// creates; a new lab first removes leftovers of labs whose process died.
//
// Topologies:
//
//	direct: client[wan0 198.18.0.1] ══link══ server[wan0 198.18.0.2]
//	edges:  client[198.18.1.2] ── edgeA ══link══ edgeB ── server[198.18.2.2]
//	        edgeA: lan0 198.18.1.1, wan0 198.18.0.1; edgeB: wan0 198.18.0.2, lan0 198.18.2.1
//
// The edges lab is dual-stack (Host.Addr6), its IPv6 routes and forwarding
// mirroring the IPv4 ones:
//
//	edges:  client[2001:2:0:1::2] ── edgeA ══link══ edgeB ── server[2001:2:0:2::2]
//	        edgeA: lan0 2001:2:0:1::1, wan0 2001:2::1; edgeB: wan0 2001:2::2, lan0 2001:2:0:2::1
//
// (every prefix a /64). Its namespaces skip duplicate address detection, so
// every address is usable as soon as Build returns. The direct lab and
// branches (AddBranch) are IPv4 only.
//
// The link's two ends are persistent TUN devices named wan0; the link helper
// process (see RunLink) attaches to both and forwards packets between them.
package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Kind names a topology.
type Kind string

// The topologies a lab can build.
const (
	Direct Kind = "direct"
	Edges  Kind = "edges"
)

// namePrefix marks every namespace a lab creates: "wob<pid>-<role>".
const namePrefix = "wob"

var nameRE = regexp.MustCompile(`^` + namePrefix + `([0-9]+)-[a-z]+$`)

// Host is one network namespace of a lab.
type Host struct {
	Role string     // client, server, edgea, edgeb
	NS   string     // network namespace name
	Addr netip.Addr // the address other hosts reach it at
	// Addr6 is its IPv6 address (edges lab only); the zero Addr if none.
	Addr6 netip.Addr
}

// Options configure Build.
type Options struct {
	Kind Kind
	// LinkCommand is the argv that starts the link helper process, which
	// must call RunLink with its standard input and output (wanbench:
	// "wanbench link"). Required for StartLink.
	LinkCommand []string
	// Realtime runs the link helper under 'chrt -f 10' when possible, so
	// that release lateness stays low under load.
	Realtime bool
	// LinkOffload opens the link's TUN devices with UDP segmentation
	// offload (LinkSpec.Offload), so a UDP GSO batch reaches the link whole.
	LinkOffload bool
	// MTU of the WAN link's TUN devices; 0 means 1500.
	MTU    int
	Logger *slog.Logger
}

// Lab is a built topology. Close removes everything it made.
type Lab struct {
	Kind                         Kind
	Client, Server, EdgeA, EdgeB *Host // EdgeA/EdgeB are nil for Direct

	opts  Options
	log   *slog.Logger
	hosts []*Host

	mu    sync.Mutex
	link  *linkProc
	procs []*exec.Cmd
}

// Build creates the topology opts.Kind. On error it removes whatever it had
// made. It needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
func Build(ctx context.Context, opts Options) (*Lab, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the lab creates network namespaces and TUN devices: run as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("the lab needs the 'ip' command: apt-get install iproute2")
	}
	if opts.MTU == 0 {
		opts.MTU = 1500
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	RemoveLeftovers(ctx, opts.Logger)
	l := &Lab{Kind: opts.Kind, opts: opts, log: opts.Logger}
	var err error
	switch opts.Kind {
	case Direct:
		err = l.buildDirect(ctx)
	case Edges:
		err = l.buildEdges(ctx)
	default:
		err = fmt.Errorf("unknown lab topology %q: want %q or %q", opts.Kind, Direct, Edges)
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (l *Lab) newHost(ctx context.Context, role, addr string) (*Host, error) {
	h := &Host{Role: role, NS: fmt.Sprintf("%s%d-%s", namePrefix, os.Getpid(), role)}
	if addr != "" {
		h.Addr = netip.MustParseAddr(addr)
	}
	if err := ipCmd(ctx, "netns", "add", h.NS); err != nil {
		return nil, err
	}
	l.hosts = append(l.hosts, h)
	return h, ipCmd(ctx, "-n", h.NS, "link", "set", "lo", "up")
}

// addTUN creates the persistent TUN device wan0 in h with address cidr.
func (l *Lab) addTUN(ctx context.Context, h *Host, cidr string) error {
	mtu := strconv.Itoa(l.opts.MTU)
	steps := [][]string{
		{"-n", h.NS, "tuntap", "add", "dev", "wan0", "mode", "tun"},
		{"-n", h.NS, "link", "set", "wan0", "mtu", mtu, "txqueuelen", "10000", "up"},
		{"-n", h.NS, "addr", "add", cidr, "dev", "wan0"},
	}
	for _, s := range steps {
		if err := ipCmd(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

// addVeth joins a and b with a veth pair named lan0 on both sides.
func addVeth(ctx context.Context, a *Host, aCIDR string, b *Host, bCIDR string) error {
	// Temporary names in a's namespace, so nothing appears in the host's.
	tmpA, tmpB := "tmpa"+strconv.Itoa(os.Getpid()), "tmpb"+strconv.Itoa(os.Getpid())
	steps := [][]string{
		{"-n", a.NS, "link", "add", tmpA, "type", "veth", "peer", "name", tmpB},
		{"-n", a.NS, "link", "set", tmpB, "netns", b.NS},
		{"-n", a.NS, "link", "set", tmpA, "name", "lan0"},
		{"-n", b.NS, "link", "set", tmpB, "name", "lan0"},
		{"-n", a.NS, "addr", "add", aCIDR, "dev", "lan0"},
		{"-n", b.NS, "addr", "add", bCIDR, "dev", "lan0"},
		{"-n", a.NS, "link", "set", "lan0", "up"},
		{"-n", b.NS, "link", "set", "lan0", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

func (l *Lab) buildDirect(ctx context.Context) error {
	var err error
	if l.Client, err = l.newHost(ctx, "client", "198.18.0.1"); err != nil {
		return err
	}
	if l.Server, err = l.newHost(ctx, "server", "198.18.0.2"); err != nil {
		return err
	}
	if err := l.addTUN(ctx, l.Client, "198.18.0.1/24"); err != nil {
		return err
	}
	return l.addTUN(ctx, l.Server, "198.18.0.2/24")
}

func (l *Lab) buildEdges(ctx context.Context) error {
	var err error
	if l.Client, err = l.newHost(ctx, "client", "198.18.1.2"); err != nil {
		return err
	}
	if l.EdgeA, err = l.newHost(ctx, "edgea", "198.18.0.1"); err != nil {
		return err
	}
	if l.EdgeB, err = l.newHost(ctx, "edgeb", "198.18.0.2"); err != nil {
		return err
	}
	if l.Server, err = l.newHost(ctx, "server", "198.18.2.2"); err != nil {
		return err
	}
	if err := l.enableIPv6(ctx); err != nil {
		return err
	}
	if err := addVeth(ctx, l.Client, "198.18.1.2/24", l.EdgeA, "198.18.1.1/24"); err != nil {
		return err
	}
	if err := addVeth(ctx, l.Server, "198.18.2.2/24", l.EdgeB, "198.18.2.1/24"); err != nil {
		return err
	}
	if err := l.addTUN(ctx, l.EdgeA, "198.18.0.1/30"); err != nil {
		return err
	}
	if err := l.addTUN(ctx, l.EdgeB, "198.18.0.2/30"); err != nil {
		return err
	}
	steps := [][]string{
		{"-n", l.Client.NS, "route", "add", "default", "via", "198.18.1.1"},
		{"-n", l.Server.NS, "route", "add", "default", "via", "198.18.2.1"},
		{"-n", l.EdgeA.NS, "route", "add", "198.18.2.0/24", "dev", "wan0"},
		{"-n", l.EdgeB.NS, "route", "add", "198.18.1.0/24", "dev", "wan0"},
	}
	for _, s := range steps {
		if err := ipCmd(ctx, s...); err != nil {
			return err
		}
	}
	for _, h := range []*Host{l.EdgeA, l.EdgeB} {
		if err := l.Sysctl(ctx, h, "net.ipv4.ip_forward", "1"); err != nil {
			return err
		}
	}
	return l.addIPv6(ctx)
}

// The edges lab's IPv6 addresses (see the package comment).
const (
	clientAddr6    = "2001:2:0:1::2"
	edgeALANAddr6  = "2001:2:0:1::1"
	edgeAWANAddr6  = "2001:2::1"
	edgeBWANAddr6  = "2001:2::2"
	edgeBLANAddr6  = "2001:2:0:2::1"
	serverAddr6    = "2001:2:0:2::2"
	clientPrefix6  = "2001:2:0:1::/64"
	serverPrefix6  = "2001:2:0:2::/64"
	prefixLength6  = "/64"
	ipv6SysctlPath = "/proc/sys/net/ipv6"
)

// enableIPv6 turns IPv6 on in the edges lab's namespaces before their devices
// exist, without duplicate address detection, so addresses work at once.
func (l *Lab) enableIPv6(ctx context.Context) error {
	if _, err := os.Stat(ipv6SysctlPath); err != nil {
		return fmt.Errorf("the edges lab is dual-stack and needs IPv6 in the kernel (%s: %w); boot without ipv6.disable=1", ipv6SysctlPath, err)
	}
	for _, h := range []*Host{l.Client, l.EdgeA, l.EdgeB, l.Server} {
		for _, kv := range [][2]string{
			{"net.ipv6.conf.all.disable_ipv6", "0"}, {"net.ipv6.conf.default.disable_ipv6", "0"},
			{"net.ipv6.conf.all.accept_dad", "0"}, {"net.ipv6.conf.default.accept_dad", "0"},
		} {
			if err := l.Sysctl(ctx, h, kv[0], kv[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// addIPv6 makes the built edges lab dual-stack: the addresses (nodad),
// the routes of the IPv4 lab and forwarding on both edges.
func (l *Lab) addIPv6(ctx context.Context) error {
	addrs := []struct {
		h         *Host
		dev, addr string
	}{
		{l.Client, "lan0", clientAddr6},
		{l.EdgeA, "lan0", edgeALANAddr6},
		{l.EdgeA, "wan0", edgeAWANAddr6},
		{l.EdgeB, "wan0", edgeBWANAddr6},
		{l.EdgeB, "lan0", edgeBLANAddr6},
		{l.Server, "lan0", serverAddr6},
	}
	for _, a := range addrs {
		if err := ipCmd(ctx, "-n", a.h.NS, "-6", "addr", "add", a.addr+prefixLength6, "dev", a.dev, "nodad"); err != nil {
			return err
		}
	}
	l.Client.Addr6 = netip.MustParseAddr(clientAddr6)
	l.EdgeA.Addr6 = netip.MustParseAddr(edgeAWANAddr6)
	l.EdgeB.Addr6 = netip.MustParseAddr(edgeBWANAddr6)
	l.Server.Addr6 = netip.MustParseAddr(serverAddr6)
	steps := [][]string{
		{"-n", l.Client.NS, "-6", "route", "add", "default", "via", edgeALANAddr6, "dev", "lan0"},
		{"-n", l.Server.NS, "-6", "route", "add", "default", "via", edgeBLANAddr6, "dev", "lan0"},
		{"-n", l.EdgeA.NS, "-6", "route", "add", serverPrefix6, "dev", "wan0"},
		{"-n", l.EdgeB.NS, "-6", "route", "add", clientPrefix6, "dev", "wan0"},
	}
	for _, s := range steps {
		if err := ipCmd(ctx, s...); err != nil {
			return err
		}
	}
	for _, h := range []*Host{l.EdgeA, l.EdgeB} {
		if err := l.Sysctl(ctx, h, "net.ipv6.conf.all.forwarding", "1"); err != nil {
			return err
		}
	}
	return nil
}

// AddBranch adds to an edges lab a namespace branch<letter> (k = 0 for a)
// at 198.18.(20+k).2 behind edgea, for a near edge and its clients.
func (l *Lab) AddBranch(ctx context.Context, k int) (*Host, error) {
	if l.Kind != Edges || k < 0 || k > 25 {
		return nil, fmt.Errorf("lab: a branch is added to an edges lab, as branch a to z (asked %d)", k)
	}
	net := fmt.Sprintf("198.18.%d", 20+k)
	h, err := l.newHost(ctx, "branch"+string(rune('a'+k)), net+".2")
	if err != nil {
		return nil, err
	}
	dev := fmt.Sprintf("br%d", k)
	steps := [][]string{
		{"-n", l.EdgeA.NS, "link", "add", dev, "type", "veth", "peer", "name", "tmp" + dev},
		{"-n", l.EdgeA.NS, "link", "set", "tmp" + dev, "netns", h.NS},
		{"-n", h.NS, "link", "set", "tmp" + dev, "name", "lan0"},
		{"-n", l.EdgeA.NS, "addr", "add", net + ".1/24", "dev", dev},
		{"-n", h.NS, "addr", "add", net + ".2/24", "dev", "lan0"},
		{"-n", l.EdgeA.NS, "link", "set", dev, "up"},
		{"-n", h.NS, "link", "set", "lan0", "up"},
		{"-n", h.NS, "route", "add", "default", "via", net + ".1"},
		{"-n", l.EdgeB.NS, "route", "add", net + ".0/24", "dev", "wan0"},
	}
	for _, s := range steps {
		if err := ipCmd(ctx, s...); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Hosts lists the lab's namespaces in creation order.
func (l *Lab) Hosts() []*Host { return l.hosts }

// Sysctl sets key to value inside h's namespace.
func (l *Lab) Sysctl(ctx context.Context, h *Host, key, value string) error {
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	return InNetns(h.NS, func() error {
		// /proc/sys/net reflects the namespace of the thread that opens it.
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s in %s: %w", key, value, h.NS, err)
		}
		return nil
	})
}

// Command returns a command that runs argv inside h's namespace; it dies
// with this process and Close kills it. The caller starts and waits for it.
func (l *Lab) Command(ctx context.Context, h *Host, argv ...string) *exec.Cmd {
	args := append([]string{"netns", "exec", h.NS}, argv...)
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	l.mu.Lock()
	l.procs = append(l.procs, cmd)
	l.mu.Unlock()
	return cmd
}

// Close stops the link and every process started through the lab, then
// deletes the lab's namespaces. It is safe to call more than once.
func (l *Lab) Close() error {
	l.StopLink()
	l.mu.Lock()
	procs := l.procs
	l.procs = nil
	l.mu.Unlock()
	for _, c := range procs {
		if c.Process != nil && c.ProcessState == nil {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		}
	}
	var errs []error
	for i := len(l.hosts) - 1; i >= 0; i-- {
		if err := deleteNetns(l.hosts[i].NS); err != nil {
			errs = append(errs, err)
		}
	}
	l.hosts = nil
	return errors.Join(errs...)
}

// deleteNetns kills whatever still runs in the namespace (only lab
// processes can be there) and deletes it.
func deleteNetns(ns string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	return ipCmd(ctx, "netns", "delete", ns)
}

// RemoveLeftovers deletes namespaces left by labs whose process has died.
// Namespaces of live processes, concurrent labs included, are left alone.
func RemoveLeftovers(ctx context.Context, log *slog.Logger) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		m := nameRE.FindStringSubmatch(f[0])
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid() || processAlive(pid) {
			continue
		}
		if log != nil {
			log.Info("removing leftover lab namespace", "netns", f[0])
		}
		_ = deleteNetns(f[0])
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func ipCmd(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
