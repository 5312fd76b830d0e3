package stack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/link/pipe"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/internal/tcptest"
)

// refuseAll is a Dialer for stacks whose intercepting side is not under
// test.
type refuseAll struct{}

func (refuseAll) Dial(context.Context, netip.AddrPort, netip.AddrPort) (flow.Conn, error) {
	return nil, flow.ErrRefused
}

// outboundPair joins a Stack (the far edge) to a plain gVisor stack owning
// only 198.18.2.2 (the server's host) with an in-memory pipe, and returns
// both. No root, no TUN: the server's host sees exactly the packets the
// edge's NIC sends.
func outboundPair(t *testing.T) (*Stack, *gstack.Stack) {
	t.Helper()
	edgeEP, serverEP := pipe.New("", "", 1500)
	st, err := NewWithEndpoint(context.Background(), edgeEP, refuseAll{}, Config{
		MTU: 1500, Logger: slog.New(slog.DiscardHandler), KeepAliveIdle: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := plainHost(t, serverEP, [4]byte{198, 18, 2, 2})
	t.Cleanup(func() { st.Close() }) // before plainHost's cleanup
	return st, srv
}

func listenServer(t *testing.T, srv *gstack.Stack, port uint16) net.Listener {
	t.Helper()
	ln, err := gonet.ListenTCP(srv, tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4([4]byte{198, 18, 2, 2}), Port: port}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestDialTCPTransparent connects from a client's address the edge does not
// own: the server must see that address, and 4 MiB must cross each way
// intact with each direction closed on its own (half-close).
func TestDialTCPTransparent(t *testing.T) {
	st, srv := outboundPair(t)
	ln := listenServer(t, srv, 80)
	const size = 4 << 20
	type result struct {
		remote string
		sum    [32]byte
		n      int64
		err    error
	}
	got := make(chan result, 1)
	go func() { // the server hashes what it receives, then sends its own payload
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		h := sha256.New()
		n, err := io.Copy(h, c)
		r := result{remote: c.RemoteAddr().String(), n: n, err: err}
		copy(r.sum[:], h.Sum(nil))
		if err == nil {
			_, r.err = c.Write(tcptest.Payload(2, size))
		}
		got <- r
	}()

	src := netip.MustParseAddrPort("198.18.1.2:40001")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := st.DialTCP(ctx, src, netip.MustParseAddrPort("198.18.2.2:80"))
	if err != nil {
		t.Fatalf("DialTCP: %v", err)
	}
	defer c.Close()
	if c.LocalAddr() != src {
		t.Errorf("LocalAddr = %v, want the client's %v", c.LocalAddr(), src)
	}
	up := tcptest.Payload(1, size)
	if _, err := c.Write(up); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	down, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read the server's data after our FIN: %v", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("server: %v", r.err)
	}
	if r.remote != src.String() {
		t.Errorf("server saw the connection from %s, want the client's address %v", r.remote, src)
	}
	if r.n != size || r.sum != sha256.Sum256(up) {
		t.Errorf("server received %d bytes (hash equal: %v), want %d intact", r.n, r.sum == sha256.Sum256(up), size)
	}
	if !bytes.Equal(down, tcptest.Payload(2, size)) {
		t.Errorf("received %d bytes from the server, want %d intact", len(down), size)
	}
}

func TestDialTCPRefused(t *testing.T) {
	st, _ := outboundPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := st.DialTCP(ctx, netip.MustParseAddrPort("198.18.1.2:40002"), netip.MustParseAddrPort("198.18.2.2:81"))
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("DialTCP to a closed port: %v, want ECONNREFUSED", err)
	}
}

// TestDialTCPGiveUp: a destination that never answers holds DialTCP until
// ctx ends, and the half-open endpoint is released.
func TestDialTCPGiveUp(t *testing.T) {
	st, _ := outboundPair(t)
	base := len(st.s.RegisteredEndpoints())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := st.DialTCP(ctx, netip.MustParseAddrPort("198.18.1.2:40003"), netip.MustParseAddrPort("198.18.3.3:80"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("DialTCP to a silent address: %v, want context.DeadlineExceeded", err)
	}
	for i := 0; len(st.s.RegisteredEndpoints()) > base; i++ {
		if i > 100 {
			t.Fatalf("%d endpoints registered after giving up, want %d", len(st.s.RegisteredEndpoints()), base)
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDialTCPAbort: Abort resets the server's connection and unblocks our
// own pending Read.
func TestDialTCPAbort(t *testing.T) {
	st, srv := outboundPair(t)
	ln := listenServer(t, srv, 80)
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(io.Discard, c)
		srvErr <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := st.DialTCP(ctx, netip.MustParseAddrPort("198.18.1.2:40004"), netip.MustParseAddrPort("198.18.2.2:80"))
	if err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 10))
		readErr <- err
	}()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	c.Abort()
	if err := <-readErr; err == nil || err == io.EOF {
		t.Errorf("our Read after Abort: %v, want an abort error", err)
	}
	select {
	case err := <-srvErr:
		if err == nil {
			t.Errorf("server read ended cleanly after our Abort, want a reset")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server still reading 10 s after our Abort")
	}
}

// TestDialTCPCloseUnblocks: Close while a Read and a Write wait (the
// server neither sends nor reads) returns both.
func TestDialTCPCloseUnblocks(t *testing.T) {
	st, srv := outboundPair(t)
	ln := listenServer(t, srv, 80)
	hold := make(chan struct{})
	defer close(hold)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			<-hold // hold the connection, do nothing
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := st.DialTCP(ctx, netip.MustParseAddrPort("198.18.1.2:40006"), netip.MustParseAddrPort("198.18.2.2:80"))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { _, err := c.Read(make([]byte, 10)); errs <- err }()
	go func() { _, err := c.Write(make([]byte, 64<<20)); errs <- err }() // more than every buffer
	time.Sleep(100 * time.Millisecond)                                   // let both block
	c.Close()
	for range 2 {
		select {
		case err := <-errs:
			if err == nil {
				t.Error("a blocked call returned no error after Close")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Read or Write still blocked 5 s after Close")
		}
	}
}

func TestDialTCPAfterClose(t *testing.T) {
	st, _ := outboundPair(t)
	st.Close()
	_, err := st.DialTCP(context.Background(), netip.MustParseAddrPort("198.18.1.2:40005"), netip.MustParseAddrPort("198.18.2.2:80"))
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("DialTCP after Close: %v, want ErrClosed", err)
	}
}

// TestWatchReset: a Conn's WatchReset reports the peer's RST although no
// Read or Write waits on the Conn, and reports nothing for a graceful
// close.
func TestWatchReset(t *testing.T) {
	st, srv := outboundPair(t)
	ln := listenServer(t, srv, 80)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan net.Conn, 2)
	go func() {
		for range 2 {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func(port uint16) (*Conn, net.Conn, <-chan struct{}) {
		t.Helper()
		c, err := st.DialTCP(ctx, netip.AddrPortFrom(netip.MustParseAddr("198.18.1.2"), port), netip.MustParseAddrPort("198.18.2.2:80"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fired := make(chan struct{})
		stop := c.WatchReset(func() { close(fired) })
		t.Cleanup(stop)
		return c, <-accepted, fired
	}

	// The server closes with our bytes unread: a RST.
	c, s, fired := dial(40010)
	if _, err := c.Write([]byte("never read")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the bytes reach the server
	s.Close()
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("the server's RST did not fire the watch within 5 s")
	}

	// Both sides close after the other's FIN: no failure.
	c, s, fired = dial(40011)
	s.Close()
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("read to the server's FIN: %v", err)
	}
	c.CloseWrite()
	time.Sleep(200 * time.Millisecond) // the FINs and their ACKs cross
	select {
	case <-fired:
		t.Fatal("a graceful close fired the watch")
	default:
	}
}
