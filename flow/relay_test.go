package flow

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/tcptest"
)

var errReset = errors.New("connection reset")

// end is one end of an in-memory TCP-like connection: it reads what the
// other end writes. CloseWrite gives the other end io.EOF; Abort gives it
// errReset both ways, as a RST does.
type end struct {
	r       *io.PipeReader
	w       *io.PipeWriter
	aborted atomic.Bool
	closed  atomic.Bool
	peer    *end
}

func pair() (*end, *end) {
	r1, w1 := io.Pipe()
	r2, w2 := io.Pipe()
	a, b := &end{r: r1, w: w2}, &end{r: r2, w: w1}
	a.peer, b.peer = b, a
	return a, b
}

func (e *end) Read(p []byte) (int, error)  { return e.r.Read(p) }
func (e *end) Write(p []byte) (int, error) { return e.w.Write(p) }
func (e *end) CloseWrite() error           { return e.w.Close() }

func (e *end) Close() error {
	e.closed.Store(true)
	e.r.CloseWithError(io.ErrClosedPipe)
	e.w.Close()
	return nil
}

func (e *end) Abort() error {
	e.aborted.Store(true)
	e.r.CloseWithError(errReset)
	e.w.CloseWithError(errReset)
	e.closed.Store(true)
	return nil
}

// relayed is a flow client ↔ relay ↔ server with Relay running between.
type relayed struct {
	client, lan, wan, server *end
	up, down                 atomic.Uint64
	halfClosed               atomic.Int32
	done                     chan struct{}
	cancel                   context.CancelFunc
}

func startRelay(t *testing.T) *relayed { return startRelayIdle(t, 0, nil) }

func startRelayIdle(t *testing.T, idle time.Duration, idled func()) *relayed {
	t.Helper()
	f := &relayed{done: make(chan struct{})}
	f.client, f.lan = pair()
	f.wan, f.server = pair()
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() {
		defer close(f.done)
		Relay(ctx, f.lan, f.wan, RelayOptions{LANToWAN: &f.up, WANToLAN: &f.down,
			HalfClosed: func(bool) { f.halfClosed.Add(1) }, IdleTimeout: idle, Idled: idled})
	}()
	t.Cleanup(func() {
		cancel()
		<-f.done
	})
	return f
}

func (f *relayed) wait(t *testing.T) {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(5 * time.Second):
		t.Fatal("Relay did not return")
	}
}

// readAll reads r to its end in the background.
func readAll(r io.Reader) <-chan result {
	ch := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(r)
		ch <- result{b, err}
	}()
	return ch
}

type result struct {
	b   []byte
	err error
}

func TestRelay(t *testing.T) {
	t.Run("FIN each way, graceful close", func(t *testing.T) {
		leaktest.Check(t)
		f := startRelay(t)
		req, resp := tcptest.Payload(1, 100<<10), tcptest.Payload(2, 1<<20)
		atServer := readAll(f.server)
		atClient := readAll(f.client)
		f.client.Write(req)
		f.client.CloseWrite()
		got := <-atServer
		if got.err != nil || !bytes.Equal(got.b, req) {
			t.Fatalf("server read %d bytes, err %v; want the request's %d and EOF", len(got.b), got.err, len(req))
		}
		// Half-closed: the server still answers.
		f.server.Write(resp)
		f.server.CloseWrite()
		got = <-atClient
		if got.err != nil || !bytes.Equal(got.b, resp) {
			t.Fatalf("client read %d bytes, err %v; want the answer's %d and EOF", len(got.b), got.err, len(resp))
		}
		f.wait(t)
		if f.lan.aborted.Load() || f.wan.aborted.Load() || !f.lan.closed.Load() || !f.wan.closed.Load() {
			t.Errorf("ends aborted %v/%v closed %v/%v; want both closed gracefully", f.lan.aborted.Load(), f.wan.aborted.Load(), f.lan.closed.Load(), f.wan.closed.Load())
		}
		if f.up.Load() != uint64(len(req)) || f.down.Load() != uint64(len(resp)) || f.halfClosed.Load() != 2 {
			t.Errorf("counted %d up, %d down, %d half-closes; want %d, %d, 2", f.up.Load(), f.down.Load(), f.halfClosed.Load(), len(req), len(resp))
		}
	})
	for _, c := range []struct {
		name  string
		reset func(f *relayed)
		// serverMayEOF: the client's FIN may reach the server's reader
		// before the server's own RST ends it; either is right.
		serverMayEOF bool
	}{
		{"server RST resets the client", func(f *relayed) { f.server.Abort() }, false},
		{"client RST resets the server", func(f *relayed) { f.client.Abort() }, false},
		{"RST after a FIN resets the rest", func(f *relayed) { f.client.CloseWrite(); f.server.Abort() }, true},
		{"done context resets both", func(f *relayed) { f.cancel() }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			leaktest.Check(t)
			f := startRelay(t)
			atClient, atServer := readAll(f.client), readAll(f.server)
			f.client.Write([]byte("hello"))
			c.reset(f)
			f.wait(t)
			if !f.lan.aborted.Load() || !f.wan.aborted.Load() {
				t.Errorf("ends aborted: lan %v, wan %v; want both", f.lan.aborted.Load(), f.wan.aborted.Load())
			}
			f.client.Close()
			f.server.Close()
			if r := <-atClient; r.err == nil {
				t.Errorf("client's read ended cleanly; want an error (a reset)")
			}
			if r := <-atServer; !errors.Is(r.err, errReset) && !errors.Is(r.err, io.ErrClosedPipe) && (r.err != nil || !c.serverMayEOF) {
				t.Errorf("server's read ended with %v; want a reset", r.err)
			}
		})
	}
}

// A write that fails (the far end gone) resets both ends.
func TestRelayWriteFails(t *testing.T) {
	leaktest.Check(t)
	f := startRelay(t)
	f.server.r.CloseWithError(errReset) // the server stops reading
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); io.Copy(io.Discard, f.client) }()
	f.client.Write([]byte("lost"))
	f.wait(t)
	if !f.lan.aborted.Load() || !f.wan.aborted.Load() {
		t.Errorf("ends aborted: lan %v, wan %v; want both", f.lan.aborted.Load(), f.wan.aborted.Load())
	}
	f.client.Close()
	wg.Wait()
}

// TestRelayIdleTimeout: a flow nobody uses is reset after its idle
// timeout; one that moves bytes, or waits on a receiver that does not
// read (as during a WAN outage), is not.
func TestRelayIdleTimeout(t *testing.T) {
	const idle = 100 * time.Millisecond
	t.Run("idle flow is reset", func(t *testing.T) {
		leaktest.Check(t)
		var idled atomic.Bool
		f := startRelayIdle(t, idle, func() { idled.Store(true) })
		atClient := readAll(f.client)
		start := time.Now()
		f.wait(t)
		if d := time.Since(start); d < idle || d > 4*idle || !idled.Load() {
			t.Errorf("ended after %v (idled %v); want between one and two idle timeouts (%v)", d, idled.Load(), idle)
		}
		if !f.lan.aborted.Load() || !f.wan.aborted.Load() {
			t.Error("an idle flow ended without a reset at both ends")
		}
		f.client.Close()
		f.server.Close()
		<-atClient
	})
	t.Run("active flow lives", func(t *testing.T) {
		leaktest.Check(t)
		f := startRelayIdle(t, idle, nil)
		atServer := readAll(f.server)
		for range 10 { // 500 ms of a byte every 50 ms
			if _, err := f.client.Write([]byte("x")); err != nil {
				t.Fatalf("write: %v", err)
			}
			time.Sleep(idle / 2)
		}
		f.client.CloseWrite()
		f.server.CloseWrite()
		f.wait(t)
		if f.lan.aborted.Load() || f.wan.aborted.Load() {
			t.Error("an active flow was reset")
		}
		if r := <-atServer; len(r.b) != 10 {
			t.Errorf("server read %d bytes, want 10", len(r.b))
		}
		f.client.Close()
	})
	t.Run("flow blocked on its receiver lives", func(t *testing.T) {
		leaktest.Check(t)
		f := startRelayIdle(t, idle, nil)
		wrote := make(chan struct{})
		go func() { // the server reads nothing: the relay's write blocks
			f.client.Write(make([]byte, 1000))
			close(wrote)
		}()
		time.Sleep(5 * idle)
		select {
		case <-f.done:
			t.Fatal("a flow waiting on its receiver was ended as idle")
		default:
		}
		atServer := readAll(f.server)
		<-wrote
		f.client.CloseWrite()
		f.server.CloseWrite()
		f.wait(t)
		if r := <-atServer; len(r.b) != 1000 || f.wan.aborted.Load() {
			t.Errorf("server read %d bytes, reset %v; want 1000 and a clean end", len(r.b), f.wan.aborted.Load())
		}
		f.client.Close()
	})
}

// watchedEnd is an end whose failure the test signals through WatchReset,
// as a netstack connection reports its client's RST.
type watchedEnd struct {
	*end
	fail    chan struct{}
	stopped atomic.Bool
}

func (e *watchedEnd) WatchReset(f func()) (stop func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-e.fail:
			f()
		case <-done:
		}
	}()
	return func() { e.stopped.Store(true); close(done) }
}

// TestRelayWatchesReset: the LAN end fails while both directions wait on
// the WAN end (the upload on a receiver that does not read, the download
// on data that does not come): the flow is reset at once, not when the WAN
// end next moves.
func TestRelayWatchesReset(t *testing.T) {
	leaktest.Check(t)
	client, lanEnd := pair()
	wan, server := pair()
	lan := &watchedEnd{end: lanEnd, fail: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Relay(context.Background(), lan, wan, RelayOptions{})
	}()
	go client.Write([]byte("held")) // the relay's Write to the server blocks: it never reads
	time.Sleep(50 * time.Millisecond)
	close(lan.fail)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		server.Abort() // unblock the relay's Write so the goroutines end
		client.Abort()
		<-done
		t.Fatal("Relay still waiting on the WAN end 5 s after the LAN end failed")
	}
	if !wan.aborted.Load() || !lan.aborted.Load() {
		t.Errorf("ends aborted: lan %v, wan %v; want both", lan.aborted.Load(), wan.aborted.Load())
	}
	if !lan.stopped.Load() {
		t.Error("Relay returned without stopping the watch")
	}
	client.Close()
	server.Close()
}
