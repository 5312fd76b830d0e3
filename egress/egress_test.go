package egress

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/tcptest"
	"github.com/wanopt/wanopt/tunnel/driver"
	"github.com/wanopt/wanopt/tunnel/driver/drivertest"
)

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in, out string
		allow   []string
		deny    []string
		bad     bool
	}{
		{in: "198.18.2.0/24", out: "198.18.2.0/24", allow: []string{"198.18.2.2:1", "198.18.2.255:65535"}, deny: []string{"198.18.3.1:80"}},
		{in: "198.18.2.7/24:80,443,8000-8100", out: "198.18.2.0/24:80,443,8000-8100", allow: []string{"198.18.2.2:80", "198.18.2.2:8050"}, deny: []string{"198.18.2.2:81", "198.18.2.2:8101"}},
		{in: "198.18.2.2:5001", out: "198.18.2.2/32:5001", allow: []string{"198.18.2.2:5001"}, deny: []string{"198.18.2.3:5001"}},
		{in: "[2001:db8::/32]:443", out: "[2001:db8::/32]:443", allow: []string{"[2001:db8::1]:443"}, deny: []string{"[2001:db9::1]:443"}},
		{in: "2001:db8::/32", out: "[2001:db8::/32]", allow: []string{"[2001:db8::1]:22"}},
		{in: "0.0.0.0/0", out: "0.0.0.0/0", allow: []string{"198.51.100.1:25"}},
		{in: "198.18.2.0/24:", bad: true},
		{in: "198.18.2.0/24:0", bad: true},
		{in: "198.18.2.0/24:70000", bad: true},
		{in: "198.18.2.0/24:90-80", bad: true},
		{in: "198.18.2.0/33", bad: true},
		{in: "example.com:80", bad: true},
		{in: "[2001:db8::/32", bad: true},
	} {
		r, err := ParseRule(tc.in)
		if tc.bad {
			if !errors.Is(err, ErrPolicy) {
				t.Errorf("ParseRule(%q) = %v, %v; want an ErrPolicy error", tc.in, r, err)
			}
			continue
		}
		if err != nil || r.String() != tc.out {
			t.Errorf("ParseRule(%q) = %q, %v; want %q", tc.in, r.String(), err, tc.out)
			continue
		}
		p := Policy{Rules: []Rule{r}}
		for _, a := range tc.allow {
			if !p.Allows(netip.MustParseAddrPort(a)) {
				t.Errorf("%q does not allow %s", tc.in, a)
			}
		}
		for _, a := range tc.deny {
			if p.Allows(netip.MustParseAddrPort(a)) {
				t.Errorf("%q allows %s", tc.in, a)
			}
		}
	}
	if (Policy{}).Allows(netip.MustParseAddrPort("198.18.2.2:80")) {
		t.Error("the zero Policy allows a destination; it must deny all")
	}
}

// fakeDialer fails every dial with err, or blocks until ctx ends when err
// is nil.
type fakeDialer struct{ err error }

func (d fakeDialer) Dial(ctx context.Context, _, _ netip.AddrPort) (flow.Conn, error) {
	if d.err != nil {
		return nil, d.err
	}
	<-ctx.Done()
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: ctx.Err()}
}

func TestOutcomes(t *testing.T) {
	leaktest.Check(t)
	closed := tcptest.ClosedPort(t)
	src := netip.MustParseAddrPort("198.18.1.2:40000")
	for _, tc := range []struct {
		name   string
		dialer flow.Dialer
		dst    netip.AddrPort
		want   error
	}{
		{"refused", nil, closed, driver.ErrOpenRefused},
		{"not allowed (address)", nil, netip.MustParseAddrPort("127.0.0.2:80"), driver.ErrOpenNotAllowed},
		{"not allowed (port)", nil, netip.AddrPortFrom(closed.Addr(), 1), driver.ErrOpenNotAllowed},
		{"unreachable", fakeDialer{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}}, closed, driver.ErrOpenUnreachable},
		{"net unreachable", fakeDialer{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}}, closed, driver.ErrOpenUnreachable},
		{"timed out", fakeDialer{}, closed, driver.ErrOpenTimedOut},
		{"other failure", fakeDialer{errors.New("boom")}, closed, driver.ErrOpenFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			near, far := drivertest.Pair(t, tcptest.Logger())
			pol := Policy{Rules: []Rule{{Prefix: netip.MustParsePrefix("127.0.0.1/32"), Ports: []PortRange{{2, 65535}}}}}
			e := New(pol, tc.dialer, Options{DialTimeout: 200 * time.Millisecond, Logger: tcptest.Logger()})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Serve(ctx, far) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Serve: %v", err)
				}
			}()
			octx, ocancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer ocancel()
			start := time.Now()
			s, err := near.OpenStream(octx, src, tc.dst)
			var oe *driver.OpenError
			if !errors.Is(err, tc.want) || !errors.As(err, &oe) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("OpenStream(%v) = %v; want an *OpenError wrapping %v", tc.dst, err, tc.want)
			}
			t.Logf("%v: %v after %v", tc.dst, err, time.Since(start).Round(time.Millisecond))
			if st := e.Stats(); st.Streams != 1 || st.Connected != 0 {
				t.Errorf("stats %+v; want 1 stream, none connected", st)
			}
		})
	}
}

// TestRelayHalfClose sends data up, half-closes, and the server answers
// only after it saw EOF: the reply must arrive after the near edge's FIN,
// then the server's FIN as io.EOF.
func TestRelayHalfClose(t *testing.T) {
	leaktest.Check(t)
	near, far := drivertest.Pair(t, tcptest.Logger())
	const size = 3 << 20
	dst := tcptest.Server(t, func(c *net.TCPConn) {
		n, _ := io.Copy(io.Discard, c) // until the client's FIN
		c.Write([]byte(strings.Repeat("x", int(n%1000)) + "got it"))
		c.CloseWrite()
		io.Copy(io.Discard, c)
	})
	e, s := serveAndOpen(t, near, far, dst)
	defer s.Close()
	if _, err := s.Write(bytes.Repeat([]byte{7}, size)); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	s.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(s)
	if err != nil || !strings.HasSuffix(string(got), "got it") || len(got) != size%1000+6 {
		t.Fatalf("reply %d bytes %q…, %v; want %d bytes ending in 'got it', then EOF", len(got), got[:min(len(got), 20)], err, size%1000+6)
	}
	waitIdle(e)
	st := e.Stats()
	if st.Connected != 1 || st.Active != 0 || st.BytesUp != size || st.BytesDown != uint64(len(got)) {
		t.Errorf("stats %+v; want 1 connected, 0 active, %d up, %d down", st, size, len(got))
	}
}

// serveAndOpen runs an egress that allows dst alone on far until the test
// ends, and opens a stream from near to dst.
func serveAndOpen(t *testing.T, near, far *driver.Tunnel, dst netip.AddrPort) (*Egress, *driver.Stream) {
	t.Helper()
	pol, _ := ParsePolicy([]string{dst.String()})
	e := New(pol, nil, Options{Logger: tcptest.Logger()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, far) }()
	t.Cleanup(func() { cancel(); <-done })
	s, err := near.OpenStream(ctx, netip.MustParseAddrPort("198.18.1.2:40000"), dst)
	if err != nil {
		t.Fatal(err)
	}
	return e, s
}

// waitIdle waits up to 5 s for e's flows to end.
func waitIdle(e *Egress) {
	deadline := time.Now().Add(5 * time.Second)
	for e.Stats().Active != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// TestServerReset: a server that resets the connection resets the stream at
// the near edge (a *driver.StreamError, not EOF or a hang), and a near edge that closes
// its stream while the server sends gets the server reset.
func TestServerReset(t *testing.T) {
	leaktest.Check(t)
	near, far := drivertest.Pair(t, tcptest.Logger())
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serverErr := make(chan error, 2)
	go func() {
		for i := 0; i < 2; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if i == 0 { // reset once connected
				time.Sleep(100 * time.Millisecond)
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
				continue
			}
			// keep sending until the write fails (the egress reset us)
			buf := make([]byte, 64<<10)
			var werr error
			for werr == nil {
				_, werr = c.Write(buf)
			}
			serverErr <- werr
			c.Close()
		}
	}()
	pol, _ := ParsePolicy([]string{ln.Addr().String()})
	e := New(pol, nil, Options{Logger: tcptest.Logger()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, far) }()
	defer func() { cancel(); <-done }()
	dst := netip.MustParseAddrPort(ln.Addr().String())

	s, err := near.OpenStream(ctx, netip.MustParseAddrPort("198.18.1.2:40000"), dst)
	if err != nil {
		t.Fatal(err)
	}
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	var se *driver.StreamError
	if _, err := io.ReadAll(s); !errors.As(err, &se) || se.StopSending || se.Code != driver.CodeTCPReset {
		t.Errorf("stream of a reset server: %v; want a stream reset with code %d", err, driver.CodeTCPReset)
	}
	s.Close()

	s, err = near.OpenStream(ctx, netip.MustParseAddrPort("198.18.1.2:40001"), dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(s, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	s.Close() // unread data waits: a reset, and STOP_SENDING
	select {
	case err := <-serverErr:
		t.Logf("server write after the near edge closed: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("server kept sending 5 s after the near edge closed the stream")
	}
}

// TestNearReset: the near edge resetting the stream (its client's RST)
// resets the server socket at once: the server's read fails with
// ECONNRESET, not EOF.
func TestNearReset(t *testing.T) {
	leaktest.Check(t)
	near, far := drivertest.Pair(t, tcptest.Logger())
	serverRead := make(chan error, 1)
	dst := tcptest.Server(t, func(c *net.TCPConn) {
		c.Write([]byte("hi"))
		_, err := io.Copy(io.Discard, c)
		serverRead <- err
	})
	e, s := serveAndOpen(t, near, far, dst)
	s.Write([]byte("some data"))
	if _, err := io.ReadFull(s, make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	s.Reset(driver.CodeTCPReset)
	select {
	case err := <-serverRead:
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("server read after the near edge's reset: %v; want ECONNRESET", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the near edge's reset did not reach the server within 2 s")
	}
	waitIdle(e)
	if a := e.Stats().Active; a != 0 {
		t.Errorf("%d flows still active after the reset", a)
	}
}

// TestMaxFlows: beyond MaxFlows, streams are refused with ResourceLimit.
func TestMaxFlows(t *testing.T) {
	leaktest.Check(t)
	near, far := drivertest.Pair(t, tcptest.Logger())
	e := New(Policy{Rules: []Rule{{Prefix: netip.MustParsePrefix("127.0.0.1/32")}}}, fakeDialer{}, Options{MaxFlows: 2, DialTimeout: 2 * time.Second, Logger: tcptest.Logger()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, far) }()
	defer func() { cancel(); <-done }()
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() {
			_, err := near.OpenStream(ctx, netip.AddrPortFrom(netip.MustParseAddr("198.18.1.2"), uint16(40000+i)), netip.MustParseAddrPort("127.0.0.1:9"))
			errs <- err
		}()
		time.Sleep(50 * time.Millisecond) // in order
	}
	if err := <-errs; !errors.Is(err, driver.ErrOpenResourceLimit) {
		t.Errorf("third flow: %v; want ErrOpenResourceLimit", err)
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; !errors.Is(err, driver.ErrOpenTimedOut) {
			t.Errorf("flow within the limit: %v; want ErrOpenTimedOut from the blocking dialer", err)
		}
	}
	if st := e.Stats(); st.Overloaded != 1 || st.TimedOut != 2 {
		t.Errorf("stats %+v; want 1 overloaded, 2 timed out", st)
	}
}

// TestBudgetFull: a flow the memory budget cannot hold is refused with
// ResourceLimit before anything is dialled, and counted.
func TestBudgetFull(t *testing.T) {
	leaktest.Check(t)
	near, far := drivertest.Pair(t, tcptest.Logger())
	b := flow.NewBudget(1, 64<<10, 0)
	e := New(Policy{Rules: []Rule{{Prefix: netip.MustParsePrefix("127.0.0.1/32")}}}, fakeDialer{}, Options{Budget: b, DialTimeout: time.Second, Logger: tcptest.Logger()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, far) }()
	defer func() { cancel(); <-done }()
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			_, err := near.OpenStream(ctx, netip.AddrPortFrom(netip.MustParseAddr("198.18.1.2"), uint16(40000+i)), netip.MustParseAddrPort("127.0.0.1:9"))
			errs <- err
		}()
		time.Sleep(50 * time.Millisecond) // in order
	}
	if err := <-errs; !errors.Is(err, driver.ErrOpenResourceLimit) {
		t.Errorf("second flow: %v; want ErrOpenResourceLimit", err)
	}
	if err := <-errs; !errors.Is(err, driver.ErrOpenTimedOut) {
		t.Errorf("flow within the budget: %v; want ErrOpenTimedOut from the blocking dialer", err)
	}
	for deadline := time.Now().Add(5 * time.Second); e.Stats().Active != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // the flow's handler returns after its answer
	}
	if st := e.Stats(); st.OverBudget != 1 || st.TimedOut != 1 || b.Stats().Flows != 0 || b.Stats().FlowsRefused != 1 {
		t.Errorf("stats %+v, budget %+v; want 1 over budget, 1 timed out, the floor released", st, b.Stats())
	}
}

// TestServeEndsWithTunnel: Serve returns the tunnel's error when it closes.
func TestServeEndsWithTunnel(t *testing.T) {
	leaktest.Check(t)
	near, far := drivertest.Pair(t, tcptest.Logger())
	done := make(chan error, 1)
	go func() { done <- New(Policy{}, nil, Options{}).Serve(context.Background(), far) }()
	near.Close()
	select {
	case err := <-done:
		if !errors.Is(err, driver.ErrTunnelClosed) {
			t.Errorf("Serve after the peer closed: %v; want ErrTunnelClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the tunnel closed")
	}
}
