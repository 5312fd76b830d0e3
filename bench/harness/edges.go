package harness

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wanopt/wanopt/bench/cgroup"
	"github.com/wanopt/wanopt/bench/cpuplace"
	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// The edges' addresses in the edges lab (see bench/lab): the near edge
// (edgeA) dials the far edge (edgeB).
const (
	edgeTUN       = "wo0"
	farEdgeTUN    = "wo1" // transparent egress only
	farEdgeListen = "198.18.0.2:4500"
	serverLAN     = "198.18.2.0/24"
	clientLAN     = "198.18.1.0/24"
	// With EdgeOptions.IPv6 the near edge also intercepts the server's
	// IPv6 LAN; with TunnelIPv6 the tunnel crosses the link over IPv6.
	serverLAN6     = "2001:2:0:2::/64"
	clientLAN6     = "2001:2:0:1::/64" // routed into the far edge's TUN with IPv6 and Transparent
	farEdgeListen6 = "[2001:2::2]:4500"
)

// EdgeOptions configure StartEdges.
type EdgeOptions struct {
	// Wanopt is the path of the wanopt binary.
	Wanopt string
	// Allow is the far edge's egress policy (--allow).
	Allow []string
	// Dir holds the keys, the logs and the control sockets; empty: a new
	// temporary folder, removed by Stop.
	Dir string
	// Up bounds the wait for the near edge's tunnel; default 20 s.
	Up time.Duration
	// Transparent runs the far edge with transparent egress on its own TUN:
	// the server sees the client's address.
	Transparent bool
	// Args are added to both edges' command lines (e.g. --wan-rate);
	// NearArgs and FarArgs to one edge's only, after Args.
	Args, NearArgs, FarArgs []string
	// IPv6 routes the server's IPv6 LAN into the near edge's TUN too (the
	// far edge still needs an Allow rule); with Transparent, the client's
	// IPv6 LAN into the far edge's TUN too.
	IPv6 bool
	// TunnelIPv6 runs the tunnel itself over IPv6 (farEdgeListen6).
	TunnelIPv6 bool
	// EdgeCPU, if positive, caps each edge process at that many CPUs with
	// a cgroup (see bench/cgroup); 0: no cap.
	EdgeCPU float64
	// EdgeWeight, if positive, gives each edge process a cgroup of that
	// CPU weight (see cgroup.Limits); 0: none.
	EdgeWeight int
	// CPUs, if not empty, is both edge processes' CPU affinity from their
	// start (see bench/cpuplace); empty: anywhere.
	CPUs unix.CPUSet
}

// Edges is a pair of 'wanopt run' processes in an edges lab: the near edge in
// edgeA intercepting on TUN wo0, the far edge in edgeB, each on a control
// socket (Socket). Stop ends both and puts the plain route back.
type Edges struct {
	l          *lab.Lab
	dir        string
	ownDir     bool
	near, far  *edgeProc
	stopped    bool
	routeMoved bool // edgeA's route to the server's LAN points into wo0
	route6     bool // and so does its route to the server's IPv6 LAN
	farRoute   bool // edgeB's route to the client's LAN points into wo1
	farRoute6  bool // and so does its route to the client's IPv6 LAN
	groups     []*cgroup.Group
}

// edgeProc is one run of an edge: its command line, cgroup and process.
type edgeProc struct {
	name, log string
	host      *lab.Host
	argv      []string
	group     *cgroup.Group // nil: none
	cpus      unix.CPUSet   // empty: anywhere
	cmd       *exec.Cmd
	done      chan error // receives Wait's result once; re-sent by readers
	killed    bool       // by RestartFar: its exit status is no failure
}

// StartEdges starts both edges with fresh keys, waits for their tunnel, and
// routes the server's LAN into the near edge's TUN; on error it stops them.
func StartEdges(ctx context.Context, l *lab.Lab, o EdgeOptions) (*Edges, error) {
	if l.Kind != lab.Edges {
		return nil, fmt.Errorf("wanopt edges need the %q lab, not %q", lab.Edges, l.Kind)
	}
	if o.Up == 0 {
		o.Up = 20 * time.Second
	}
	e := &Edges{l: l}
	var err error
	if e.dir, e.ownDir, err = workDir(o.Dir, "wanbench-edges-", "the edges'"); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			e.Stop()
		}
	}()
	keyA, pubA, err := writeEdgeKey(e.dir, "a.key")
	if err != nil {
		return nil, err
	}
	keyB, pubB, err := writeEdgeKey(e.dir, "b.key")
	if err != nil {
		return nil, err
	}
	listen := farEdgeListen
	if o.TunnelIPv6 {
		listen = farEdgeListen6
	}
	farArgs := []string{"--key", keyB, "--peer-key", pubA, "--listen", listen, "--control", e.Socket("far")}
	for _, a := range o.Allow {
		farArgs = append(farArgs, "--allow", a)
	}
	if o.Transparent {
		e.farRoute = true // --tun-setup moves it; Stop puts it back
		farArgs = append(farArgs, "--egress", "transparent", "--tun", farEdgeTUN, "--tun-setup", "--route", clientLAN)
		if o.IPv6 {
			e.farRoute6 = true
			farArgs = append(farArgs, "--route", clientLAN6)
		}
	}
	farArgs = append(append(farArgs, o.Args...), o.FarArgs...)
	lim := cgroup.Limits{Cores: o.EdgeCPU, Weight: o.EdgeWeight} // each edge gets a group of its own
	if e.far, err = e.start(ctx, l.EdgeB, o.Wanopt, "far", lim, o.CPUs, farArgs...); err != nil {
		return nil, err
	}
	nearArgs := []string{"--key", keyA, "--peer-key", pubB, "--peer", listen,
		"--tun", edgeTUN, "--tun-setup", "--route", serverLAN, "--control", e.Socket("near")}
	if o.IPv6 {
		e.route6 = true // --tun-setup moves it; Stop puts it back
		nearArgs = append(nearArgs, "--route", serverLAN6)
	}
	nearArgs = append(append(nearArgs, o.Args...), o.NearArgs...)
	if e.near, err = e.start(ctx, l.EdgeA, o.Wanopt, "near", lim, o.CPUs, nearArgs...); err != nil {
		return nil, err
	}
	if err := e.waitUp(ctx, "near", o.Up); err != nil {
		return nil, err
	}
	if err := e.waitUp(ctx, "far", 5*time.Second); err != nil {
		return nil, err
	}
	e.routeMoved = true
	if err := routeReplace(ctx, l.EdgeA, serverLAN, edgeTUN); err != nil {
		return nil, err
	}
	if o.IPv6 {
		if err := routeReplace(ctx, l.EdgeA, serverLAN6, edgeTUN); err != nil {
			return nil, err
		}
	}
	ok = true
	return e, nil
}

// Socket is the control socket of the "near" or "far" edge.
func (e *Edges) Socket(side string) string { return filepath.Join(e.dir, side+".sock") }

// Status asks the "near" or "far" edge for its status.
func (e *Edges) Status(side string) (control.Status, error) {
	var r control.Status
	err := e.query(side, "status", &r)
	return r, err
}

// Flows asks the "near" or "far" edge for its flows.
func (e *Edges) Flows(side string) ([]control.Flow, error) {
	var fl []control.Flow
	err := e.query(side, "flows", &fl)
	return fl, err
}

// Tunnel asks the "near" or "far" edge for its tunnel's counters.
func (e *Edges) Tunnel(side string) (control.Tunnel, error) {
	var r control.Status
	if err := e.query(side, "status", &r); err != nil {
		return control.Tunnel{}, err
	}
	if r.Tunnel == nil {
		return control.Tunnel{}, fmt.Errorf("%s edge reports its tunnel down", side)
	}
	return *r.Tunnel, nil
}

// WaitNoFlows waits up to d until neither edge lists a flow, so a new run
// does not start beside a finished one's closing flows.
func (e *Edges) WaitNoFlows(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		busy := 0
		for _, side := range []string{"near", "far"} {
			var flows []control.Flow
			if err := e.query(side, "flows", &flows); err != nil {
				return err
			}
			busy += len(flows)
		}
		if busy == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the edges still list %d flows %v after the transfer", busy, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// query sends req to the side's control socket and decodes the answer.
func (e *Edges) query(side, req string, v any) error {
	if err := control.Query(e.Socket(side), req, v); err != nil {
		return fmt.Errorf("%s edge: %w", side, err)
	}
	return nil
}

// Dir is the folder with the edges' keys, logs and control sockets.
func (e *Edges) Dir() string { return e.dir }

// RestartFar kills the far edge (SIGKILL) and starts it again with the same
// command line, cgroup and log file, without waiting for the tunnel.
func (e *Edges) RestartFar(ctx context.Context) error {
	if e.stopped {
		return errors.New("restart the far edge: the edges were stopped")
	}
	old := e.far
	old.killed = true
	_ = old.cmd.Process.Kill()
	err := <-old.done
	old.done <- err
	p := &edgeProc{name: old.name, log: old.log, host: old.host, argv: old.argv, group: old.group}
	if err := p.run(ctx, e.l, os.O_APPEND); err != nil {
		return err
	}
	e.far = p
	return nil
}

// Stop sends both edges SIGTERM (SIGKILL after 5 s), routes the server's LAN
// over the link again and removes the cgroups and a temporary folder. Its
// error also reports an edge that failed before, unless RestartFar killed
// it. It is safe to call more than once.
func (e *Edges) Stop() error {
	if e.stopped {
		return nil
	}
	e.stopped = true
	var errs []error
	for _, p := range []*edgeProc{e.near, e.far} {
		if p != nil {
			if err := p.stop(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if e.routeMoved {
		if err := routeReplace(ctx, e.l.EdgeA, serverLAN, "wan0"); err != nil {
			errs = append(errs, err)
		}
	}
	if e.route6 {
		if err := routeReplace(ctx, e.l.EdgeA, serverLAN6, "wan0"); err != nil {
			errs = append(errs, err)
		}
	}
	if e.farRoute {
		if err := routeReplace(ctx, e.l.EdgeB, clientLAN, "wan0"); err != nil {
			errs = append(errs, err)
		}
	}
	if e.farRoute6 {
		if err := routeReplace(ctx, e.l.EdgeB, clientLAN6, "wan0"); err != nil {
			errs = append(errs, err)
		}
	}
	// The edges have exited: the groups are empty.
	for _, c := range e.groups {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if e.ownDir {
		_ = os.RemoveAll(e.dir)
	}
	return errors.Join(errs...)
}

// start starts the edge name in h; with a cap or a weight in lim it runs
// in a cgroup of those limits.
func (e *Edges) start(ctx context.Context, h *lab.Host, bin, name string, lim cgroup.Limits, cpus unix.CPUSet, args ...string) (*edgeProc, error) {
	p := &edgeProc{name: name, log: filepath.Join(e.dir, name+".log"), host: h, argv: append([]string{bin, "run"}, args...), cpus: cpus}
	if lim != (cgroup.Limits{}) {
		var err error
		if p.group, err = cgroup.New(cgroup.Root, name, lim); err != nil {
			return nil, fmt.Errorf("the %s edge's cgroup (%g cores, weight %d): %w", name, lim.Cores, lim.Weight, err)
		}
		e.groups = append(e.groups, p.group) // Stop removes it, also on error
	}
	if err := p.run(ctx, e.l, os.O_TRUNC); err != nil {
		return nil, err
	}
	return p, nil
}

// run starts p's process, its output going to its log file (opened with
// flag os.O_TRUNC or os.O_APPEND), in its cgroup if it has one.
func (p *edgeProc) run(ctx context.Context, l *lab.Lab, flag int) error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|flag, 0o644)
	if err != nil {
		return fmt.Errorf("%s edge's log: %w", p.name, err)
	}
	// Ending ctx kills the edge, and so does the lab's Close.
	cmd := l.Command(ctx, p.host, p.argv...)
	cmd.Stdout, cmd.Stderr = f, f
	start := cmd.Start
	if p.cpus.Count() > 0 {
		start = func() error { return cpuplace.StartOn(p.cpus, cmd) }
	}
	if err := start(); err != nil {
		f.Close()
		return fmt.Errorf("start the %s edge (%s) in %s: %w", p.name, p.argv[0], p.host.NS, err)
	}
	p.cmd, p.done = cmd, make(chan error, 1)
	go func() { err := cmd.Wait(); f.Close(); p.done <- err }()
	if p.group != nil {
		// Go cannot run code between fork and exec, so the edge joins
		// just after it started: uncapped only for its first
		// milliseconds, long before anything is measured.
		if err := p.group.Add(cmd.Process.Pid); err != nil {
			_ = p.stop()
			return fmt.Errorf("the %s edge: %w", p.name, err)
		}
	}
	return nil
}

// waitUp waits up to d until the side's edge reports its tunnel up.
func (e *Edges) waitUp(ctx context.Context, side string, d time.Duration) error {
	p := e.near
	if side == "far" {
		p = e.far
	}
	deadline := time.Now().Add(d)
	for {
		var st control.Status
		err := e.query(side, "status", &st)
		if err == nil && st.Tunnel != nil {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("tunnel down")
			}
			return fmt.Errorf("the %s wanopt edge's tunnel was not up within %v (%v); its log ends:\n%s", side, d, err, p.logTail())
		}
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("the %s wanopt edge exited (%v) before its tunnel came up; its log ends:\n%s", side, err, p.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logTail is the end of the edge's log, for an error message.
func (p *edgeProc) logTail() string {
	b, _ := os.ReadFile(p.log)
	return tail(string(b), 1500)
}

// stop ends the edge: SIGTERM, then SIGKILL after 5 s. An edge that had
// already exited is an error if it failed and RestartFar did not kill it.
func (p *edgeProc) stop() error {
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil && !p.killed {
			return fmt.Errorf("the %s wanopt edge had exited before it was stopped: %w", p.name, err)
		}
		return nil // already gone
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			return fmt.Errorf("the %s wanopt edge after SIGTERM: %w", p.name, err)
		}
		return nil
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		err := <-p.done
		p.done <- err
		return fmt.Errorf("the %s wanopt edge did not stop within 5 s of SIGTERM; killed", p.name)
	}
}

// routeReplace points h's route to prefix at dev.
func routeReplace(ctx context.Context, h *lab.Host, prefix, dev string) error {
	out, err := exec.CommandContext(ctx, "ip", "-n", h.NS, "route", "replace", prefix, "dev", dev).CombinedOutput()
	if err != nil {
		return fmt.Errorf("route %s via %s in %s: %w: %s", prefix, dev, h.NS, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// workDir is dir, or if empty a new temporary folder (own) for what's keys
// and logs.
func workDir(dir, pattern, what string) (path string, own bool, err error) {
	if dir != "" {
		return dir, false, nil
	}
	if dir, err = os.MkdirTemp("", pattern); err != nil {
		return "", false, fmt.Errorf("folder for %s keys and logs: %w", what, err)
	}
	return dir, true, nil
}

// writeEdgeKey writes a new key to dir/name; it returns path and public key.
func writeEdgeKey(dir, name string) (path, pub string, err error) {
	k, err := crypt.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("generate an edge key: %w", err)
	}
	path = filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(k.Base64()+"\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("write the edge key: %w", err)
	}
	return path, k.PublicKey().Base64(), nil
}

// FindWanopt returns the wanopt binary to run in the lab: explicit if set,
// else a 'wanopt' next to the running executable, else one on PATH.
func FindWanopt(explicit string) (string, error) {
	const hint = "build it with 'make build' (bin/wanopt) or 'go build -o bin/wanopt ./cmd/wanopt', or name its path"
	if explicit != "" {
		p, err := filepath.Abs(explicit)
		if err == nil {
			_, err = os.Stat(p)
		}
		if err != nil {
			return "", fmt.Errorf("wanopt binary %q: %w; %s", explicit, err, hint)
		}
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "wanopt")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("wanopt"); err == nil {
		return filepath.Abs(p)
	}
	return "", errors.New("no wanopt binary next to this executable or on PATH: " + hint)
}

// CheckEdgeCPU fails early, before minutes of plain-TCP runs, if the edges
// cannot be capped at cores CPUs or given weight, by creating such a group.
func CheckEdgeCPU(cores float64, weight int) error {
	if cores == 0 && weight == 0 {
		return nil
	}
	c, err := cgroup.New(cgroup.Root, "check", cgroup.Limits{Cores: cores, Weight: weight})
	if err != nil {
		return fmt.Errorf("a cgroup for the wanopt edges (%g cores, weight %d): %w", cores, weight, err)
	}
	return c.Close()
}
