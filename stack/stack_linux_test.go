//go:build linux

package stack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/netnstest"
	"github.com/wanopt/wanopt/internal/tcptest"
)

// TestTransferBothWays sends 10 MB each way at the same time through the
// stack, hash-checked, each side closing its write half when done, over
// both link endpoints, IPv4 and IPv6, small and large MTU.
func TestTransferBothWays(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mtu     int
		offload bool
		dst     netip.Addr
	}{
		{"fdbased-1500-v4", 1500, false, interAddr},
		{"fdbased-65535-v4", 65535, false, interAddr},
		{"fdbased-1500-v6", 1500, false, interAddr6},
		{"offload-1500-v4", 1500, true, interAddr},
		{"offload-1500-v6", 1500, true, interAddr6},
	} {
		t.Run(tc.name, func(t *testing.T) { transferBothWays(t, tc.mtu, tc.offload, tc.dst) })
	}
}

func transferBothWays(t *testing.T, mtu int, offload bool, dst netip.Addr) {
	const size = 10 << 20
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	up, down := tcptest.Payload(seed, size), tcptest.Payload(seed+1, size)
	gotUp := make(chan [32]byte, 1)
	addr := tcptest.Server(t, func(c *net.TCPConn) {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := sha256.New()
			io.Copy(h, c)
			gotUp <- [32]byte(h.Sum(nil))
		}()
		c.Write(down)
		c.CloseWrite()
		wg.Wait()
	})
	l := newLabLink(t, mtu, offload, &fakeDialer{target: addr}, Config{})
	if want := map[bool]string{false: "fdbased", true: "offload"}[offload]; l.st.link != want {
		t.Fatalf("stack chose link %q, want %q", l.st.link, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := l.dial(ctx, netip.AddrPortFrom(dst, 80))
	if err != nil {
		t.Fatalf("dial through stack: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(up)
		if err == nil {
			err = c.CloseWrite()
		}
		werr <- err
	}()
	h := sha256.New()
	n, err := io.Copy(h, c)
	if err != nil {
		t.Fatalf("client read after %d bytes: %v", n, err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("client write: %v", err)
	}
	if n != size || [32]byte(h.Sum(nil)) != sha256.Sum256(down) {
		t.Fatalf("client received %d bytes, hash mismatch or short (want %d)", n, size)
	}
	select {
	case sum := <-gotUp:
		if sum != sha256.Sum256(up) {
			t.Fatal("server received corrupted data")
		}
	case <-ctx.Done():
		t.Fatal("server did not see the client's FIN")
	}
	waitFlowsEmpty(t, l.st, 5*time.Second)
}

// labConn is a lab whose dialer connects to addr, and a client's
// connection through it to port 80, closed when the test ends, with its
// deadline d away.
func labConn(t *testing.T, addr netip.AddrPort, d time.Duration) (*lab, *net.TCPConn) {
	t.Helper()
	l := newLab(t, 1500, &fakeDialer{target: addr}, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c, err := l.dial(ctx, netip.AddrPortFrom(interAddr, 80))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(d))
	return l, c
}

// TestHalfClose: the client shuts its write half; the server sees EOF and
// only then answers, and the client still receives the answer.
func TestHalfClose(t *testing.T) {
	addr := tcptest.Server(t, func(c *net.TCPConn) {
		b, err := io.ReadAll(c)
		if err != nil {
			return
		}
		fmt.Fprintf(c, "got %d bytes", len(b))
		c.Write(bytes.Repeat([]byte("x"), 1<<20))
	})
	l, c := labConn(t, addr, 20*time.Second)
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	// While only the client has closed, the flow table must say so.
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read after CloseWrite: %v", err)
	}
	if want := "got 5 bytes"; !strings.HasPrefix(string(b), want) || len(b) != len(want)+1<<20 {
		t.Fatalf("client got %d bytes starting %q, want %q and 1 MiB", len(b), b[:min(len(b), 20)], want)
	}
	waitFlowsEmpty(t, l.st, 5*time.Second)
}

// TestRefused: the far side refuses, the client gets a RST at once.
func TestRefused(t *testing.T) {
	d := &fakeDialer{fail: func(netip.AddrPort) error { return fmt.Errorf("server said no: %w", flow.ErrRefused) }}
	l := newLab(t, 1500, d, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := l.dial(ctx, netip.AddrPortFrom(interAddr, 81))
	el := time.Since(start)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial: got %v, want connection refused", err)
	}
	if el > 500*time.Millisecond {
		t.Fatalf("refusal took %v, want well under a second", el)
	}
	t.Logf("refused after %v", el)
	if s := l.st.Stats(); s.Refused != 1 {
		t.Fatalf("stats %+v, want Refused 1", s)
	}
}

// TestBlackhole: the far side never answers; the client sees no answer at
// all and its connect times out, as on a black-holed path. Each client SYN
// retransmission after a Dial timed out is a new Dial.
func TestBlackhole(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    *fakeDialer
	}{
		{"hang", &fakeDialer{hang: true}},
		{"unreachable", &fakeDialer{fail: func(netip.AddrPort) error { return flow.ErrUnreachable }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t, 1500, tc.d, Config{DialTimeout: 700 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
			defer cancel()
			start := time.Now()
			c, err := l.dial(ctx, netip.AddrPortFrom(interAddr, 80))
			el := time.Since(start)
			if err == nil {
				c.Close()
				t.Fatal("connect succeeded, want timeout")
			}
			var ne net.Error
			if !(errors.As(err, &ne) && ne.Timeout()) && !errors.Is(err, syscall.ETIMEDOUT) {
				t.Fatalf("connect: %v, want a timeout (not a refusal)", err)
			}
			if el < 2*time.Second {
				t.Fatalf("connect failed after %v, before the client's own timeout", el)
			}
			// The client sent its SYN at 0 and retransmitted at 1 s (and 3 s):
			// at least two dials.
			deadline := time.Now().Add(3 * time.Second)
			for tc.d.calls.Load() < 2 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			s := l.st.Stats()
			t.Logf("dials %d, stats %+v", tc.d.calls.Load(), s)
			if tc.d.calls.Load() < 2 || s.Refused != 0 || s.Dialed != 0 {
				t.Fatalf("dials %d, stats %+v: want >= 2 dials, none refused or connected", tc.d.calls.Load(), s)
			}
			waitFlowsEmpty(t, l.st, 3*time.Second)
		})
	}
}

// TestFarReset: the server resets mid-flow; the client gets a RST.
// TestClientReset is the other way round.
func TestFarReset(t *testing.T) {
	addr := tcptest.Server(t, func(c *net.TCPConn) {
		c.Write([]byte("hi"))
		time.Sleep(100 * time.Millisecond)
		c.SetLinger(0)
		c.Close()
	})
	l, c := labConn(t, addr, 10*time.Second)
	_, err := io.ReadAll(c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client read: %v, want connection reset", err)
	}
	waitFlowsEmpty(t, l.st, 5*time.Second)
}

func TestClientReset(t *testing.T) {
	srvErr := make(chan error, 1)
	addr := tcptest.Server(t, func(c *net.TCPConn) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err := io.Copy(io.Discard, c)
		srvErr <- err
	})
	l := newLab(t, 1500, &fakeDialer{target: addr}, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := l.dial(ctx, netip.AddrPortFrom(interAddr, 80))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.Write([]byte("some data"))
	time.Sleep(100 * time.Millisecond)
	c.SetLinger(0)
	c.Close()
	select {
	case err := <-srvErr:
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("server read: %v, want connection reset", err)
		}
	case <-ctx.Done():
		t.Fatal("server did not see the reset")
	}
	waitFlowsEmpty(t, l.st, 5*time.Second)
}

// TestConcurrentShort runs 200 concurrent short echo connections; all must
// succeed, the flow table must empty and the goroutine count must return to
// its baseline once the stack is closed.
func TestConcurrentShort(t *testing.T) {
	leaktest.Check(t)
	const n = 200
	addr := tcptest.Server(t, tcptest.Echo)
	l := newLab(t, 1500, &fakeDialer{target: addr}, Config{MaxInFlight: 256})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := l.dial(ctx, netip.AddrPortFrom(interAddr, uint16(8000+i%50)))
			if err != nil {
				errs <- fmt.Errorf("conn %d: dial: %w", i, err)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			msg := tcptest.Payload(uint64(i), 4096)
			if _, err := c.Write(msg); err != nil {
				errs <- fmt.Errorf("conn %d: write: %w", i, err)
				return
			}
			c.CloseWrite()
			b, err := io.ReadAll(c)
			if err != nil || !bytes.Equal(b, msg) {
				errs <- fmt.Errorf("conn %d: echo: %d bytes, err %v", i, len(b), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitFlowsEmpty(t, l.st, 10*time.Second)
	s := l.st.Stats()
	t.Logf("stats %+v", s)
	if s.Dialed != n || s.ForwarderDrops != 0 {
		t.Errorf("dialed %d (want %d), forwarder drops %d", s.Dialed, n, s.ForwarderDrops)
	}
}

// TestCurl fetches a page through the stack with the real curl in the
// client namespace.
func TestCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl")
	}
	body := tcptest.Payload(7, 1<<20)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	l := newLab(t, 1500, &fakeDialer{target: netip.MustParseAddrPort(ln.Addr().String())}, Config{})
	out, err := exec.Command("ip", "netns", "exec", l.nsName, "curl", "-sS", "--max-time", "10",
		"-o", "/dev/null", "-w", "%{http_code} %{size_download}", "http://198.18.2.2:80/").CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v: %s", err, out)
	}
	if got, want := string(out), fmt.Sprintf("200 %d", len(body)); got != want {
		t.Fatalf("curl: %q, want %q", got, want)
	}
}

// TestPortReuseAfterServerClose: a client that connects again from the
// port of a connection the server closed first must be answered at once.
// The stack's end of that connection closed first too, so it would sit in
// TIME-WAIT, while the client's end, the passive closer, is free to reuse
// the port. gVisor hands a new SYN that hits a TIME-WAIT endpoint only to
// a listening endpoint, which the forwarder is not, so with gVisor's 60 s
// TIME-WAIT the SYN would be dropped until it ended.
func TestPortReuseAfterServerClose(t *testing.T) {
	addr := tcptest.Server(t, func(c *net.TCPConn) {
		c.Write([]byte("bye"))
		c.Close()
	})
	l := newLab(t, 1500, &fakeDialer{target: addr}, Config{})
	dst := netip.AddrPortFrom(interAddr, 80)
	src := &net.TCPAddr{IP: clientAddr.AsSlice(), Port: 47123}
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		var c net.Conn
		err := netnstest.Do(l.ns, func() error {
			var err error
			c, err = (&net.Dialer{LocalAddr: src}).DialContext(ctx, "tcp", dst.String())
			return err
		})
		cancel()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("connection %d from port %d: dial after %v: %v", i, src.Port, took, err)
		}
		// Over a millisecond's LAN the answer takes the far side's
		// connect; a dropped SYN costs the client's 1 s retransmission.
		if took > 500*time.Millisecond {
			t.Errorf("connection %d from port %d took %v to connect, want well under the 1 s of a SYN retransmission", i, src.Port, took)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(b) != "bye" {
			t.Fatalf("connection %d: read %q, %v", i, b, err)
		}
		waitFlowsEmpty(t, l.st, 5*time.Second)
	}
}
