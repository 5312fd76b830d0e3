//go:build linux

package stack

// Tests of the flows the stack intercepts, through the TUN lab: the
// addresses the Dialer sees, the flow table, the in-flight limit, and flows
// ended by Close or by keepalives.

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/tcptest"
)

// TestIPv6 intercepts a connection to an IPv6 destination and checks that
// the Dialer sees the original addresses.
func TestIPv6(t *testing.T) {
	addr := tcptest.Server(t, tcptest.Echo)
	var mu sync.Mutex
	var gotSrc, gotDst netip.AddrPort
	d := &fakeDialer{target: addr, fail: func(dst netip.AddrPort) error {
		mu.Lock()
		gotDst = dst
		mu.Unlock()
		return nil
	}}
	l := newLab(t, 1500, dialerFunc(func(ctx context.Context, src, dst netip.AddrPort) (flow.Conn, error) {
		mu.Lock()
		gotSrc = src
		mu.Unlock()
		return d.Dial(ctx, src, dst)
	}), Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := l.dial(ctx, netip.AddrPortFrom(interAddr6, 443))
	if err != nil {
		t.Fatalf("dial [%v]:443: %v", interAddr6, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte("v6"))
	c.CloseWrite()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "v6" {
		t.Fatalf("echo: %q, %v", b, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if gotDst != netip.AddrPortFrom(interAddr6, 443) || gotSrc.Addr() != clientAddr6 || gotSrc.Port() != uint16(c.LocalAddr().(*net.TCPAddr).Port) {
		t.Fatalf("dialer saw %v → %v, want %v → [%v]:443", gotSrc, gotDst, c.LocalAddr(), interAddr6)
	}
}

// TestFlowTable checks the snapshot of a flow half-closed by the client.
func TestFlowTable(t *testing.T) {
	release := make(chan struct{})
	addr := tcptest.Server(t, func(c *net.TCPConn) {
		io.Copy(io.Discard, c)
		<-release
		c.Write([]byte("bye"))
	})
	defer close(release)
	l := newLab(t, 1500, &fakeDialer{target: addr}, Config{})
	c, err := l.dial(context.Background(), netip.AddrPortFrom(interAddr, 80))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(make([]byte, 1000))
	c.CloseWrite()
	deadline := time.Now().Add(5 * time.Second)
	var fl []FlowInfo
	for time.Now().Before(deadline) {
		fl = l.st.Flows()
		if len(fl) == 1 && fl[0].State == FlowClientClosed && fl[0].BytesUp == 1000 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(fl) != 1 || fl[0].State != FlowClientClosed || fl[0].BytesUp != 1000 || fl[0].BytesDown != 0 ||
		fl[0].Dst != netip.AddrPortFrom(interAddr, 80) || fl[0].Src.Addr() != clientAddr || fl[0].Age <= 0 {
		t.Fatalf("flows %+v, want one client-fin flow with 1000 bytes up", fl)
	}
	t.Logf("flow: %+v (%v)", fl[0], fl[0].State)
}

// TestInFlightLimit: with MaxInFlight 2 and a Dialer that hangs, further
// SYNs are dropped and counted.
func TestInFlightLimit(t *testing.T) {
	d := &fakeDialer{hang: true}
	l := newLab(t, 1500, d, Config{MaxInFlight: 2, DialTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c, err := l.dial(ctx, netip.AddrPortFrom(interAddr, uint16(100+i))); err == nil {
				c.Close()
			}
		}()
	}
	wg.Wait()
	s := l.st.Stats()
	if s.ForwarderDrops != 3 || d.calls.Load() != 2 {
		t.Fatalf("stats %+v, dials %d: want 3 drops and 2 dials", s, d.calls.Load())
	}
}

// TestCloseWithFlows closes the stack during a transfer and while a dial is
// pending: the client sees a reset, the pending dial is cancelled and no
// goroutine remains.
func TestCloseWithFlows(t *testing.T) {
	leaktest.Check(t)
	addr := tcptest.Server(t, tcptest.Echo)
	fd := &fakeDialer{target: addr}
	l := newLab(t, 1500, dialerFunc(func(ctx context.Context, src, dst netip.AddrPort) (flow.Conn, error) {
		if dst.Port() == 9 {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return fd.Dial(ctx, src, dst)
	}), Config{})
	c, err := l.dial(context.Background(), netip.AddrPortFrom(interAddr, 80))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if c, err := l.dial(ctx, netip.AddrPortFrom(interAddr, 9)); err == nil {
			c.Close()
		}
	}()
	c.Write([]byte("x"))
	for l.st.Stats().ActiveFlows != 2 {
		time.Sleep(10 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { l.st.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client after Close: %v, want connection reset", err)
	}
}

// TestKeepAliveEndsVanishedClient: a client that vanishes without FIN or RST
// (its TUN goes down) is detected by keepalives; the flow ends and the far
// side is reset.
func TestKeepAliveEndsVanishedClient(t *testing.T) {
	srvErr := make(chan error, 1)
	addr := tcptest.Server(t, func(c *net.TCPConn) {
		c.SetDeadline(time.Now().Add(20 * time.Second))
		_, err := io.Copy(io.Discard, c)
		srvErr <- err
	})
	l := newLab(t, 1500, &fakeDialer{target: addr}, Config{KeepAliveIdle: 300 * time.Millisecond})
	c, err := l.dial(context.Background(), netip.AddrPortFrom(interAddr, 80))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("hello"))
	time.Sleep(100 * time.Millisecond)
	if out, err := exec.Command("ip", "-n", l.nsName, "link", "set", "wost0", "down").CombinedOutput(); err != nil {
		t.Fatalf("link down: %v: %s", err, out)
	}
	start := time.Now()
	waitFlowsEmpty(t, l.st, 10*time.Second)
	t.Logf("flow ended %v after the client vanished", time.Since(start).Round(10*time.Millisecond))
	select {
	case err := <-srvErr:
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("server read: %v, want connection reset", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("far side not reset")
	}
}
