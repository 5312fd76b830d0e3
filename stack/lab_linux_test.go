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
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/internal/netnstest"
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
)

type lab struct {
	nsName string
	ns     netns.NsHandle
	dev    *tun.Device
	st     *Stack
}

// newLab builds the client namespace, its TUN at mtu (with offload, the
// default) and a Stack on it with dialer d. Cleanup closes the stack, then
// the device, then the namespace.
func newLab(t testing.TB, mtu int, d flow.Dialer, cfg Config) *lab {
	return newLabLink(t, mtu, true, d, cfg)
}

// newLabLink is newLab with a choice of link: with offload, the TUN carries
// virtio-net headers and the stack uses its offload endpoint; without, the
// stack uses gVisor's fdbased endpoint.
func newLabLink(t testing.TB, mtu int, offload bool, d flow.Dialer, cfg Config) *lab {
	t.Helper()
	l := &lab{}
	l.nsName, l.ns = netnstest.New(t)
	err := netnstest.Do(l.ns, func() error {
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
	err := netnstest.Do(l.ns, func() error {
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
	target netip.AddrPort                 // server address on loopback
	fail   func(dst netip.AddrPort) error // non-nil result fails the dial
	hang   bool                           // block until ctx is done
	calls  atomic.Int64
}

func (d *fakeDialer) Dial(ctx context.Context, src, dst netip.AddrPort) (flow.Conn, error) {
	d.calls.Add(1)
	if d.hang {
		<-ctx.Done()
		return nil, fmt.Errorf("fake dial %v: %w", dst, flow.ErrTimeout)
	}
	if d.fail != nil {
		if err := d.fail(dst); err != nil {
			return nil, err
		}
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", d.target.String())
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return nil, flow.ErrUnreachable
		}
		return nil, fmt.Errorf("fake dial %s: %w: %w", d.target, flow.ErrRefused, err)
	}
	return tcpFlow{c.(*net.TCPConn)}, nil
}

// tcpFlow is a flow.Conn over a kernel TCP connection that can reset.
type tcpFlow struct{ *net.TCPConn }

func (f tcpFlow) Abort() error {
	f.SetLinger(0)
	return f.Close()
}

var _ flow.Aborter = tcpFlow{}
