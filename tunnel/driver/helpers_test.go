package driver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind"
	"github.com/wanopt/wanopt/tunnel/bind/bindtest"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// seeded returns a deterministic randomness source.
func seeded(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return rand.NewChaCha8(s)
}

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
func pairConfigs(t testing.TB, seed uint64) (client, server Config) {
	t.Helper()
	r := seeded(seed)
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
		Tunnel: tunnel.Config{PrivateKey: ck, PeerPublicKey: sk.PublicKey(), Rand: seeded(seed ^ 0xc11e)},
		Logger: log,
	}
	server = Config{
		Tunnel: tunnel.Config{PrivateKey: sk, PeerPublicKey: ck.PublicKey(), Rand: seeded(seed ^ 0x5e7e)},
		Logger: log,
	}
	return client, server
}

// connect runs Listen and Dial concurrently and returns both tunnels,
// closed at the end of the test.
func connect(t testing.TB, ccfg, scfg Config) (cli, srv *Tunnel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		t   *Tunnel
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := Listen(ctx, scfg)
		ch <- res{s, err}
	}()
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
// datagrams, chosen by a generator seeded with seed.
func lossyMemPair(t testing.TB, seed uint64) (cli, srv *Tunnel) {
	t.Helper()
	var mu sync.Mutex
	r := seeded(seed)
	a, b := bindtest.NewPair(bindtest.Config{Drop: func(_, _ netip.AddrPort, _ []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		return r.Uint64()%100 == 0
	}})
	ccfg, scfg := pairConfigs(t, seed)
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

// sendPattern writes n deterministic bytes (seeded) in chunks of chunk
// bytes, then CloseWrite; it returns the SHA-256 of what it wrote.
func sendPattern(w interface {
	io.Writer
	CloseWrite() error
}, seed uint64, n int64, chunk int) ([32]byte, error) {
	h := sha256.New()
	r := seeded(seed)
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
