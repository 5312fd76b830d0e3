package ingress

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/tcptest"
	"github.com/wanopt/wanopt/tunnel/driver"
	"github.com/wanopt/wanopt/tunnel/driver/drivertest"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// TestErrorMapping: each far-edge answer becomes the stack error that gives
// the client what it would see without wanopt. The far side rejects with
// the code given as the destination port.
func TestErrorMapping(t *testing.T) {
	leaktest.Check(t)
	near, far := drivertest.Pair(t, tcptest.Logger())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			in, err := far.AcceptStream(ctx)
			if err != nil {
				return
			}
			in.Reject(wire.OpenCode(in.Dst().Port()))
		}
	}()
	d := New(near, tcptest.Logger())
	src := netip.MustParseAddrPort("198.18.1.2:40000")
	for _, tc := range []struct {
		code wire.OpenCode
		want error
	}{
		{wire.OpenRefused, flow.ErrRefused},
		{wire.OpenNotAllowed, flow.ErrNotAllowed},
		{wire.OpenUnreachable, flow.ErrUnreachable},
		{wire.OpenTimedOut, flow.ErrTimeout},
		{wire.OpenResourceLimit, flow.ErrUnreachable},
		{wire.OpenError, flow.ErrUnreachable},
	} {
		dst := netip.AddrPortFrom(netip.MustParseAddr("198.18.2.2"), uint16(tc.code))
		fc, err := d.Dial(ctx, src, dst)
		if fc != nil || !errors.Is(err, tc.want) {
			t.Errorf("far edge answers %v: Dial = %v, %v; want %v", tc.code, fc, err, tc.want)
		}
		var oe *driver.OpenError
		if !errors.As(err, &oe) || oe.Code != tc.code {
			t.Errorf("far edge answers %v: %v does not carry the *OpenError", tc.code, err)
		}
	}
	st := d.Stats()
	if st.Refused != 1 || st.NotAllowed != 1 || st.TimedOut != 1 || st.Unreachable != 2 || st.Failed != 1 {
		t.Errorf("stats %+v", st)
	}

	// No tunnel: silent, so that the client retries.
	d.SetTunnel(nil)
	if _, err := d.Dial(ctx, src, netip.MustParseAddrPort("198.18.2.2:80")); !errors.Is(err, flow.ErrUnreachable) || !errors.Is(err, ErrNoTunnel) {
		t.Errorf("no tunnel: %v; want ErrUnreachable and ErrNoTunnel", err)
	}
	// A closed tunnel: silent too.
	d.SetTunnel(near)
	near.Close()
	if _, err := d.Dial(ctx, src, netip.MustParseAddrPort("198.18.2.2:80")); !errors.Is(err, flow.ErrUnreachable) {
		t.Errorf("closed tunnel: %v; want ErrUnreachable", err)
	}
}

// serveEgress runs package egress on far, allowing the policy rules,
// until the test ends; the context ends with it.
func serveEgress(t *testing.T, far *driver.Tunnel, rules ...string) context.Context {
	t.Helper()
	pol, err := egress.ParsePolicy(rules)
	if err != nil {
		t.Fatal(err)
	}
	eg := egress.New(pol, nil, egress.Options{Logger: tcptest.Logger()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eg.Serve(ctx, far) }()
	t.Cleanup(func() { cancel(); <-done })
	return ctx
}

// TestThroughEgress: a flow dialled by the bridge and served by package
// egress carries 8 MB each way, hash-checked, with half-close; a refused
// port maps to ErrRefused and a port outside the policy to ErrNotAllowed.
func TestThroughEgress(t *testing.T) {
	leaktest.Check(t)
	near, far := drivertest.Pair(t, tcptest.Logger())
	lnAddr := tcptest.Server(t, tcptest.Echo)
	closed := netip.AddrPortFrom(lnAddr.Addr(), 1)
	ctx := serveEgress(t, far, lnAddr.String(), "127.0.0.1:1", "127.0.0.1:2")

	d := New(near, tcptest.Logger())
	src := netip.MustParseAddrPort("198.18.1.2:40000")
	if _, err := d.Dial(ctx, src, closed); !errors.Is(err, flow.ErrRefused) {
		t.Errorf("closed port: %v; want ErrRefused", err)
	}
	if _, err := d.Dial(ctx, src, netip.AddrPortFrom(lnAddr.Addr(), 3)); !errors.Is(err, flow.ErrNotAllowed) {
		t.Errorf("port outside the policy: %v; want ErrNotAllowed", err)
	}
	fc, err := d.Dial(ctx, src, lnAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	const size = 8 << 20
	data := make([]byte, size)
	rand.Read(data)
	go func() {
		fc.Write(data)
		fc.CloseWrite()
	}()
	h := sha256.New()
	n, err := io.Copy(h, fc)
	if err != nil || n != size || !bytes.Equal(h.Sum(nil), sha256Sum(data)) {
		t.Fatalf("echo: %d bytes, %v; want %d bytes with the sent hash", n, err, size)
	}
	if _, ok := fc.(flow.Aborter); !ok {
		t.Error("FlowConn does not implement flow.Aborter")
	}
}

func sha256Sum(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

// TestResetEndToEnd: RST is carried both ways through the bridge, the
// tunnel and the egress. The client's reset (the stack calls Abort) makes
// the server's read fail with ECONNRESET; the server's reset makes the
// flow's Read fail with a stream reset (not io.EOF), which the stack turns
// into a RST to the client. Both within a second, far below any timeout.
func TestResetEndToEnd(t *testing.T) {
	leaktest.Check(t)
	near, far := drivertest.Pair(t, tcptest.Logger())
	serverRead := make(chan error, 1)
	lnAddr := tcptest.Server(t, func(c *net.TCPConn) {
		buf := make([]byte, 16)
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		switch string(buf[:n]) {
		case "rst": // the server resets the connection (closed on return)
			c.Write([]byte("bye"))
			time.Sleep(50 * time.Millisecond)
			c.SetLinger(0)
		default: // "wait": read until the client's reset arrives
			c.Write([]byte("ok"))
			_, err := io.Copy(io.Discard, c)
			serverRead <- err
		}
	})
	ctx := serveEgress(t, far, lnAddr.String())
	d := New(near, tcptest.Logger())

	// Client → server.
	fc, err := d.Dial(ctx, netip.MustParseAddrPort("198.18.1.2:40000"), lnAddr)
	if err != nil {
		t.Fatal(err)
	}
	fc.Write([]byte("wait"))
	if _, err := io.ReadFull(fc, make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := fc.(flow.Aborter).Abort(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-serverRead:
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("server read after the client's reset: %v; want ECONNRESET", err)
		}
		t.Logf("client reset reached the server in %v", time.Since(start))
	case <-time.After(time.Second):
		t.Fatal("the client's reset did not reach the server within 1 s")
	}

	// Server → client.
	fc, err = d.Dial(ctx, netip.MustParseAddrPort("198.18.1.2:40001"), lnAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	fc.Write([]byte("rst"))
	fc.(egress.TunnelEnd).SetReadDeadline(time.Now().Add(time.Second))
	got, err := io.ReadAll(fc)
	var se *driver.StreamError
	if !errors.As(err, &se) || se.StopSending || se.Code != driver.CodeTCPReset {
		t.Fatalf("flow read after the server's reset: %q, %v; want a stream reset with code %d", got, err, driver.CodeTCPReset)
	}
}
