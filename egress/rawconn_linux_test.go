package egress

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/wanopt/wanopt/flow"
)

// rawPair returns a rawConn and the kernel connection at its other end.
func rawPair(t *testing.T) (*rawConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	r, ok := wrapRaw(c).(*rawConn)
	if !ok {
		t.Fatal("wrapRaw did not wrap a TCP connection")
	}
	return r, peer
}

// Bytes cross both ways intact, larger than the socket buffers (so the
// writes wait for room and the reads for data), and the peer's FIN is EOF.
func TestRawConnTransfer(t *testing.T) {
	r, peer := rawPair(t)
	data := make([]byte, 16<<20)
	rand.Read(data)
	go func() { // echo
		io.Copy(peer, peer)
		peer.CloseWrite()
	}()
	errc := make(chan error, 1)
	go func() {
		_, err := r.Write(data)
		if err == nil {
			err = r.CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("echo differs: %d bytes back of %d", len(got), len(data))
	}
}

func TestRawConnErrors(t *testing.T) {
	r, peer := rawPair(t)
	r.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	var ne net.Error
	if _, err := r.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	r.SetReadDeadline(time.Time{})

	// A reset from the peer surfaces as ECONNRESET, as from net.TCPConn.
	peer.SetLinger(0)
	peer.Close()
	time.Sleep(10 * time.Millisecond)
	if _, err := r.Read(make([]byte, 10)); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("read after the peer's reset: %v, want an error", err)
	}

	r.Close()
	if _, err := r.Read(make([]byte, 10)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := r.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close: %v, want net.ErrClosed", err)
	}
}

// Abort sends a RST, as flow.Abort does for a plain net.TCPConn.
func TestRawConnAbort(t *testing.T) {
	r, peer := rawPair(t)
	if err := flow.Abort(r); err != nil {
		t.Fatal(err)
	}
	peer.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := peer.Read(make([]byte, 10)); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("peer read after Abort: %v, want a reset", err)
	}
}

func TestRawConnAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	r, peer := rawPair(t)
	buf := make([]byte, 4096)
	pbuf := make([]byte, 4096)
	n := testing.AllocsPerRun(100, func() {
		if _, err := r.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, pbuf); err != nil {
			t.Fatal(err)
		}
		if _, err := peer.Write(pbuf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(r, buf); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("%.1f allocations per write and read, want 0", n)
	}
}

// ReadBuffers fills several buffers in order with one read, waits for
// data like Read, and reports the peer's FIN as EOF.
func TestRawConnReadBuffers(t *testing.T) {
	r, peer := rawPair(t)
	data := make([]byte, 4<<20)
	rand.Read(data)
	go func() {
		peer.Write(data)
		peer.CloseWrite()
	}()
	var got []byte
	bufs := [][]byte{make([]byte, 1000), make([]byte, 32<<10), make([]byte, 5), make([]byte, 32<<10), make([]byte, 7)}
	spanned := false
	for {
		n, err := r.ReadBuffers(bufs)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n > 1000 {
			spanned = true
		}
		for _, b := range bufs[:4] { // at most four per read
			m := min(n, len(b))
			got = append(got, b[:m]...)
			n -= m
		}
		if n != 0 {
			t.Fatalf("ReadBuffers read %d bytes past its first four buffers", n)
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, not the %d sent", len(got), len(data))
	}
	if !spanned {
		t.Error("no read filled more than the first buffer")
	}
	if _, ok := any(r).(flow.BuffersReader); !ok {
		t.Error("rawConn is not a flow.BuffersReader")
	}
}
