//go:build linux

package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/wanopt/wanopt/tun"
)

// The lab: a network namespace "client" holding a TUN device whose other end
// is the Stack under test, with 198.18.2.0/24 routed into the TUN. The
// client's address is 198.18.1.1. The test's Dialer connects to servers on
// the host's loopback, in this process.

var (
	clientAddr = netip.MustParseAddr("198.18.1.1")
	interAddr  = netip.MustParseAddr("198.18.2.2") // an intercepted destination
	// IPv6 counterparts, from the IPv6 benchmarking range 2001:2::/48.
	clientAddr6 = netip.MustParseAddr("2001:2:0:1::1")
	interAddr6  = netip.MustParseAddr("2001:2:0:2::2")
	nsSeq       atomic.Int32
)

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and TUN devices; run the tests as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8) from iproute2")
	}
}

// newNS creates a network namespace named wost<pid>-<n> and deletes it in
// Cleanup.
func newNS(t testing.TB) (string, netns.NsHandle) {
	t.Helper()
	name := fmt.Sprintf("wost%d-%d", os.Getpid(), nsSeq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	h, err := netns.GetFromName(name)
	if err != nil {
		exec.Command("ip", "netns", "del", name).Run()
		t.Fatalf("open netns %s: %v", name, err)
	}
	t.Cleanup(func() {
		h.Close()
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return name, h
}

// inNS runs fn on a fresh OS thread switched into ns. Sockets and devices fn
// creates live in ns. If the thread cannot switch back it is discarded.
func inNS(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

type lab struct {
	nsName string
	ns     netns.NsHandle
	dev    *tun.Device
	st     *Stack
}

// newLab builds the client namespace, its TUN at mtu (with offload, the
// default) and a Stack on it with dialer d. Cleanup closes the stack, then
// the device, then the namespace.
func newLab(t testing.TB, mtu int, d Dialer, cfg Config) *lab {
	return newLabLink(t, mtu, true, d, cfg)
}

// newLabLink is newLab with a choice of link: with offload, the TUN carries
// virtio-net headers and the stack uses its offload endpoint; without, the
// stack uses gVisor's fdbased endpoint.
func newLabLink(t testing.TB, mtu int, offload bool, d Dialer, cfg Config) *lab {
	t.Helper()
	requireRoot(t)
	l := &lab{}
	l.nsName, l.ns = newNS(t)
	err := inNS(l.ns, func() error {
		dev, err := tun.Open(tun.Config{Name: "wost0", MTU: mtu, Create: true, NoOffload: !offload})
		if err != nil {
			return err
		}
		l.dev = dev
		return tun.Setup(tun.SetupConfig{
			Name:  "wost0",
			Addrs: []netip.Prefix{netip.PrefixFrom(clientAddr, 24), netip.PrefixFrom(clientAddr6, 64)},
			MTU:   mtu,
			Routes: []netip.Prefix{netip.MustParsePrefix("198.18.2.0/24"),
				netip.MustParsePrefix("2001:2:0:2::/64")},
		})
	})
	if err != nil {
		if l.dev != nil {
			l.dev.Close()
		}
		t.Fatalf("set up TUN in %s: %v", l.nsName, err)
	}
	cfg.MTU = mtu
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if testing.Verbose() && os.Getenv("WOST_DEBUG") != "" {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	}
	st, err := New(context.Background(), l.dev.Fd(), d, cfg)
	if err != nil {
		l.dev.Close()
		t.Fatalf("New: %v", err)
	}
	l.st = st
	t.Cleanup(func() { l.close() })
	return l
}

func (l *lab) close() {
	l.st.Close()
	l.dev.Close()
}

// dial connects from the client namespace.
func (l *lab) dial(ctx context.Context, dst netip.AddrPort) (*net.TCPConn, error) {
	var c net.Conn
	err := inNS(l.ns, func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", dst.String())
		return err
	})
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// waitFlowsEmpty waits until the flow table is empty.
func waitFlowsEmpty(t testing.TB, st *Stack, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for st.Stats().ActiveFlows != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("flow table not empty after %v: %+v", within, st.Flows())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fakeDialer is the test's Dialer: it connects every flow to a server on
// loopback, or fails as told.
type fakeDialer struct {
	target string                         // server address on loopback
	fail   func(dst netip.AddrPort) error // non-nil result fails the dial
	hang   bool                           // block until ctx is done
	calls  atomic.Int64
}

func (d *fakeDialer) DialFlow(ctx context.Context, src, dst netip.AddrPort) (FlowConn, error) {
	d.calls.Add(1)
	if d.hang {
		<-ctx.Done()
		return nil, fmt.Errorf("fake dial %v: %w", dst, ErrTimeout)
	}
	if d.fail != nil {
		if err := d.fail(dst); err != nil {
			return nil, err
		}
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", d.target)
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return nil, ErrUnreachable
		}
		return nil, fmt.Errorf("fake dial %s: %w: %w", d.target, ErrRefused, err)
	}
	return tcpFlow{c.(*net.TCPConn)}, nil
}

// tcpFlow is a FlowConn over a kernel TCP connection that can reset.
type tcpFlow struct{ *net.TCPConn }

func (f tcpFlow) Abort() error {
	f.SetLinger(0)
	return f.Close()
}

var _ Aborter = tcpFlow{}

// server is a loopback TCP server running handler per connection; Cleanup
// stops it and waits for the handlers.
func startServer(t testing.TB, handler func(c *net.TCPConn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handler(c.(*net.TCPConn))
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}
