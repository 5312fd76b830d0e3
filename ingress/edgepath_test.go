//go:build linux

package ingress

// The whole edge data path in one process, without root: a client TCP
// stack, the near edge (stack + bridge + tunnel), the far edge (tunnel +
// egress) and a server, so that the cost of the path can be tracked in CI.
//
//	client (gVisor) ─ AF_UNIX SOCK_SEQPACKET pair ─ near stack.NewWithEndpoint
//	  → bridge.Dialer → driver.Tunnel ═ UDP on 127.0.0.1 ═ driver.Tunnel
//	  → egress (KernelDialer) → kernel TCP on 127.0.0.1 → server
//
// The socket pair stands in for the TUN: each end reads and writes one
// packet per message with real system calls. Two links (linkKind):
// "offload" puts both stacks on the endpoint New gives a TUN opened with
// offload, the default (stack.NewOffloadEndpoint: a virtio-net header
// before every packet, TCP segments of up to 64 KiB); "plain" puts both on
// gVisor's fdbased endpoint at MTU 1500. Unlike a TUN, fdbased writes a
// batch with one sendmmsg here, and a full socket pair drops packets
// (EAGAIN) where a TUN hands them to the kernel (see growSendBuffer).

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	"gvisor.dev/gvisor/pkg/tcpip/link/qdisc/fifo"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/tcptest"
	"github.com/wanopt/wanopt/stack"
	"github.com/wanopt/wanopt/tun"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/driver"
	"github.com/wanopt/wanopt/tunnel/driver/drivertest"
)

// edgePathMTU is the link's MTU: what wanopt run --tun-setup gives a TUN.
const edgePathMTU = tun.DefaultMTU

var (
	// edgeClientAddr is the client's address, from the benchmarking range
	// 198.18.0.0/15 as in the lab.
	edgeClientAddr = netip.MustParseAddr("198.18.1.1")
	// edgeServerFront is the address the client connects to. It cannot be
	// the server's own 127.0.0.1: an IP stack drops packets for 127/8
	// that arrive on an interface (gVisor's ipv4 martian check, which the
	// near stack keeps), so the far edge maps this address to the loopback
	// server, as a destination NAT in front of a real server would.
	edgeServerFront = netip.MustParseAddr("198.18.2.2")
)

// linkKind is the link between the client and the near edge (see the top
// of this file).
type linkKind string

const (
	offloadLink linkKind = "offload" // a TUN with offload: the default
	plainLink   linkKind = "plain"   // a TUN without offload
)

// TestEdgePathIntegrity sends 4 MiB each way at once, on two flows,
// through the whole edge path and checks the SHA-256 of what arrived at
// each end; both flows end with a FIN each way, and everything stops
// (leaktest). Once on each link; small enough for a few seconds under
// -race.
func TestEdgePathIntegrity(t *testing.T) {
	leaktest.Check(t)
	for _, link := range []linkKind{offloadLink, plainLink} {
		t.Run(string(link), func(t *testing.T) { testEdgePathIntegrity(t, link) })
	}
}

func testEdgePathIntegrity(t *testing.T, link linkKind) {
	const size = 4 << 20
	data := make([]byte, size)
	rand.Read(data)
	p := newEdgePath(t, data, link)
	want := sha256.Sum256(data)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	down, err := p.dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	up, err := p.dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()

	upErr := make(chan error, 1)
	go func() {
		n, sum, err := upload(up, size, data, true)
		switch {
		case err != nil:
			upErr <- fmt.Errorf("up: %w", err)
		case n != size || sum != want:
			upErr <- fmt.Errorf("up: the server received %d bytes (want %d), SHA-256 match %v", n, size, sum == want)
		default:
			upErr <- nil
		}
	}()
	h := sha256.New()
	n, err := download(down, size, h, make([]byte, 64<<10))
	if err != nil {
		t.Errorf("down: %v", err)
	} else if n != size || [32]byte(h.Sum(nil)) != want {
		t.Errorf("down: the client received %d bytes (want %d), SHA-256 match %v", n, size, [32]byte(h.Sum(nil)) == want)
	}
	if err := <-upErr; err != nil {
		t.Error(err)
	}
}

// BenchmarkEdgePath measures the whole edge data path (see the top of this
// file): "down" is the server sending to the client (what wanopt's
// published figures measure, iperf -R), "up" the reverse; -4flows spreads
// the bytes over four concurrent flows. Each op is 1 MiB delivered to the
// far end; the byte count is checked (the SHA-256 is checked by
// TestEdgePathIntegrity, not here, so that hashing stays out of the CPU
// figure).
//
// cpu-s/GB is the process's user+system CPU time (getrusage) over the
// timed transfer per 1e9 bytes moved: both edges, the client's gVisor
// stack and the loopback server. It is an upper bound for the two edges
// together, meant to track changes; it is not the per-edge figure of
// wanbench, where each edge runs at the link's rate and cost follows
// wake-ups more than bytes. Gbit/s is the goodput of all flows together
// on this machine's shared cores, not any link's.
func BenchmarkEdgePath(b *testing.B) {
	for _, link := range []linkKind{offloadLink, plainLink} {
		for _, bc := range []struct {
			name  string
			up    bool
			flows int
		}{
			{"down-1flow", false, 1},
			{"down-4flows", false, 4},
			{"up-1flow", true, 1},
		} {
			b.Run(string(link)+"/"+bc.name, func(b *testing.B) { benchEdgePath(b, link, bc.up, bc.flows) })
		}
	}
}

func benchEdgePath(b *testing.B, link linkKind, up bool, flows int) {
	const chunk = 1 << 20 // bytes per op; a multiple of flows
	pattern := make([]byte, chunk)
	rand.Read(pattern)
	p := newEdgePath(b, pattern, link)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conns, bufs := p.dialFlows(b, ctx, flows)
	total := int64(b.N) * chunk
	per := total / int64(flows)
	errs := make(chan error, flows)
	drops0 := p.linkDrops()
	b.SetBytes(chunk)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, start := cpuTime(b), time.Now()
	for i, c := range conns {
		go func() {
			if up {
				n, _, err := upload(c, per, pattern, false)
				if err == nil && n != per {
					err = fmt.Errorf("up: the server received %d bytes, want %d", n, per)
				}
				errs <- err
				return
			}
			n, err := download(c, per, nil, bufs[i])
			if err == nil && n != per {
				err = fmt.Errorf("down: the client received %d bytes, want %d", n, per)
			}
			errs <- err
		}()
	}
	var failed error
	for range flows {
		failed = errors.Join(failed, <-errs)
	}
	elapsed, cpu := time.Since(start), cpuTime(b)-cpu0
	b.StopTimer()
	if failed != nil {
		b.Fatal(failed)
	}
	b.ReportMetric(cpu.Seconds()/(float64(total)/1e9), "cpu-s/GB")
	b.ReportMetric(float64(total)*8/elapsed.Seconds()/1e9, "Gbit/s")
	b.ReportMetric(float64(p.linkDrops()-drops0), "link-drops")
}

// linkDrops is the number of packets the socket pair has lost so far,
// both ways: sent by one stack's link and never received by the other's.
// A packet still in the pair's queue would count as lost, so it waits (up
// to 100 ms) for two readings 2 ms apart to agree.
func (p *edgePath) linkDrops() int64 {
	prev := p.linkDropsNow()
	for range 50 {
		time.Sleep(2 * time.Millisecond)
		n := p.linkDropsNow()
		if n == prev {
			break
		}
		prev = n
	}
	return prev
}

func (p *edgePath) linkDropsNow() int64 {
	ns := p.near.Stats()
	var cin, cout uint64
	for _, nic := range p.client.NICInfo() {
		cin += nic.Stats.Rx.Packets.Value()
		cout += nic.Stats.Tx.Packets.Value()
	}
	return int64(ns.TUNPacketsOut-cin) + int64(cout-ns.TUNPacketsIn)
}

// cpuTime returns the process's user plus system CPU time.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// edgePath is the assembled path; everything in it stops when the test or
// benchmark ends (Cleanup, in the reverse order of setup: client stack,
// near stack, socket pair, egress, tunnels, server).
type edgePath struct {
	client      *gstack.Stack
	near        *stack.Stack
	nearT, farT *driver.Tunnel
	dst         netip.AddrPort // what the client connects to
}

// newEdgePath assembles the path the way cmd/wanopt's run does for each
// edge, with the defaults of a real edge (stack.Config, driver.Config and
// egress.Options left at their zero values but for the MTU and loggers).
// The server sends and receives pattern (see pathServer).
func newEdgePath(tb testing.TB, pattern []byte, link linkKind) *edgePath {
	tb.Helper()
	log := tcptest.Logger()
	srv := startPathServer(tb, pattern)
	front := netip.AddrPortFrom(edgeServerFront, srv.addr.Port())

	nearT, farT := udpTunnelPair(tb)

	// The far edge: the policy allows exactly the flow's destination (the
	// front address, which is what the egress checks); the dialer is the
	// real edge's KernelDialer behind the front → loopback mapping.
	pol, err := egress.ParsePolicy([]string{front.String()})
	if err != nil {
		tb.Fatal(err)
	}
	eg := egress.New(pol, frontDialer{front: front, server: srv.addr}, egress.Options{Logger: log})
	egCtx, egCancel := context.WithCancel(context.Background())
	egDone := make(chan error, 1)
	go func() { egDone <- eg.Serve(egCtx, farT) }()
	tb.Cleanup(func() {
		egCancel()
		if err := <-egDone; err != nil {
			tb.Errorf("egress: %v", err)
		}
	})

	// The link: one end for the near edge, as its TUN fd, the other for
	// the client.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("socketpair: %v", err)
	}
	tb.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	for _, fd := range fds {
		if !growSendBuffer(tb, fd) {
			tb.Logf("no CAP_NET_ADMIN: the socket pair standing for the TUN holds 416 KiB, not %d MiB, and drops bursts; the figures include the stalls that follow (see link-drops)", linkSendBuffer>>20)
		}
	}

	// The near edge: stack.New's choice for a TUN with offload or without.
	nearEP := linkEndpoint(tb, fds[0], link)
	near, err := stack.NewWithEndpoint(context.Background(), nearEP, New(nearT, log), stack.Config{MTU: edgePathMTU, Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { near.Close() })

	return &edgePath{client: clientStack(tb, linkEndpoint(tb, fds[1], link)), near: near, nearT: nearT, farT: farT, dst: front}
}

// linkEndpoint is a gVisor link endpoint of the given kind on one end of
// the socket pair. For the client, the offload endpoint plays a kernel
// with offload: it sends segments of up to 64 KiB and takes them whole,
// completing their partial checksums before its stack validates them.
func linkEndpoint(tb testing.TB, fd int, link linkKind) gstack.LinkEndpoint {
	tb.Helper()
	var (
		ep  gstack.LinkEndpoint
		err error
	)
	switch link {
	case offloadLink:
		ep, err = stack.NewOffloadEndpoint(fd, edgePathMTU)
	case plainLink:
		// Readv, one packet per read as the near edge does on its TUN.
		// (The RecvMMsg mode would also leak goroutines: gVisor builds a
		// readv dispatcher first and drops it without stopping its
		// processors.)
		ep, err = fdbased.New(&fdbased.Options{FDs: []int{fd}, MTU: edgePathMTU})
	default:
		tb.Fatalf("unknown link %q", link)
	}
	if err != nil {
		tb.Fatalf("%s link on fd %d: %v", link, fd, err)
	}
	return ep
}

// linkSendBuffer is the send buffer the benchmark asks for on each end of
// the socket pair, where CAP_NET_ADMIN allows it (SO_SNDBUFFORCE).
const linkSendBuffer = 4 << 20

// growSendBuffer sets fd's send buffer to linkSendBuffer and reports
// true, or, without CAP_NET_ADMIN, to the largest an unprivileged process
// gets (net.core.wmem_max, 212992 by default, doubled by the kernel: 416
// KiB) and reports false.
//
// A unix seqpacket socket charges queued messages to the sender's buffer
// only, so this is the whole queue between the stacks, and a full one makes
// the writer drop packets (EAGAIN) where a TUN would hand them to the
// kernel. At 416 KiB a burst of the near edge's window overflowed it and
// the near stack waited out RTOs; from 2 MiB up it does not. The
// link-drops metric reports what the pair lost in any case.
func growSendBuffer(tb testing.TB, fd int) bool {
	tb.Helper()
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, linkSendBuffer); err == nil {
		return true
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 212992); err != nil {
		tb.Fatalf("SO_SNDBUF: %v", err)
	}
	return false
}

// clientStack is a plain gVisor TCP/IPv4 host on ep standing for the
// client machine: address edgeClientAddr, a default route out of ep, SACK
// and receive-buffer auto-tuning on as in a Linux client.
func clientStack(tb testing.TB, ep gstack.LinkEndpoint) *gstack.Stack {
	tb.Helper()
	s := gstack.New(gstack.Options{
		NetworkProtocols:   []gstack.NetworkProtocolFactory{ipv4.NewProtocol},
		TransportProtocols: []gstack.TransportProtocolFactory{tcp.NewProtocol},
	})
	tb.Cleanup(func() {
		s.Close()
		// Stop inbound delivery before Wait, as stack.Close does: Wait
		// holds the stack's lock while waiting for the endpoint, and a
		// packet being delivered may need it (gvisor.dev/issue/11456).
		ep.Attach(nil)
		s.Wait()
	})
	sack := tcpip.TCPSACKEnabled(true)
	moderate := tcpip.TCPModerateReceiveBufferOption(true)
	for _, opt := range []tcpip.SettableTransportProtocolOption{&sack, &moderate} {
		if terr := s.SetTransportProtocolOption(tcp.ProtocolNumber, opt); terr != nil {
			tb.Fatalf("client TCP option: %v", terr)
		}
	}
	// A FIFO queue as the near stack has (and a Linux host): without
	// one, gVisor allocates a packet list for every packet it sends.
	if terr := s.CreateNICWithOptions(1, ep, gstack.NICOptions{QDisc: fifo.New(ep, 1, 1000)}); terr != nil {
		tb.Fatalf("client NIC: %v", terr)
	}
	pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddrFrom4(edgeClientAddr.As4()).WithPrefix()}
	if terr := s.AddProtocolAddress(1, pa, gstack.AddressProperties{}); terr != nil {
		tb.Fatalf("client address: %v", terr)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}})
	return s
}

// dial connects the client to the server through the whole path.
// Every wait on the connection ends when ctx is done.
func (p *edgePath) dial(ctx context.Context) (*clientConn, error) {
	addr := tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(p.dst.Addr().As4()), Port: p.dst.Port()}
	c, err := dialClient(ctx, p.client, addr)
	if err != nil {
		return nil, fmt.Errorf("client connect to %v through the edges: %w", p.dst, err)
	}
	return c, nil
}

// dialFlows dials n flows, closed when the test ends, each with a 64 KiB
// read buffer of its own.
func (p *edgePath) dialFlows(tb testing.TB, ctx context.Context, n int) ([]*clientConn, [][]byte) {
	tb.Helper()
	conns, bufs := make([]*clientConn, n), make([][]byte, n)
	for i := range conns {
		c, err := p.dial(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close() })
		conns[i], bufs[i] = c, make([]byte, 64<<10)
	}
	return conns, bufs
}

// udpTunnelPair connects two tunnels over real UDP sockets on 127.0.0.1,
// as the driver's loopback benchmark does: near dials, far listens. Both
// close when the test ends.
func udpTunnelPair(tb testing.TB) (near, far *driver.Tunnel) {
	tb.Helper()
	nk, err := crypt.GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	fk, err := crypt.GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	fb, err := bind.Listen("udp4", netip.MustParseAddrPort("127.0.0.1:0"), bind.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	log := tcptest.Logger()
	ncfg := driver.Config{
		Tunnel:     tunnel.Config{PrivateKey: nk, PeerPublicKey: fk.PublicKey()},
		RemoteAddr: fb.LocalAddr(), Network: "udp4", LocalAddr: netip.MustParseAddrPort("127.0.0.1:0"),
		Logger: log,
	}
	fcfg := driver.Config{Tunnel: tunnel.Config{PrivateKey: fk, PeerPublicKey: nk.PublicKey()}, Bind: fb, Logger: log}
	return drivertest.Connect(tb, ncfg, fcfg)
}

// frontDialer is the far edge's dialer: it connects front to the server
// with the real edge's KernelDialer and refuses anything else.
type frontDialer struct {
	front, server netip.AddrPort
	kernel        egress.KernelDialer
}

func (d frontDialer) Dial(ctx context.Context, src, dst netip.AddrPort) (flow.Conn, error) {
	if dst != d.front {
		return nil, fmt.Errorf("benchmark far edge: %v is not the server's front %v: %w", dst, d.front, syscall.ECONNREFUSED)
	}
	return d.kernel.Dial(ctx, src, d.server)
}

// The server's protocol. The client opens each connection with a request,
// op (1 byte) | hash (1 byte) | size (8 bytes, big endian), then:
//   - opDown: the server sends size bytes (pattern, repeated from its
//     start), then its FIN, then reads to the client's FIN;
//   - opUp: the client sends its bytes and its FIN; the server reads to
//     EOF and answers count (8 bytes) | SHA-256 (32 bytes, zero unless
//     hash was 1), then its FIN.
const (
	opDown = 'D'
	opUp   = 'U'
	reqLen = 10
)

// pathServer is the TCP server on 127.0.0.1 behind the far edge.
type pathServer struct {
	addr    netip.AddrPort
	pattern []byte
}

// startPathServer starts the server on 127.0.0.1 (tcptest.Server): it
// stops, and its connections close, when the test ends.
func startPathServer(tb testing.TB, pattern []byte) *pathServer {
	tb.Helper()
	s := &pathServer{pattern: pattern}
	s.addr = tcptest.Server(tb, s.serve)
	return s
}

// serve answers one request; errors end the connection (the client then
// sees a short transfer or a reset and fails).
func (s *pathServer) serve(c *net.TCPConn) {
	var req [reqLen]byte
	if _, err := io.ReadFull(c, req[:]); err != nil {
		return
	}
	size := int64(binary.BigEndian.Uint64(req[2:]))
	switch req[0] {
	case opDown:
		if err := writePattern(c, s.pattern, size); err != nil {
			return
		}
		if err := c.CloseWrite(); err != nil {
			return
		}
		io.Copy(io.Discard, c)
	case opUp:
		var h hash.Hash
		if req[1] == 1 {
			h = sha256.New()
		}
		n, err := readAll(c, h, make([]byte, 64<<10))
		if err != nil {
			return
		}
		var ans [8 + sha256.Size]byte
		binary.BigEndian.PutUint64(ans[:], uint64(n))
		if h != nil {
			h.Sum(ans[8:8])
		}
		c.Write(ans[:])
	}
}

// download asks the server for size bytes and reads to its FIN, hashing
// into h if not nil. It returns the byte count received.
func download(c *clientConn, size int64, h hash.Hash, buf []byte) (int64, error) {
	if err := request(c, opDown, false, size); err != nil {
		return 0, err
	}
	// Nothing more to send: the FIN crosses the path too.
	if err := c.CloseWrite(); err != nil {
		return 0, fmt.Errorf("client close-write: %w", err)
	}
	return readAll(c, h, buf)
}

// upload sends size bytes of pattern and its FIN, and returns the count
// and, if withHash, the SHA-256 that the server received.
func upload(c *clientConn, size int64, pattern []byte, withHash bool) (n int64, sum [32]byte, err error) {
	if err := request(c, opUp, withHash, size); err != nil {
		return 0, sum, err
	}
	if err := writePattern(c, pattern, size); err != nil {
		return 0, sum, fmt.Errorf("client write: %w", err)
	}
	if err := c.CloseWrite(); err != nil {
		return 0, sum, fmt.Errorf("client close-write: %w", err)
	}
	var ans [8 + sha256.Size]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		return 0, sum, fmt.Errorf("client read of the server's count: %w", err)
	}
	return int64(binary.BigEndian.Uint64(ans[:])), [32]byte(ans[8:]), nil
}

func request(c io.Writer, op byte, withHash bool, size int64) error {
	var req [reqLen]byte
	req[0] = op
	if withHash {
		req[1] = 1
	}
	binary.BigEndian.PutUint64(req[2:], uint64(size))
	if _, err := c.Write(req[:]); err != nil {
		return fmt.Errorf("client request: %w", err)
	}
	return nil
}

// writePattern writes size bytes: pattern repeated from its start.
func writePattern(w io.Writer, pattern []byte, size int64) error {
	for left := size; left > 0; {
		k := int(min(left, int64(len(pattern))))
		if _, err := w.Write(pattern[:k]); err != nil {
			return err
		}
		left -= int64(k)
	}
	return nil
}

// readAll reads r to EOF through buf, hashing into h if not nil, and
// returns the byte count.
func readAll(r io.Reader, h hash.Hash, buf []byte) (int64, error) {
	var n int64
	for {
		k, err := r.Read(buf)
		n += int64(k)
		if h != nil {
			h.Write(buf[:k])
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// TestEdgePathPausedFlows: clients that stop reading what they asked for
// must not stall the other flows of the tunnel. Two flows ask for 1 GiB
// each and read 1 MiB; once the bytes waiting for them have stopped
// growing, a third flow downloads 16 MiB: the paused flows' bytes must
// not hold all of the connection's credit (stream.ConnFlow).
func TestEdgePathPausedFlows(t *testing.T) {
	leaktest.Check(t)
	pattern := make([]byte, 1<<20)
	rand.Read(pattern)
	p := newEdgePath(t, pattern, offloadLink)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	buf := make([]byte, 64<<10)
	for range 2 {
		c, err := p.dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := request(c, opDown, false, 1<<30); err != nil {
			t.Fatal(err)
		}
		if err := readN(c, 1<<20, buf); err != nil {
			t.Fatalf("paused flow's first MiB: %v", err)
		}
	}
	// Wait until the near edge's unread bytes hold still for 300 ms: the
	// paused flows have filled what their windows let them.
	for prev, still := uint64(0), 0; still < 3; {
		select {
		case <-ctx.Done():
			t.Fatal("the paused flows' unread bytes kept growing")
		case <-time.After(100 * time.Millisecond):
		}
		n := p.nearT.Stats().Tunnel.ConnRecvUnreadBytes
		if n == prev {
			still++
		} else {
			prev, still = n, 0
		}
	}
	unread := p.nearT.Stats().Tunnel.ConnRecvUnreadBytes
	c, err := p.dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const size = 16 << 20
	n, err := download(c, size, nil, buf)
	if err != nil || n != size {
		t.Fatalf("a flow beside two paused ones (%d bytes waiting unread at the near edge) received %d of %d bytes: %v", unread, n, size, err)
	}
	t.Logf("a flow beside two paused ones (%d bytes waiting unread at the near edge) received %d bytes", unread, n)
}

// TestEdgePathAllocs checks that the default edge path (the offload link)
// allocates next to nothing per byte once its flows stream: after 16 MiB
// on each of four flows to warm the buffers up, the next 16 MiB on each,
// downloaded at once, may allocate at most maxAllocsPerMiB objects per MiB
// in the whole process (both edges, the client and the server). A
// megabyte is about 730 tunnel datagrams and 16 segments of 64 KiB, so an
// allocation per packet or per segment fails it. The race detector's
// sync.Pool drops items on purpose, so the test skips under it.
func TestEdgePathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items, so pooled buffers are allocated again; run without -race (make allocs)")
	}
	const (
		flows           = 4
		warmBytes       = 64 << 20 // per flow
		measuredBytes   = 32 << 20 // per flow
		maxAllocsPerMiB = 8
	)
	pattern := make([]byte, 1<<20)
	rand.Read(pattern)
	p := newEdgePath(t, pattern, offloadLink)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conns, bufs := p.dialFlows(t, ctx, flows)
	// Each flow asks for both spells at once and reads the first before
	// the counter is read: the second streams on warm buffers.
	errs := make(chan error, flows)
	warm := make(chan struct{}, flows)
	measure := make(chan struct{})
	for i, c := range conns {
		go func() {
			errs <- func() error {
				if err := request(c, opDown, false, warmBytes+measuredBytes); err != nil {
					return err
				}
				if err := c.CloseWrite(); err != nil {
					return err
				}
				if err := readN(c, warmBytes, bufs[i]); err != nil {
					return fmt.Errorf("warm-up: %w", err)
				}
				warm <- struct{}{}
				<-measure
				n, err := readAll(c, nil, bufs[i])
				if err == nil && n != measuredBytes {
					err = fmt.Errorf("received %d bytes after the warm-up, want %d", n, measuredBytes)
				}
				return err
			}()
		}()
	}
	for range flows {
		select {
		case <-warm:
		case err := <-errs:
			t.Fatal(err)
		}
	}
	runtime.GC() // not during the measured spell: a collection empties the pools
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	close(measure)
	for range flows {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	mib := float64(flows*measuredBytes) / (1 << 20)
	perMiB := float64(after.Mallocs-before.Mallocs) / mib
	t.Logf("%.2f allocations per MiB over %.0f MiB on %d flows (%d collections)", perMiB, mib, flows, after.NumGC-before.NumGC)
	if perMiB > maxAllocsPerMiB {
		t.Errorf("the edge path allocated %.1f objects per MiB once warm, want at most %d (profile it: go test -run '^$' -bench EdgePath/offload -memprofile mem.out -memprofilerate 1)", perMiB, maxAllocsPerMiB)
	}
}

// readN reads exactly n bytes through buf.
func readN(r io.Reader, n int64, buf []byte) error {
	for n > 0 {
		k, err := r.Read(buf[:min(int64(len(buf)), n)])
		n -= int64(k)
		if err != nil {
			return err
		}
	}
	return nil
}
