package tcptest

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/leaktest"
)

// TestEcho: the echo comes back whole, with the server's FIN after the
// client's; a connection left open is closed, and every goroutine ended,
// by the cleanup of a subtest.
func TestEcho(t *testing.T) {
	leaktest.Check(t)
	var open *net.TCPConn
	t.Run("serve", func(t *testing.T) {
		addr := Server(t, Echo)
		c, err := net.Dial("tcp4", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		msg := Payload(1, 100_003)
		go func() { c.Write(msg); c.(*net.TCPConn).CloseWrite() }()
		if got, err := io.ReadAll(c); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("echo: %d bytes, %v; want the %d sent, then EOF", len(got), err, len(msg))
		}
		if open, err = net.DialTCP("tcp4", nil, net.TCPAddrFromAddrPort(addr)); err != nil {
			t.Fatal(err)
		}
		if _, err := open.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(open, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
	})
	defer open.Close()
	open.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(open); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after the server's cleanup: %v; want EOF or a reset", err)
	}
	if c, err := net.Dial("tcp4", ClosedPort(t).String()); err == nil {
		c.Close()
		t.Error("connected to ClosedPort")
	}
}

func TestPayload(t *testing.T) {
	a, b := Payload(7, 1003), Payload(7, 1003)
	if !bytes.Equal(a, b) || bytes.Equal(a, Payload(8, 1003)) {
		t.Error("Payload is not a function of its seed alone")
	}
	if bytes.Equal(a[1000:], make([]byte, 3)) {
		t.Error("Payload leaves its tail zero")
	}
	if !bytes.Equal(Payload(7, 16), a[:16]) {
		t.Error("a shorter Payload is not a prefix of a longer one")
	}
}
