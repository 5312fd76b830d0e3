package harness

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/edge/control"
)

// HubOptions configure StartHub.
type HubOptions struct {
	// Wanopt is the wanopt binary; Dir holds keys, config, logs and
	// sockets (empty: a temporary folder, removed by Stop).
	Wanopt, Dir string
	// Branches is how many branches there are (at most 26); Listed how
	// many of them the hub's config file lists at start (0: all).
	Branches, Listed int
	// Lines are added to the hub's config file ('name = value').
	Lines []string
	// Up bounds the wait for the listed branches' tunnels (default 20 s).
	Up time.Duration
	// Transparent runs the hub with transparent egress on its own TUN
	// (wo1), so servers see each branch's clients' addresses. A further
	// branch's near edge and clients share a namespace, so its clients get
	// a second address (ClientAddr), and the hub routes only that one into
	// its TUN.
	Transparent bool
}

// Hub is a far edge serving several branches in an edges lab from a config
// file: branch a is the near edge in edgea, each further branch a namespace
// behind edgea (lab.AddBranch) holding its near edge and clients.
type Hub struct {
	o        HubOptions
	l        *lab.Lab
	dir      string
	ownDir   bool
	hubKey   string
	pubs     []string
	branches []*lab.Host // [0] is edgea
	procs    map[string]*edgeProc
	stopped  bool
}

// BranchName is the name of branch i: "a", "b", ...
func BranchName(i int) string { return string(rune('a' + i)) }

// StartHub adds the branch namespaces to the edges lab l, starts the hub and
// a near edge per branch, and waits for the listed tunnels (or stops them).
func StartHub(ctx context.Context, l *lab.Lab, o HubOptions) (*Hub, error) {
	if o.Branches < 1 || o.Branches > 26 {
		return nil, fmt.Errorf("a hub lab has 1 to 26 branches, not %d", o.Branches)
	}
	if o.Listed == 0 {
		o.Listed = o.Branches
	}
	if o.Up == 0 {
		o.Up = 20 * time.Second
	}
	h := &Hub{o: o, l: l, procs: map[string]*edgeProc{}, branches: []*lab.Host{l.EdgeA}}
	var err error
	if h.dir, h.ownDir, err = workDir(o.Dir, "wanbench-hub-", "the hub's"); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			h.Stop()
		}
	}()
	for k := 1; k < o.Branches; k++ {
		b, err := l.AddBranch(ctx, k)
		if err != nil {
			return nil, err
		}
		h.branches = append(h.branches, b)
	}
	var hubPub string
	if h.hubKey, hubPub, err = writeEdgeKey(h.dir, "hub.key"); err != nil {
		return nil, err
	}
	nearKeys := make([]string, o.Branches)
	h.pubs = make([]string, o.Branches)
	for i := range nearKeys {
		if nearKeys[i], h.pubs[i], err = writeEdgeKey(h.dir, BranchName(i)+".key"); err != nil {
			return nil, err
		}
	}
	if err := h.Configure(o.Listed); err != nil {
		return nil, err
	}
	if err := h.start(ctx, l.EdgeB, "hub", "--config", h.ConfigFile()); err != nil {
		return nil, err
	}
	for i, b := range h.branches {
		if err := h.start(ctx, b, BranchName(i), "--key", nearKeys[i], "--peer-key", hubPub, "--peer", farEdgeListen,
			"--tun", edgeTUN, "--tun-setup", "--route", serverLAN); err != nil {
			return nil, err
		}
	}
	for i := range o.Listed {
		if err := h.WaitUp(ctx, BranchName(i), o.Up); err != nil {
			return nil, err
		}
	}
	// Branch a's clients now go through its near edge.
	if err := routeReplace(ctx, l.EdgeA, serverLAN, edgeTUN); err != nil {
		return nil, err
	}
	if o.Transparent {
		for k := 1; k < o.Branches; k++ {
			b, a := h.branches[k], h.ClientAddr(k).String()
			if out, err := exec.CommandContext(ctx, "ip", "-n", b.NS, "addr", "add", a+"/24", "dev", "lan0").CombinedOutput(); err != nil {
				return nil, fmt.Errorf("branch %s's client address %s: %w: %s", BranchName(k), a, err, strings.TrimSpace(string(out)))
			}
			if out, err := exec.CommandContext(ctx, "ip", "-n", b.NS, "route", "replace", serverLAN, "dev", edgeTUN, "src", a).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("branch %s's route to the server's LAN from %s: %w: %s", BranchName(k), a, err, strings.TrimSpace(string(out)))
			}
		}
	}
	ok = true
	return h, nil
}

// ConfigFile is the hub's config file.
func (h *Hub) ConfigFile() string { return filepath.Join(h.dir, "hub.conf") }

// Configure writes the hub's config file listing the first n branches,
// with HubOptions.Lines and extra lines.
func (h *Hub) Configure(n int, extra ...string) error {
	lines := []string{"key = " + h.hubKey, "listen = " + farEdgeListen}
	if h.o.Transparent {
		// Branch a's clients are the lab's client LAN; the others' have
		// ClientAddr.
		lines = append(lines, "egress = transparent", "tun = "+farEdgeTUN, "tun-setup = true", "route = "+clientLAN)
		for k := 1; k < h.o.Branches; k++ {
			lines = append(lines, "route = "+h.ClientAddr(k).String()+"/32")
		}
	}
	lines = append(lines, h.o.Lines...)
	for i := range n {
		lines = append(lines, "branch = "+BranchName(i)+":"+h.pubs[i])
	}
	lines = append(lines, extra...)
	return os.WriteFile(h.ConfigFile(), []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

// Reload sends the hub SIGHUP: it reads its config file again.
func (h *Hub) Reload() error {
	p := h.procs["hub"]
	if p == nil {
		return fmt.Errorf("the hub is not running")
	}
	return p.cmd.Process.Signal(syscall.SIGHUP)
}

// start runs 'wanopt run args' in host as name (name.log, name.sock).
func (h *Hub) start(ctx context.Context, host *lab.Host, name string, args ...string) error {
	p := &edgeProc{name: name, log: filepath.Join(h.dir, name+".log"), host: host,
		argv: append([]string{h.o.Wanopt, "run", "--log-level", "debug", "--control", h.Socket(name)}, args...)}
	if err := p.run(ctx, h.l, os.O_TRUNC); err != nil {
		return err
	}
	h.procs[name] = p
	return nil
}

// Socket is the control socket of "hub" or of a branch ("a", "b", ...).
func (h *Hub) Socket(name string) string { return filepath.Join(h.dir, name+".sock") }

// Status asks the hub or a branch's near edge for its status.
func (h *Hub) Status(name string) (control.Status, error) {
	var r control.Status
	err := control.Query(h.Socket(name), "status", &r)
	return r, err
}

// WaitUp waits up to d for branch name's near edge to report its tunnel.
func (h *Hub) WaitUp(ctx context.Context, name string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		if s, err := h.Status(name); err == nil && s.Tunnel != nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("branch %s: no tunnel to the hub within %v (logs in %s)", name, d, h.dir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ClientAddr is branch i's clients' address with HubOptions.Transparent: the
// lab's client for branch a, the namespace's second address for the others.
func (h *Hub) ClientAddr(i int) netip.Addr {
	if i == 0 {
		return netip.MustParseAddr("198.18.1.2")
	}
	return netip.AddrFrom4([4]byte{198, 18, byte(20 + i), 3})
}

// ClientNS is the namespace branch i's clients connect from.
func (h *Hub) ClientNS(i int) string {
	if i == 0 {
		return h.l.Client.NS
	}
	return h.branches[i].NS
}

// Log returns the tail of name's log (hub or branch), for a failure.
func (h *Hub) Log(name string, n int) string {
	b, _ := os.ReadFile(filepath.Join(h.dir, name+".log"))
	return tail(string(b), n)
}

// Stop ends every edge (SIGTERM, then a kill after 5 s) and removes a
// temporary folder. The routes and namespaces are the lab's to remove.
func (h *Hub) Stop() {
	if h.stopped {
		return
	}
	h.stopped = true
	for _, p := range h.procs {
		_ = p.stop()
	}
	if h.ownDir {
		os.RemoveAll(h.dir)
	}
}
