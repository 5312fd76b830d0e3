package driver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/seed"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind"
	"github.com/wanopt/wanopt/tunnel/bind/bindtest"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// testWriter sends log lines to t.Log while the test runs.
type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// pairConfigs returns matching client and server Configs (no socket).
func pairConfigs(t testing.TB, sd uint64) (client, server Config) {
	t.Helper()
	r := seed.ChaCha8(sd)
	ck, err := crypt.GenerateKey(r)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := crypt.GenerateKey(r)
	if err != nil {
		t.Fatal(err)
	}
	log := testLogger(t)
	client = Config{
		Tunnel: tunnel.Config{PrivateKey: ck, PeerPublicKey: sk.PublicKey(), Rand: seed.ChaCha8(sd ^ 0xc11e)},
		Logger: log,
	}
	server = Config{
		Tunnel: tunnel.Config{PrivateKey: sk, PeerPublicKey: ck.PublicKey(), Rand: seed.ChaCha8(sd ^ 0x5e7e)},
		Logger: log,
	}
	return client, server
}

// listened is what Listen returned.
type listened struct {
	t   *Tunnel
	err error
}

// listenAsync runs Listen in the background and hands back its result.
func listenAsync(ctx context.Context, cfg Config) <-chan listened {
	ch := make(chan listened, 1)
	go func() {
		s, err := Listen(ctx, cfg)
		ch <- listened{s, err}
	}()
	return ch
}

// connect runs Listen and Dial concurrently and returns both tunnels,
// closed at the end of the test.
func connect(t testing.TB, ccfg, scfg Config) (cli, srv *Tunnel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := listenAsync(ctx, scfg)
	cli, err := Dial(ctx, ccfg)
	r := <-ch
	if err != nil || r.err != nil {
		if cli != nil {
			cli.Close()
		}
		if r.t != nil {
			r.t.Close()
		}
		t.Fatalf("dial: %v; listen: %v", err, r.err)
	}
	t.Cleanup(func() {
		cli.Close()
		r.t.Close()
	})
	return cli, r.t
}

// memPair connects two tunnels over a bindtest pair.
func memPair(t testing.TB, seed uint64, mod func(c, s *Config)) (cli, srv *Tunnel) {
	t.Helper()
	a, b := bindtest.NewPair(bindtest.Config{})
	ccfg, scfg := pairConfigs(t, seed)
	ccfg.Bind, ccfg.RemoteAddr = a, b.LocalAddr()
	scfg.Bind = b
	if mod != nil {
		mod(&ccfg, &scfg)
	}
	return connect(t, ccfg, scfg)
}

// lossyMemPair is memPair over an in-memory path that drops 1 % of the
// datagrams, chosen by a generator seeded with sd.
func lossyMemPair(t testing.TB, sd uint64) (cli, srv *Tunnel) {
	t.Helper()
	var mu sync.Mutex
	r := seed.ChaCha8(sd)
	a, b := bindtest.NewPair(bindtest.Config{Drop: func(_, _ netip.AddrPort, _ []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		return r.Uint64()%100 == 0
	}})
	ccfg, scfg := pairConfigs(t, sd)
	ccfg.Bind, ccfg.RemoteAddr, scfg.Bind = a, b.LocalAddr(), b
	return connect(t, ccfg, scfg)
}

// udpPair connects two tunnels over real UDP sockets on 127.0.0.1.
func udpPair(t testing.TB, seed uint64, mod func(c, s *Config)) (cli, srv *Tunnel) {
	t.Helper()
	sb := listenUDP(t, netip.MustParseAddrPort("127.0.0.1:0"))
	ccfg, scfg := pairConfigs(t, seed)
	scfg.Bind = sb
	ccfg.RemoteAddr = sb.LocalAddr()
	ccfg.Network = "udp4"
	ccfg.LocalAddr = netip.MustParseAddrPort("127.0.0.1:0")
	if mod != nil {
		mod(&ccfg, &scfg)
	}
	return connect(t, ccfg, scfg)
}

var (
	flowSrc = netip.MustParseAddrPort("198.18.0.1:40000")
	flowDst = netip.MustParseAddrPort("198.18.1.1:80")
)

// listenUDP opens a UDP socket on ap (IPv4; port 0: any free one).
func listenUDP(t testing.TB, ap netip.AddrPort) bind.Conn {
	t.Helper()
	b, err := bind.Listen("udp4", ap, bind.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openAccepted opens a stream from cli and accepts it on srv.
func openAccepted(t testing.TB, cli, srv *Tunnel) (c, s *Stream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := make(chan error, 1)
	go func() {
		in, err := srv.AcceptStream(ctx)
		if err == nil {
			if in.Src() != flowSrc || in.Dst() != flowDst {
				err = fmt.Errorf("incoming stream %v -> %v, want %v -> %v", in.Src(), in.Dst(), flowSrc, flowDst)
				in.Reject(1)
			} else {
				s, err = in.Accept()
			}
		}
		ch <- err
	}()
	c, err := cli.OpenStream(ctx, flowSrc, flowDst)
	if aerr := <-ch; aerr != nil || err != nil {
		t.Fatalf("open: %v; accept: %v", err, aerr)
	}
	return c, s
}

// servedWithin opens a stream from cli to srv, moves a message over it and
// fails the test unless that was done within limit of start; what names
// the recovery in the messages. It returns both ends of the stream.
func servedWithin(t testing.TB, cli, srv *Tunnel, start time.Time, limit time.Duration, what string) (c, s *Stream) {
	t.Helper()
	c, s = openAccepted(t, cli, srv)
	msg := []byte("after the restart")
	c.Write(msg)
	mustRead(t, s, msg)
	if d := time.Since(start); d > limit {
		t.Errorf("%s after %v; want within %v", what, d, limit)
	} else {
		t.Logf("%s after %v", what, d)
	}
	return c, s
}

// readOnce reads r once in the background and hands back the error, for
// tests that wait for a blocked Read to end.
func readOnce(r io.Reader) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 10))
		ch <- err
	}()
	return ch
}

// wantPeerRestarted waits up to 5 s for rerr and fails the test unless it
// is a reset with CodePeerRestarted; what names the stream read.
func wantPeerRestarted(t testing.TB, rerr <-chan error, what string) {
	t.Helper()
	var se *StreamError
	select {
	case err := <-rerr:
		if !errors.As(err, &se) || se.Code != CodePeerRestarted {
			t.Fatalf("read on %s: %v; want a reset with CodePeerRestarted", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s not reset within 5 s", what)
	}
}

// sendPattern writes n deterministic bytes (seeded) in chunks of chunk
// bytes, then CloseWrite; it returns the SHA-256 of what it wrote.
func sendPattern(w interface {
	io.Writer
	CloseWrite() error
}, sd uint64, n int64, chunk int) ([32]byte, error) {
	h := sha256.New()
	r := seed.ChaCha8(sd)
	buf := make([]byte, chunk)
	for left := n; left > 0; {
		b := buf[:min(int64(chunk), left)]
		r.Read(b)
		h.Write(b)
		k, err := w.Write(b)
		left -= int64(k)
		if err != nil {
			return [32]byte{}, fmt.Errorf("write after %d bytes: %w", n-left, err)
		}
	}
	if err := w.CloseWrite(); err != nil {
		return [32]byte{}, err
	}
	return [32]byte(h.Sum(nil)), nil
}

// recvAll reads to io.EOF and returns the count and SHA-256.
func recvAll(r io.Reader, chunk int) (int64, [32]byte, error) {
	h := sha256.New()
	n, err := io.CopyBuffer(h, struct{ io.Reader }{r}, make([]byte, chunk))
	return n, [32]byte(h.Sum(nil)), err
}

// mustRead reads exactly len(want) bytes and compares.
func mustRead(t testing.TB, r io.Reader, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %q, want %q", got, want)
	}
}
