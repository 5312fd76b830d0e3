package driver

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind/bindtest"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/wire"
)

func TestHandshakeAndEcho(t *testing.T) {
	leaktest.Check(t)
	cli, srv := memPair(t, 1, nil)
	c, s := openAccepted(t, cli, srv)
	if c.ID()%2 != 0 || s.ID() != c.ID() {
		t.Fatalf("stream IDs: client %d, server %d", c.ID(), s.ID())
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	mustRead(t, s, []byte("hello"))
	if _, err := s.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	mustRead(t, c, []byte("world"))
	st := cli.Stats()
	if st.DatagramsOut == 0 || st.DatagramsIn == 0 || st.Tunnel.StreamsOpened != 1 {
		t.Fatalf("stats: %+v", st)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestTransfer moves 20 MB each way at once on one stream, hash-checked,
// with half-close ending each direction.
func TestTransfer(t *testing.T) {
	leaktest.Check(t)
	size := int64(20 << 20)
	if testing.Short() {
		size = 4 << 20
	}
	cli, srv := memPair(t, 2, nil)
	c, s := openAccepted(t, cli, srv)
	type out struct {
		sent, got [32]byte
		n         int64
		err       error
	}
	run := func(st *Stream, seed uint64, o *out, wg *sync.WaitGroup) {
		defer wg.Done()
		var rerr error
		var rwg sync.WaitGroup
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			o.n, o.got, rerr = recvAll(st, 64<<10)
		}()
		o.sent, o.err = sendPattern(st, seed, size, 48<<10)
		rwg.Wait()
		if o.err == nil {
			o.err = rerr
		}
	}
	var co, so out
	var wg sync.WaitGroup
	wg.Add(2)
	start := time.Now()
	go run(c, 10, &co, &wg)
	go run(s, 20, &so, &wg)
	wg.Wait()
	el := time.Since(start)
	if co.err != nil || so.err != nil {
		t.Fatalf("client: %v; server: %v", co.err, so.err)
	}
	if co.n != size || so.n != size {
		t.Fatalf("received %d and %d bytes, want %d", co.n, so.n, size)
	}
	if co.sent != so.got || so.sent != co.got {
		t.Fatal("SHA-256 mismatch")
	}
	t.Logf("%d MB each way in %v (%.0f Mbit/s each way)", size>>20, el, float64(size)*8/el.Seconds()/1e6)
	t.Logf("client stats: %+v", cli.Stats())
	c.Close()
	s.Close()
}

func TestHalfClose(t *testing.T) {
	leaktest.Check(t)
	cli, srv := memPair(t, 3, nil)
	c, s := openAccepted(t, cli, srv)
	if _, err := c.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, ErrWriteClosed) {
		t.Fatalf("write after CloseWrite: %v, want ErrWriteClosed", err)
	}
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "request" {
		t.Fatalf("server read %q, %v", got, err)
	}
	// The other direction still works after the client's FIN.
	if _, err := s.Write([]byte("response")); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(c)
	if err != nil || string(got) != "response" {
		t.Fatalf("client read %q, %v", got, err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("read after EOF: %d, %v", n, err)
	}
	c.Close()
	s.Close()
	// Both ends forget the stream once both halves are finished.
	waitFor(t, func() bool { return cli.Stats().Tunnel.StreamsOpen == 0 && srv.Stats().Tunnel.StreamsOpen == 0 })
}

func TestOpenRejected(t *testing.T) {
	leaktest.Check(t)
	cli, srv := memPair(t, 4, nil)
	tests := []struct {
		code wire.OpenCode
		want error
	}{
		{wire.OpenRefused, ErrOpenRefused},
		{wire.OpenUnreachable, ErrOpenUnreachable},
		{wire.OpenTimedOut, ErrOpenTimedOut},
		{wire.OpenNotAllowed, ErrOpenNotAllowed},
		{wire.OpenError, ErrOpenFailed},
	}
	for _, tt := range tests {
		t.Run(tt.code.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			go func() {
				in, err := srv.AcceptStream(ctx)
				if err == nil {
					in.Reject(tt.code)
				}
			}()
			s, err := cli.OpenStream(ctx, flowSrc, flowDst)
			var oe *OpenError
			if s != nil || !errors.As(err, &oe) || oe.Code != tt.code || !errors.Is(err, tt.want) {
				t.Fatalf("OpenStream: %v, %v; want *OpenError wrapping %v", s, err, tt.want)
			}
			if oe.Dst != flowDst {
				t.Fatalf("OpenError.Dst %v", oe.Dst)
			}
		})
	}
	waitFor(t, func() bool { return cli.Stats().Tunnel.StreamsOpen == 0 })
}

func TestOpenContextCancelled(t *testing.T) {
	leaktest.Check(t)
	cli, srv := memPair(t, 5, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := cli.OpenStream(ctx, flowSrc, flowDst)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("OpenStream: %v, want context.DeadlineExceeded", err)
	}
	// The far edge answers late: the abandoned stream is reset, and
	// everything is forgotten on both sides.
	in, err := srv.AcceptStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s, err := in.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Accept(); !errors.Is(err, ErrAlreadyAnswered) {
		t.Fatalf("second Accept: %v", err)
	}
	if _, err := io.ReadAll(s); !errors.Is(err, ErrStreamReset) {
		t.Fatalf("read on the abandoned stream: %v, want ErrStreamReset", err)
	}
	s.Close()
	waitFor(t, func() bool { return cli.Stats().Tunnel.StreamsOpen == 0 && srv.Stats().Tunnel.StreamsOpen == 0 })
}

// smallSendBuffer caps the client's send buffer at 256 KiB, so that a
// Write to a peer that does not read blocks soon.
func smallSendBuffer(c, _ *Config) {
	c.Tunnel.Stream.SendBufferBytes = 256 << 10
	c.Tunnel.Stream.MinSendBufferBytes = 256 << 10
}

func TestDeadlines(t *testing.T) {
	leaktest.Check(t)
	cli, srv := memPair(t, 6, smallSendBuffer)
	c, s := openAccepted(t, cli, srv)

	// Read deadline: nothing arrives.
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	start := time.Now()
	if n, err := c.Read(make([]byte, 10)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %d, %v; want os.ErrDeadlineExceeded", n, err)
	}
	if el := time.Since(start); el < 40*time.Millisecond || el > 2*time.Second {
		t.Fatalf("read deadline took %v", el)
	}
	// A deadline in the past fails at once; clearing it makes the stream
	// usable again.
	c.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := c.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read with past deadline: %v", err)
	}
	c.SetReadDeadline(time.Time{})
	s.Write([]byte("ok"))
	mustRead(t, c, []byte("ok"))

	// Extending a deadline during a blocked Read keeps it blocked.
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 2))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.SetReadDeadline(time.Now().Add(time.Hour))
	time.Sleep(400 * time.Millisecond)
	s.Write([]byte("go"))
	if err := <-done; err != nil {
		t.Fatalf("read after extending the deadline: %v", err)
	}

	// Write deadline: the peer does not read; the stream window (1 MiB)
	// and the send buffer (256 KiB) fill, then Write blocks until the
	// deadline.
	c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	n, err := c.Write(make([]byte, 8<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n == 0 || n >= 8<<20 {
		t.Fatalf("write: %d, %v; want a partial write and os.ErrDeadlineExceeded", n, err)
	}
	t.Logf("write stopped by its deadline after %d bytes", n)
	c.Close()
	s.Close()
}

// TestCloseUnblocks: blocked Reads and Writes return when the stream or
// the tunnel closes, and the peer learns why.
func TestCloseUnblocks(t *testing.T) {
	leaktest.Check(t)
	cli, srv := memPair(t, 7, smallSendBuffer)
	c1, s1 := openAccepted(t, cli, srv)
	c2, s2 := openAccepted(t, cli, srv)

	// Stream.Close wakes a Read on the same stream.
	rerr := make(chan error, 1)
	go func() { _, err := c1.Read(make([]byte, 1)); rerr <- err }()
	time.Sleep(20 * time.Millisecond)
	c1.Close()
	if err := <-rerr; !errors.Is(err, ErrStreamClosed) {
		t.Fatalf("read after Close: %v, want ErrStreamClosed", err)
	}
	// The peer sees the FIN.
	if _, err := io.ReadAll(s1); err != nil {
		t.Fatalf("peer read: %v", err)
	}

	// Tunnel.Close wakes a blocked Read and a blocked Write.
	werr := make(chan error, 1)
	go func() { _, err := c2.Write(make([]byte, 16<<20)); werr <- err }()
	go func() { _, err := c2.Read(make([]byte, 1)); rerr <- err }()
	time.Sleep(100 * time.Millisecond)
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []chan error{werr, rerr} {
		select {
		case err := <-ch:
			if !errors.Is(err, ErrTunnelClosed) || !errors.Is(err, tunnel.ErrLocalClose) {
				t.Fatalf("after Close: %v, want ErrTunnelClosed wrapping tunnel.ErrLocalClose", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not unblock the stream")
		}
	}
	// The server learns it from the CLOSE frame.
	select {
	case <-srv.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server did not see the close")
	}
	if err := srv.Err(); !errors.Is(err, tunnel.ErrPeerClosed) {
		t.Fatalf("server: %v, want tunnel.ErrPeerClosed", err)
	}
	if _, err := io.ReadAll(s2); !errors.Is(err, ErrTunnelClosed) {
		t.Fatalf("server read: %v", err)
	}
	if _, err := cli.OpenStream(context.Background(), flowSrc, flowDst); !errors.Is(err, ErrTunnelClosed) {
		t.Fatalf("open after close: %v", err)
	}
	if _, err := srv.AcceptStream(context.Background()); !errors.Is(err, ErrTunnelClosed) {
		t.Fatalf("accept after close: %v", err)
	}
	if st := cli.Stats(); st.DatagramsOut == 0 {
		t.Fatalf("final stats: %+v", st)
	}
	if err := cli.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	c2.Close()
	s2.Close()
}

func TestDialTimeout(t *testing.T) {
	leaktest.Check(t)
	ccfg, _ := pairConfigs(t, 8)
	a, b := bindtestPair()
	defer b.Close()
	ccfg.Bind, ccfg.RemoteAddr = a, b.LocalAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, ccfg); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial with nobody listening: %v", err)
	}
	// Listen gives up with its context too.
	_, scfg := pairConfigs(t, 8)
	a2, b2 := bindtestPair()
	defer a2.Close()
	scfg.Bind = b2
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, err := Listen(ctx2, scfg); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Listen with no client: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	ccfg, _ := pairConfigs(t, 9)
	ccfg.RemoteAddr = flowDst
	for name, mod := range map[string]func(*Config){
		"no key":    func(c *Config) { c.Tunnel.PrivateKey = crypt.PrivateKey{} },
		"no peer":   func(c *Config) { c.Tunnel.PeerPublicKey = crypt.PublicKey{} },
		"no remote": func(c *Config) { c.RemoteAddr = netip.AddrPort{} },
	} {
		cfg := ccfg
		mod(&cfg)
		if _, err := Dial(context.Background(), cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

func bindtestPair() (a, b *bindtest.Conn) { return bindtest.NewPair(bindtest.Config{}) }

// waitFor polls cond for up to 5 s.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
