// Package tcptest is a small kit for tests only; nothing but _test.go files
// may import it. It gives TCP servers on loopback that stop with the test
// (Serve, Server) and the common handlers for them (Echo), an address
// nothing listens on (ClosedPort), deterministic payloads (Payload) and the
// logger for the code under test (Logger).
package tcptest

import (
	"encoding/binary"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
)

// Serve accepts connections on ln, a TCP listener, until it closes, and runs
// handle for each in a goroutine of its own; a connection is closed when its
// handler returns. When the test ends (tb.Cleanup), Serve closes ln and the
// connections still open, and waits for the accept loop and every handler
// to return: a handler must therefore end once its connection is closed.
func Serve(tb testing.TB, ln net.Listener, handle func(c *net.TCPConn)) {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		stopped bool
		conns   = map[net.Conn]struct{}{}
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if stopped { // accepted as the cleanup ran
				mu.Unlock()
				c.Close()
				return
			}
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c.(*net.TCPConn))
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
			}()
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		stopped = true
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// Server listens on 127.0.0.1 at a free port, serves the listener with
// handle as Serve does, and returns its address.
func Server(tb testing.TB, handle func(c *net.TCPConn)) netip.AddrPort {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	Serve(tb, ln, handle)
	return netip.MustParseAddrPort(ln.Addr().String())
}

// Echo is a half-close-aware echo handler: it sends back what c receives
// until the peer's FIN, then sends its own FIN, and reads on until the peer
// closes.
func Echo(c *net.TCPConn) {
	io.Copy(c, c)
	c.CloseWrite()
	io.Copy(io.Discard, c)
}

// ClosedPort returns an address on 127.0.0.1 that nothing listens on: a
// port just freed.
func ClosedPort(tb testing.TB) netip.AddrPort {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	ap := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	return ap
}

// Payload returns n pseudo-random bytes that depend only on seed, so that a
// test can make the same bytes again to check those that arrived.
func Payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	var w [8]byte
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		copy(b[i:], w[:])
	}
	return b
}

// Logger returns the logger to give the code under test: silent, unless
// the environment variable WANOPT_TEST_LOG is set, then at debug level on
// standard error.
func Logger() *slog.Logger {
	if os.Getenv("WANOPT_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
