package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wanopt/wanopt/analyze"
	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/wanem"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/internal/tcptest"
)

// The test binary doubles as the lab's link helper: the lab starts it again
// with this variable set, and TestMain runs the emulator instead of tests.
const linkHelperEnv = "WANOPT_E2E_LINK_HELPER"

func TestMain(m *testing.M) {
	lab.RunLinkHelperIf(linkHelperEnv)
	os.Exit(m.Run())
}

// Lab ports on the server (198.18.2.2): an echo server the egress allows, a
// listener it does not allow, an allowed port nobody listens on, and iperf.
const (
	echoPort      = 7000
	forbiddenPort = 7001
	closedPort    = 7002
	whoamiPort    = 7003 // answers with the client address it sees
	iperfPort     = 5001
	sourcePort    = 7004 // sends the bytes the client asks for (see handleSource)
)

// TestEndToEnd runs two wanopt edges in the edges lab (100 Mbit/s, RTT
// 100 ms or WANOPT_E2E_RTT): edgeA intercepts on TUN wo0 and dials edgeB,
// which connects the flows to the server. It checks a hash-checked 20 MB
// echo each way, a quick RST for a closed port, a refusal for a destination
// outside the egress policy, wanopt status and flows, a clean stop on
// SIGTERM, and compares iperf through wanopt with plain forwarding.
func TestEndToEnd(t *testing.T) {
	needLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rtt := 100 * time.Millisecond
	if v := os.Getenv("WANOPT_E2E_RTT"); v != "" { // e.g. 200ms, for a measurement
		var err error
		if rtt, err = time.ParseDuration(v); err != nil {
			t.Fatalf("WANOPT_E2E_RTT=%q: %v", v, err)
		}
	}
	link := wanem.Config{Delay: rtt / 2, RateBps: 100_000_000}
	l := newLab(t, ctx, link, link)

	// Servers in the server namespace, in this process.
	var forbiddenAccepts atomic.Int64
	serveIn(t, l.Server.NS, echoPort, tcptest.Echo)
	serveIn(t, l.Server.NS, forbiddenPort, func(*net.TCPConn) { forbiddenAccepts.Add(1) })
	_, haveIperf := exec.LookPath("iperf")
	if haveIperf == nil {
		srv := l.Command(ctx, l.Server, "iperf", "-s", "-p", strconv.Itoa(iperfPort))
		if err := srv.Start(); err != nil {
			t.Fatalf("start iperf -s: %v", err)
		}
		defer func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() }()
	}

	// Plain forwarding first: the forbidden port is reachable directly.
	c, err := dialIn(ctx, l.Client.NS, forbiddenPort, 3*time.Second)
	if err != nil {
		t.Fatalf("direct connection to %d (before wanopt): %v", forbiddenPort, err)
	}
	c.Close()
	for deadline := time.Now().Add(2 * time.Second); forbiddenAccepts.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	directAccepts := forbiddenAccepts.Load()
	var plainMbps float64
	if haveIperf == nil {
		plainMbps = runIperf(t, ctx, l)
		t.Logf("plain forwarding: iperf -c 198.18.2.2 -n 20M -P 4 -R: %.1f Mbit/s", plainMbps)
	} else {
		t.Log("iperf is not installed (apt-get install iperf): skipping the throughput comparison")
	}

	// The edges.
	capture := filepath.Join(t.TempDir(), "capture")
	edges := startEdges(t, ctx, l, harness.EdgeOptions{Up: 15 * time.Second,
		Allow:    []string{fmt.Sprintf("198.18.2.2/32:%d,%d,%d", echoPort, closedPort, iperfPort)},
		NearArgs: []string{"--capture", capture}})

	t.Run("echo 20MB each way", func(t *testing.T) {
		const size = 20 << 20
		data := make([]byte, size)
		r := mrand.NewChaCha8([32]byte{42})
		r.Read(data)
		c, err := dialIn(ctx, l.Client.NS, echoPort, 5*time.Second)
		if err != nil {
			t.Fatalf("connect to the echo server through wanopt: %v", err)
		}
		defer c.Close()
		start := time.Now()
		werr := writeAndClose(c, data)
		h := sha256.New()
		c.SetReadDeadline(time.Now().Add(90 * time.Second))
		n, err := io.CopyN(h, c, 1<<20)
		if err != nil {
			t.Fatalf("echo: read %d of the first MB: %v", n, err)
		}
		for _, side := range []string{"near", "far"} {
			code, out, errs := run("flows", "--control", edges.Socket(side))
			if code != 0 || !strings.Contains(out, fmt.Sprintf("198.18.2.2:%d", echoPort)) {
				t.Errorf("%s edge's flows during the echo: code %d, %q, %q", side, code, out, errs)
			}
			t.Logf("%s edge, wanopt flows:\n%s", side, out)
		}
		// Watch the near edge's flow table while the rest moves.
		var (
			maxRateBps uint64
			srtt       time.Duration
			watchDone  = make(chan struct{})
			watched    = make(chan struct{})
		)
		go func() {
			defer close(watched)
			for {
				var fl []control.Flow
				if queryControl(edges.Socket("near"), "flows", &fl) == nil {
					for _, f := range fl {
						maxRateBps = max(maxRateBps, f.RateUpBps, f.RateDownBps)
						srtt = max(srtt, f.TunnelRTT)
					}
				}
				select {
				case <-watchDone:
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
		m, err := io.Copy(h, c)
		close(watchDone)
		<-watched
		n += m
		if err != nil || n != size {
			t.Fatalf("echo: read %d of %d bytes: %v", n, size, err)
		}
		t.Logf("near edge's flow table during the echo: highest current rate %.1f Mbit/s, tunnel srtt %v", float64(maxRateBps)/1e6, srtt.Round(time.Millisecond))
		if maxRateBps == 0 {
			t.Error("the flow table never showed a current rate above 0 during the echo")
		}
		if srtt < rtt || srtt > 10*rtt {
			t.Errorf("the flow table showed the tunnel's srtt as %v on a %v link", srtt, rtt)
		}
		if err := <-werr; err != nil {
			t.Fatalf("echo: write: %v", err)
		}
		want := sha256.Sum256(data)
		if !bytes.Equal(h.Sum(nil), want[:]) {
			t.Fatal("echo: the bytes that came back differ from those sent")
		}
		el := time.Since(start)
		t.Logf("20 MB up and 20 MB back, SHA-256 equal, in %v (%.1f Mbit/s each way)", el.Round(time.Millisecond), float64(size)*8/el.Seconds()/1e6)
	})

	t.Run("closed port gets RST", func(t *testing.T) {
		el := wantRefused(t, ctx, l.Client.NS, closedPort, "closed port")
		// one RTT to the far edge and back, plus the far edge's connect
		if el > rtt+time.Second {
			t.Errorf("closed port refused after %v; want within about one RTT (%v)", el, rtt)
		}
		t.Logf("closed port: connection refused after %v", el.Round(time.Millisecond))
	})

	t.Run("destination outside the policy is refused", func(t *testing.T) {
		el := wantRefused(t, ctx, l.Client.NS, forbiddenPort, "port outside the policy")
		if n := forbiddenAccepts.Load() - directAccepts; n != 0 {
			t.Errorf("the server accepted %d connections on the forbidden port", n)
		}
		t.Logf("port outside the policy: connection refused after %v, server saw nothing", el.Round(time.Millisecond))
	})

	if haveIperf == nil {
		t.Run("iperf through wanopt", func(t *testing.T) {
			mbps := runIperf(t, ctx, l)
			t.Logf("RTT %v, 100 Mbit/s: plain forwarding %.1f Mbit/s, through wanopt %.1f Mbit/s", rtt, plainMbps, mbps)
			fmt.Printf("e2e: rtt_ms=%d rate_mbps=100 plain_mbps=%.1f wanopt_mbps=%.1f\n", rtt.Milliseconds(), plainMbps, mbps)
			code, out, errs := run("status", "--control", edges.Socket("near"))
			if code != 0 || !strings.Contains(out, "tunnel: up") {
				t.Errorf("near edge's status: code %d, %q, %q", code, out, errs)
			}
			t.Logf("near edge, wanopt status:\n%s", out)
			// Every stream of the finished flows is forgotten on both edges.
			for _, side := range []string{"near", "far"} {
				var r control.Status
				sock := edges.Socket(side)
				for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
					if err := queryControl(sock, "status", &r); err != nil || r.Tunnel == nil || r.Tunnel.StreamsOpen == 0 {
						break
					}
				}
				if r.Tunnel == nil || r.Tunnel.StreamsOpen != 0 {
					t.Errorf("%s edge: tunnel %+v 3 s after the flows ended; want up, 0 streams open", side, r.Tunnel)
				}
			}
			if mbps < 50 {
				t.Errorf("through wanopt %.1f Mbit/s on a 100 Mbit/s link; want at least 50", mbps)
			}
		})
	}

	// SIGTERM: both edges stop cleanly and the TUN disappears.
	stopEdges(t, edges)
	if out, err := exec.Command("ip", "-n", l.EdgeA.NS, "link", "show", "wo0").CombinedOutput(); err == nil {
		t.Errorf("wo0 still exists after the near edge stopped: %s", out)
	}

	// --capture: the near edge's LAN-side capture shows the echo flow to
	// the analyser.
	rep, err := analyze.AnalyzeFile(filepath.Join(capture, "lan.pcap"), analyze.Options{})
	if err != nil {
		t.Fatalf("analyse the near edge's capture: %v", err)
	}
	echoAddr := fmt.Sprintf("198.18.2.2:%d", echoPort)
	found := false
	for _, f := range rep.Flows {
		if f.Server == echoAddr && f.Dirs[0].Bytes >= 20<<20 {
			found = true
		}
	}
	if !found {
		t.Errorf("the capture has no flow to %s carrying 20 MB (%d flows)", echoAddr, len(rep.Flows))
	}
}

// needLab skips the test unless it can build the lab: root, the ip command,
// and not -short.
func needLab(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: the end-to-end test builds network namespaces and needs root (run 'sudo go test ./cmd/wanopt/')")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipping: the lab needs the 'ip' command (apt-get install iproute2)")
	}
	if testing.Short() {
		t.Skip("skipping the end-to-end lab test in -short mode")
	}
}

// newLab builds the edges lab, closed when the test ends, and starts the
// link with ab and ba.
func newLab(t *testing.T, ctx context.Context, ab, ba wanem.Config) *lab.Lab {
	t.Helper()
	t.Setenv(linkHelperEnv, "1")
	l, err := lab.Build(ctx, lab.Options{Kind: lab.Edges, LinkCommand: []string{os.Args[0]}, Realtime: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.StartLink(ctx, ab, ba); err != nil {
		t.Fatal(err)
	}
	return l
}

// buildWanopt builds the wanopt binary into dir and returns its path.
func buildWanopt(t *testing.T, ctx context.Context, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "wanopt")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build wanopt: %v\n%s", err, out)
	}
	return bin
}

// startHub builds the wanopt binary and starts a hub and its branches in
// l with the bench's harness (o.Wanopt and o.Dir are filled in). They are
// stopped when the test ends, and their logs shown if it failed.
func startHub(t *testing.T, ctx context.Context, l *lab.Lab, o harness.HubOptions) *harness.Hub {
	t.Helper()
	o.Dir = t.TempDir()
	o.Wanopt = buildWanopt(t, ctx, o.Dir)
	hub, err := harness.StartHub(ctx, l, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hub.Stop()
		if t.Failed() {
			names := []string{"hub"}
			for i := range o.Branches {
				names = append(names, harness.BranchName(i))
			}
			for _, n := range names {
				t.Logf("%s's log (tail):\n%s", n, hub.Log(n, 3000))
			}
		}
	})
	return hub
}

// allowPing lets the processes of h open ping sockets (ICMP and ICMPv6
// echo without privileges), or with allow false forbids them.
func allowPing(t *testing.T, ctx context.Context, l *lab.Lab, h *lab.Host, allow bool) {
	t.Helper()
	groups := "1 0" // an empty range
	if allow {
		groups = "0 2147483647"
	}
	if err := l.Sysctl(ctx, h, "net.ipv4.ping_group_range", groups); err != nil {
		t.Fatal(err)
	}
}

// startEdges builds the wanopt binary and starts the edges in l with the
// bench's harness (o.Wanopt and o.Dir are filled in; the edges log at
// debug level). They are stopped when the test ends, and their logs shown
// if it failed.
func startEdges(t *testing.T, ctx context.Context, l *lab.Lab, o harness.EdgeOptions) *harness.Edges {
	t.Helper()
	o.Dir = t.TempDir()
	o.Wanopt = buildWanopt(t, ctx, o.Dir)
	o.Args = append([]string{"--log-level", "debug"}, o.Args...)
	edges, err := harness.StartEdges(ctx, l, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		edges.Stop()
		if t.Failed() {
			for _, side := range []string{"near", "far"} {
				b, _ := os.ReadFile(filepath.Join(edges.Dir(), side+".log"))
				if len(b) > 6000 {
					b = b[len(b)-6000:]
				}
				t.Logf("%s edge's log (tail):\n%s", side, b)
			}
		}
	})
	return edges
}

// stopEdges stops both edges with SIGTERM and expects a clean exit within
// 5 s, after which their control sockets are gone.
func stopEdges(t *testing.T, edges *harness.Edges) {
	t.Helper()
	if err := edges.Stop(); err != nil {
		t.Error(err)
	}
	for _, side := range []string{"near", "far"} {
		if _, err := os.Stat(edges.Socket(side)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the %s edge's control socket is still there after it stopped (%v)", side, err)
		}
	}
}

// serveIn listens on 198.18.2.2:port in namespace ns and serves each
// connection with handle (tcptest.Serve) until the test ends.
func serveIn(t *testing.T, ns string, port int, handle func(c *net.TCPConn)) {
	t.Helper()
	var ln net.Listener
	err := lab.InNetns(ns, func() error {
		var err error
		ln, err = net.Listen("tcp4", fmt.Sprintf("198.18.2.2:%d", port))
		return err
	})
	if err != nil {
		t.Fatalf("listen on 198.18.2.2:%d in %s: %v", port, ns, err)
	}
	tcptest.Serve(t, ln, handle)
}

// handleWhoami answers a connection with the address it came from.
func handleWhoami(c *net.TCPConn) { fmt.Fprintln(c, c.RemoteAddr()) }

// whoami asks the server which address the client's connection came from,
// and returns it with the client's own end of the connection.
func whoami(t *testing.T, ctx context.Context, ns string) (seen, local string) {
	t.Helper()
	c, err := dialIn(ctx, ns, whoamiPort, 5*time.Second)
	if err != nil {
		t.Fatalf("connect to the whoami server: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("whoami: %v", err)
	}
	return strings.TrimSpace(line), c.LocalAddr().String()
}

// dialIn connects from the client namespace to 198.18.2.2:port.
// wantRefused dials port from ns through the edges and fails t unless
// the connection is refused; it returns how long the refusal took.
func wantRefused(t *testing.T, ctx context.Context, ns string, port int, what string) time.Duration {
	t.Helper()
	start := time.Now()
	c, err := dialIn(ctx, ns, port, 5*time.Second)
	el := time.Since(start)
	if err == nil {
		c.Close()
		t.Fatalf("%s: connection to port %d succeeded", what, port)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("%s: %v after %v; want connection refused", what, err, el)
	}
	return el
}

// writeAndClose writes data to c and closes c's sending side, in a
// goroutine, so the caller can read the echo meanwhile; the channel gets
// the outcome.
func writeAndClose(c net.Conn, data []byte) <-chan error {
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	return werr
}

func dialIn(ctx context.Context, ns string, port int, timeout time.Duration) (net.Conn, error) {
	return dialTo(ctx, ns, netip.AddrPortFrom(netip.MustParseAddr("198.18.2.2"), uint16(port)), timeout)
}

// dialTo connects from namespace ns to dst, IPv4 or IPv6.
func dialTo(ctx context.Context, ns string, dst netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := lab.InNetns(ns, func() error {
		d := net.Dialer{Timeout: timeout}
		network := "tcp4"
		if dst.Addr().Is6() {
			network = "tcp6"
		}
		var err error
		c, err = d.DialContext(ctx, network, dst.String())
		return err
	})
	return c, err
}

var iperfSum = regexp.MustCompile(`\[SUM\].*?([0-9.]+) Mbits/sec`)

// runIperf runs iperf 2 in the client namespace (the published test's
// command, 20 MB) and returns the summed goodput.
func runIperf(t *testing.T, ctx context.Context, l *lab.Lab) float64 {
	t.Helper()
	cmd := l.Command(ctx, l.Client, "iperf", "-c", "198.18.2.2", "-p", strconv.Itoa(iperfPort), "-n", "20M", "-P", "4", "-R", "-f", "m")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("iperf: %v\n%s", err, out)
	}
	m := iperfSum.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		t.Fatalf("iperf printed no [SUM] line:\n%s", out)
	}
	v, _ := strconv.ParseFloat(string(m[len(m)-1][1]), 64)
	if v <= 0 {
		t.Fatalf("iperf: no throughput in %q", strings.TrimSpace(string(m[len(m)-1][0])))
	}
	return v
}

// edgeLab is an edges lab with two running wanopt edges (see
// harness.StartEdges): the near edge in edgeA intercepting on TUN wo0, the far
// edge in edgeB connecting flows to the echo, whoami and source servers in
// the server namespace (run by this process).
type edgeLab struct {
	l     *lab.Lab
	edges *harness.Edges
}

// sock is the control socket of the "near" or "far" edge.
func (e *edgeLab) sock(side string) string { return e.edges.Socket(side) }

// startEdgeLab builds the edges lab, starts the link with ab and ba, an
// echo, a whoami and a source server, and the edges with o (the far edge
// allows the servers' ports unless o.Allow says otherwise). It skips
// without root or the ip command.
func startEdgeLab(t *testing.T, ctx context.Context, ab, ba wanem.Config, o harness.EdgeOptions) *edgeLab {
	t.Helper()
	needLab(t)
	l := newLab(t, ctx, ab, ba)
	serveIn(t, l.Server.NS, echoPort, tcptest.Echo)
	serveIn(t, l.Server.NS, whoamiPort, handleWhoami)
	serveIn(t, l.Server.NS, sourcePort, handleSource)
	if o.Allow == nil {
		o.Allow = []string{fmt.Sprintf("198.18.2.2/32:%d,%d,%d,%d", echoPort, whoamiPort, closedPort, sourcePort)}
	}
	return &edgeLab{l: l, edges: startEdges(t, ctx, l, o)}
}

// echoHashed sends size pseudo-random bytes to the echo server from the
// client namespace, half-closes, reads the echo back and checks its
// SHA-256. It returns the time from connect to the last byte.
func echoHashed(t *testing.T, ctx context.Context, ns string, size int, seed byte, timeout time.Duration) time.Duration {
	t.Helper()
	d, err := echoCheck(ctx, ns, size, seed, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// echoCheck is echoHashed returning its failure, for use beside others.
func echoCheck(ctx context.Context, ns string, size int, seed byte, timeout time.Duration) (time.Duration, error) {
	return echoCheckTo(ctx, ns, netip.AddrPortFrom(netip.MustParseAddr("198.18.2.2"), echoPort), size, seed, timeout)
}

// echoCheckTo is echoCheck with the echo server at dst (IPv4 or IPv6).
func echoCheckTo(ctx context.Context, ns string, dst netip.AddrPort, size int, seed byte, timeout time.Duration) (time.Duration, error) {
	data := make([]byte, size)
	mrand.NewChaCha8([32]byte{seed}).Read(data)
	start := time.Now()
	c, err := dialTo(ctx, ns, dst, 10*time.Second)
	if err != nil {
		return 0, fmt.Errorf("connect to the echo server through wanopt: %w", err)
	}
	defer c.Close()
	werr := writeAndClose(c, data)
	c.SetDeadline(time.Now().Add(timeout))
	h := sha256.New()
	n, err := io.Copy(h, c)
	if err != nil || n != int64(size) {
		return 0, fmt.Errorf("echo: read %d of %d bytes after %v: %v", n, size, time.Since(start).Round(time.Millisecond), err)
	}
	if err := <-werr; err != nil {
		return 0, fmt.Errorf("echo: write: %w", err)
	}
	if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
		return 0, errors.New("echo: the bytes that came back differ from those sent")
	}
	return time.Since(start), nil
}

// waitNoFlows waits until both edges list no flows and no open streams.
func (e *edgeLab) waitNoFlows(t *testing.T, within time.Duration) {
	t.Helper()
	for _, side := range []string{"near", "far"} {
		var (
			fl  []control.Flow
			st  control.Status
			err error
		)
		start := time.Now()
		for deadline := start.Add(within); ; time.Sleep(100 * time.Millisecond) {
			fl, st = nil, control.Status{}
			if err = queryControl(e.sock(side), "flows", &fl); err == nil {
				err = queryControl(e.sock(side), "status", &st)
			}
			idle := err == nil && len(fl) == 0 && st.Tunnel != nil && st.Tunnel.StreamsOpen == 0 &&
				(st.Ingress == nil || st.Ingress.ActiveFlows == 0)
			if idle {
				t.Logf("%s edge: 0 flows, 0 streams open, %v after the last connection closed", side, time.Since(start).Round(time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				ingress := -1
				if st.Ingress != nil {
					ingress = st.Ingress.ActiveFlows
				}
				t.Errorf("%s edge %v after the connections ended: %d flows listed, %d ingress flows, tunnel %+v, err %v; want none",
					side, within, len(fl), ingress, st.Tunnel, err)
				break
			}
		}
	}
}

// TestEdgeLossyLink runs the edges over a 100 ms, 100 Mbit/s link with 1 %
// random loss each way: a hash-checked 8 MB echo each way, then 1,000
// concurrent short connections, after which both edges' flow tables are
// empty again.
func TestEdgeLossyLink(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	link := wanem.Config{Delay: 50 * time.Millisecond, LossPct: 1, RateBps: 100_000_000}
	ab, ba := link, link
	ab.Seed, ba.Seed = 1, 2
	e := startEdgeLab(t, ctx, ab, ba, harness.EdgeOptions{})

	t.Run("8MB each way at 1% loss", func(t *testing.T) {
		const size = 8 << 20
		el := echoHashed(t, ctx, e.l.Client.NS, size, 7, 120*time.Second)
		var st control.Status
		if err := queryControl(e.sock("near"), "status", &st); err != nil || st.Tunnel == nil {
			t.Fatalf("near edge's status: %+v, %v", st.Tunnel, err)
		}
		t.Logf("100 ms RTT, 1%% loss each way: 8 MB up and 8 MB back, SHA-256 equal, in %v (%.1f Mbit/s each way); near edge's tunnel: %d packets lost, %d stream bytes retransmitted, srtt %v",
			el.Round(time.Millisecond), float64(size)*8/el.Seconds()/1e6, st.Tunnel.PacketsLost, st.Tunnel.Retransmitted, st.Tunnel.SmoothedRTT.Round(time.Millisecond))
		if st.Tunnel.PacketsLost == 0 {
			t.Errorf("the near edge's tunnel lost no packets on a link with 1 %% loss: is the loss applied?")
		}
	})

	t.Run("1000 concurrent short connections", func(t *testing.T) {
		const (
			conns   = 1000
			msgSize = 1024
			dialers = 200 // threads in the client namespace dialling at once
		)
		var rl syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < 4*conns {
			rl.Cur = min(max(rl.Max, 4*conns), 1<<20)
			if rl.Max < rl.Cur {
				rl.Max = rl.Cur
			}
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
				t.Logf("raise the file limit to %d: %v", rl.Cur, err)
			}
		}
		start := time.Now()
		var (
			connected = make(chan struct{}) // closed once every dial has ended
			dialWait  = make(chan error, conns)
			results   = make(chan error, conns)
			sem       = make(chan struct{}, dialers)
		)
		for i := range conns {
			go func() {
				msg := make([]byte, msgSize)
				for j := range msg {
					msg[j] = byte(i + j)
				}
				sem <- struct{}{}
				c, err := dialIn(ctx, e.l.Client.NS, echoPort, 60*time.Second)
				<-sem
				dialWait <- err
				if err != nil {
					results <- fmt.Errorf("connection %d: dial: %w", i, err)
					return
				}
				defer c.Close()
				<-connected // all connections are open at once
				c.SetDeadline(time.Now().Add(60 * time.Second))
				if _, err := c.Write(msg); err != nil {
					results <- fmt.Errorf("connection %d: write: %w", i, err)
					return
				}
				back := make([]byte, msgSize)
				if _, err := io.ReadFull(c, back); err != nil {
					results <- fmt.Errorf("connection %d: read: %w", i, err)
					return
				}
				if !bytes.Equal(back, msg) {
					results <- fmt.Errorf("connection %d: the echo differs from what was sent", i)
					return
				}
				results <- c.Close()
			}()
		}
		dialFailed := 0
		for range conns {
			if err := <-dialWait; err != nil {
				dialFailed++
			}
		}
		dialed := time.Since(start)
		var nearFlows, farFlows []control.Flow
		if err := queryControl(e.sock("near"), "flows", &nearFlows); err != nil {
			t.Errorf("near edge's flows: %v", err)
		}
		if err := queryControl(e.sock("far"), "flows", &farFlows); err != nil {
			t.Errorf("far edge's flows: %v", err)
		}
		t.Logf("%d connections open at once after %v (%d dials failed); the near edge lists %d flows, the far edge %d",
			conns-dialFailed, dialed.Round(time.Millisecond), dialFailed, len(nearFlows), len(farFlows))
		if dialFailed == 0 && (len(nearFlows) != conns || len(farFlows) != conns) {
			t.Errorf("with %d connections open, the near edge lists %d flows and the far edge %d; want %d each", conns, len(nearFlows), len(farFlows), conns)
		}
		close(connected)
		var errs []error
		for range conns {
			if err := <-results; err != nil {
				errs = append(errs, err)
			}
		}
		el := time.Since(start)
		for i, err := range errs {
			if i == 10 {
				t.Errorf("... and %d more", len(errs)-10)
				break
			}
			t.Error(err)
		}
		t.Logf("%d of %d concurrent connections wrote and read back %d B in %v", conns-len(errs), conns, msgSize, el.Round(time.Millisecond))
		if len(errs) > 0 {
			t.Fatalf("%d of %d connections failed", len(errs), conns)
		}
		e.waitNoFlows(t, 15*time.Second)
		var st control.Status
		if err := queryControl(e.sock("near"), "status", &st); err == nil && st.Ingress != nil {
			in := st.Ingress
			t.Logf("near edge's stack: %d SYNs, %d dropped by the forwarder's in-flight limit, %d dialled, %d handshakes failed, %d TCP endpoints left (TIME-WAIT included)",
				in.SYNs, in.ForwarderDrops, in.Dialed, in.HandshakeFailed, in.TCPEndpoints)
		}
	})

	stopEdges(t, e.edges)
}

// TestEdgeTransparent runs the far edge with transparent egress: it has its
// own TUN, the clients' network is routed into it, and it connects to the
// server from the client's address and port. The server must see the
// client itself (with kernel egress it sees the far edge, 198.18.2.1); a
// hash-checked echo crosses each way with half-close, a closed port still
// gives the client a RST, and no flow is left behind.
func TestEdgeTransparent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	link := wanem.Config{Delay: 50 * time.Millisecond, RateBps: 100e6}
	e := startEdgeLab(t, ctx, link, link, harness.EdgeOptions{Transparent: true})

	seen, local := whoami(t, ctx, e.l.Client.NS)
	t.Logf("the server saw the connection from %s; the client's end is %s", seen, local)
	if seen != local {
		t.Fatalf("the server saw the connection from %s, want the client's own address and port %s", seen, local)
	}

	const size = 8 << 20
	el := echoHashed(t, ctx, e.l.Client.NS, size, 9, 60*time.Second)
	t.Logf("100 ms RTT, transparent egress: 8 MB up and 8 MB back (client half-closed first), SHA-256 equal, in %v", el.Round(time.Millisecond))

	start := time.Now()
	_, err := dialIn(ctx, e.l.Client.NS, closedPort, 5*time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("connect to a closed port through transparent egress: %v, want connection refused", err)
	}
	t.Logf("closed port: refused after %v", time.Since(start).Round(time.Millisecond))

	e.waitNoFlows(t, 10*time.Second)
	var st control.Status
	if err := queryControl(e.sock("far"), "status", &st); err != nil {
		t.Fatal(err)
	}
	if st.Egress.Connected < 2 || st.Egress.Refused != 1 {
		t.Errorf("far edge's egress counters %+v: want at least 2 connected and 1 refused", st.Egress)
	}
	stopEdges(t, e.edges)
}

// TestEdgeFarRestart kills the far edge in the middle of a transfer and
// starts it again: the client of the interrupted flow must see its
// connection fail (not hang), and new connections must work again within
// 5 s of the restart.
func TestEdgeFarRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	link := wanem.Config{Delay: 25 * time.Millisecond, RateBps: 100e6}
	e := startEdgeLab(t, ctx, link, link, harness.EdgeOptions{})
	if seen, _ := whoami(t, ctx, e.l.Client.NS); !strings.HasPrefix(seen, "198.18.2.1:") {
		t.Errorf("with kernel egress the server saw the connection from %s, want the far edge's LAN address 198.18.2.1", seen)
	}

	// A long echo: the client keeps writing and reading.
	c, err := dialIn(ctx, e.l.Client.NS, echoPort, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	broken := make(chan time.Time, 1)
	go func() {
		buf := make([]byte, 32<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				broken <- time.Now()
				return
			}
		}
	}()
	go func() {
		io.Copy(io.Discard, c)
		broken <- time.Now()
	}()
	time.Sleep(time.Second)

	// Crash the far edge (no CLOSE reaches the near edge) and restart it.
	if err := e.edges.RestartFar(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()

	select {
	case at := <-broken:
		t.Logf("interrupted flow failed %v after the restart", at.Sub(restarted).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Error("the flow through the dead far edge did not fail within 10 s of the restart")
	}

	// New flows within 5 s of the restart.
	var ok time.Duration
	for time.Since(restarted) < 5*time.Second {
		nc, err := dialIn(ctx, e.l.Client.NS, echoPort, time.Second)
		if err == nil {
			nc.SetDeadline(time.Now().Add(2 * time.Second))
			msg := []byte("after the restart")
			_, werr := nc.Write(msg)
			got := make([]byte, len(msg))
			_, rerr := io.ReadFull(nc, got)
			nc.Close()
			if werr == nil && rerr == nil && bytes.Equal(got, msg) {
				ok = time.Since(restarted)
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ok == 0 {
		t.Fatal("no new flow worked within 5 s of the far edge's restart")
	}
	t.Logf("a new flow worked %v after the far edge restarted", ok.Round(time.Millisecond))
}
