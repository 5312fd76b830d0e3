// Tests of streams beyond the basics of driver_test.go: how they end
// (Close with unread data, Reset), the limits on opening them (accept
// backlog, MaxStreams), and many at once over a lossy path.

package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// TestCloseWithUnreadDataResets: closing a stream with unread data resets
// it (as TCP sends RST): the peer's Read fails with a *StreamError, and
// its Write fails once our STOP_SENDING arrives.
func TestCloseWithUnreadDataResets(t *testing.T) {
	leaktest.Check(t)
	cli, srv := memPair(t, 21, nil)
	c, s := openAccepted(t, cli, srv)
	if _, err := c.Write([]byte("unread")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return srv.Stats().Tunnel.StreamBytesReceived >= 6 })
	s.Close()
	var se *StreamError
	buf := make([]byte, 10)
	if _, err := c.Read(buf); !errors.As(err, &se) || se.StopSending || !errors.Is(err, ErrStreamReset) {
		t.Fatalf("read after the peer closed with unread data: %v, want a reset *StreamError", err)
	}
	waitFor(t, func() bool {
		_, err := c.Write([]byte("more"))
		return errors.As(err, &se) && se.StopSending
	})
	c.Close()
	waitFor(t, func() bool { return cli.Stats().Tunnel.StreamsOpen == 0 && srv.Stats().Tunnel.StreamsOpen == 0 })
}

// TestStreamReset: Reset reaches the peer at once, in both directions: a
// Read blocked there fails with a *StreamError holding the code (even with
// data waiting unread), and its Write fails once STOP_SENDING arrives.
func TestStreamReset(t *testing.T) {
	leaktest.Check(t)
	cli, srv := memPair(t, 22, nil)

	// Reset by the accepting side while the opener is blocked in Read.
	c, s := openAccepted(t, cli, srv)
	rerr := readOnce(c)
	time.Sleep(50 * time.Millisecond) // let Read block
	start := time.Now()
	if err := s.Reset(CodeTCPReset); err != nil {
		t.Fatal(err)
	}
	var se *StreamError
	select {
	case err := <-rerr:
		if !errors.As(err, &se) || se.StopSending || se.Code != CodeTCPReset || !errors.Is(err, ErrStreamReset) {
			t.Fatalf("blocked read after the peer's Reset: %v; want a reset *StreamError with code %d", err, CodeTCPReset)
		}
		t.Logf("reset seen after %v", time.Since(start))
	case <-time.After(2 * time.Second):
		t.Fatal("a blocked Read did not end 2 s after the peer's Reset")
	}
	waitFor(t, func() bool {
		_, err := c.Write([]byte("more"))
		return errors.As(err, &se) && se.StopSending && se.Code == CodeTCPReset
	})
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, ErrStreamClosed) {
		t.Errorf("read after our own Reset: %v; want ErrStreamClosed", err)
	}
	if err := s.Reset(CodeTCPReset); err != nil {
		t.Errorf("second Reset: %v", err)
	}
	c.Close()

	// Reset by the opener with data waiting unread at the peer: the
	// peer's Read gets the reset, not the data.
	c, s = openAccepted(t, cli, srv)
	if _, err := s.Write([]byte("pending")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("unread")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return srv.Stats().Tunnel.StreamBytesReceived >= 6 })
	c.Reset(7)
	waitFor(t, func() bool {
		_, err := s.Read(make([]byte, 10))
		return errors.As(err, &se) && !se.StopSending && se.Code == 7
	})
	s.Close()
	waitFor(t, func() bool { return cli.Stats().Tunnel.StreamsOpen == 0 && srv.Stats().Tunnel.StreamsOpen == 0 })
}

// TestAcceptBacklog: streams beyond AcceptBacklog are refused.
func TestAcceptBacklog(t *testing.T) {
	leaktest.Check(t)
	cli, srv := memPair(t, 22, func(c, s *Config) { s.AcceptBacklog = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	first := make(chan error, 1)
	go func() { _, err := cli.OpenStream(ctx, flowSrc, flowDst); first <- err }()
	waitFor(t, func() bool { return srv.Stats().Tunnel.StreamsAccepted == 1 })
	_, err := cli.OpenStream(context.Background(), flowSrc, flowDst)
	if !errors.Is(err, ErrOpenResourceLimit) {
		t.Fatalf("second open: %v, want ErrOpenResourceLimit", err)
	}
	if st := srv.Stats(); st.AcceptOverflow != 1 {
		t.Fatalf("AcceptOverflow %d", st.AcceptOverflow)
	}
	if err := <-first; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first open: %v", err)
	}
	in, err := srv.AcceptStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Reject(wire.OpenOK); !errors.Is(err, ErrConfig) {
		t.Fatalf("Reject(OpenOK): %v", err)
	}
	in.Reject(wire.OpenRefused)
}

// TestStreamLimit: OpenStream beyond Tunnel.MaxStreams fails at once.
func TestStreamLimit(t *testing.T) {
	leaktest.Check(t)
	cli, srv := memPair(t, 25, func(c, s *Config) { c.Tunnel.MaxStreams = 1 })
	c, s := openAccepted(t, cli, srv)
	if _, err := cli.OpenStream(context.Background(), flowSrc, flowDst); !errors.Is(err, tunnel.ErrStreamLimit) {
		t.Fatalf("open beyond the limit: %v, want tunnel.ErrStreamLimit", err)
	}
	c.Close()
	s.Close()
}

// TestLossyManyStreams moves 8 streams of 2 MB each way at once over an
// in-memory path that drops 1 % of datagrams (seeded), hash-checked.
func TestLossyManyStreams(t *testing.T) {
	leaktest.Check(t)
	const seed = 26
	cli, srv := lossyMemPair(t, seed)
	t.Logf("drop seed %d", seed)

	const streams, size = 8, 2 << 20
	var wg sync.WaitGroup
	errs := make(chan error, 4*streams)
	for i := range streams {
		c, s := openAccepted(t, cli, srv)
		for j, pair := range [][2]*Stream{{c, s}, {s, c}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var got [32]byte
				var n int64
				var rerr error
				done := make(chan struct{})
				go func() {
					defer close(done)
					n, got, rerr = recvAll(pair[1], 16<<10)
				}()
				sent, err := sendPattern(pair[0], uint64(100*i+j), size, 20<<10)
				<-done
				switch {
				case err != nil:
					errs <- fmt.Errorf("stream %d dir %d: send: %w", i, j, err)
				case rerr != nil:
					errs <- fmt.Errorf("stream %d dir %d: receive: %w", i, j, rerr)
				case n != size || got != sent:
					errs <- fmt.Errorf("stream %d dir %d: %d bytes, hash match %v", i, j, n, got == sent)
				}
			}()
		}
		defer c.Close()
		defer s.Close()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := cli.Stats()
	t.Logf("client: lost %d packets, retransmitted %d B, PTOs %d", st.Tunnel.PacketsLost, st.Tunnel.StreamBytesRetransmitted, st.Tunnel.PTOs)
	if st.Tunnel.PacketsLost == 0 {
		t.Error("no loss detected on a lossy path")
	}
}

// TestStreamWatchReset: WatchReset reports the peer's Reset with no Read
// waiting, and nothing for a graceful close (whose STOP_SENDING is not a
// reset).
func TestStreamWatchReset(t *testing.T) {
	leaktest.Check(t)
	cli, srv := memPair(t, 23, nil)
	watch := func(c *Stream) (<-chan struct{}, func()) {
		fired := make(chan struct{})
		return fired, c.WatchReset(func() { close(fired) })
	}
	mustFire := func(fired <-chan struct{}, stop func(), what string) {
		t.Helper()
		select {
		case <-fired:
		case <-time.After(2 * time.Second):
			t.Fatalf("%s did not fire the watch within 2 s", what)
		}
		stop()
	}

	c, s := openAccepted(t, cli, srv)
	fired, stop := watch(c)
	if err := s.Reset(CodeTCPReset); err != nil {
		t.Fatal(err)
	}
	mustFire(fired, stop, "the peer's Reset")
	c.Close()

	// A watch begun after the reset fires too.
	c, s = openAccepted(t, cli, srv)
	s.Reset(CodeTCPReset)
	waitFor(t, func() bool {
		_, err := c.Read(make([]byte, 1))
		return err != nil
	})
	fired, stop = watch(c)
	mustFire(fired, stop, "a watch begun after the peer's Reset")
	c.Close()

	// Both sides pass a FIN, read the other's and close.
	c, s = openAccepted(t, cli, srv)
	fired, stop = watch(c)
	c.CloseWrite()
	s.CloseWrite()
	if _, err := io.ReadAll(s); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := io.ReadAll(c); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return srv.Stats().Tunnel.StreamsOpen == 0 })
	time.Sleep(50 * time.Millisecond)
	select {
	case <-fired:
		t.Fatal("a graceful close fired the watch")
	default:
	}
	stop()
	c.Close()
	waitFor(t, func() bool { return cli.Stats().Tunnel.StreamsOpen == 0 })
}
