package edge

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/tcptest"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind"
	"github.com/wanopt/wanopt/tunnel/bind/bindtest"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

func TestMemoryBudget(t *testing.T) {
	floor := int64(flowFloorBytes)
	for _, tc := range []struct {
		mib  int
		want bufferPlan
	}{
		// The default: 1 MiB each way for streaming flows, room for
		// 1,000 flows and more.
		{384, bufferPlan{TunnelBytes: 96 << 20, GrantBytes: 96 << 20, FlowFloorBytes: floor, FlowLimit: int((192 << 20) / floor),
			RecvFloor: 16 << 10, RecvGrown: 1 << 20, SendFloor: 16 << 10, SendGrown: 1 << 20}},
		{16, bufferPlan{TunnelBytes: 4 << 20, GrantBytes: 4 << 20, FlowFloorBytes: floor, FlowLimit: int((8 << 20) / floor),
			RecvFloor: 16 << 10, RecvGrown: 256 << 10, SendFloor: 16 << 10, SendGrown: 256 << 10}},
		// --max-flows caps the flows the budget would hold.
		{4096, bufferPlan{TunnelBytes: 1 << 30, GrantBytes: 1 << 30, FlowFloorBytes: floor, FlowLimit: 4096,
			RecvFloor: 16 << 10, RecvGrown: 1 << 20, SendFloor: 16 << 10, SendGrown: 1 << 20}},
	} {
		c := Config{MemoryMiB: tc.mib}
		if tc.mib == DefaultMemoryMiB && c.FlowLimit() < 1000 {
			t.Errorf("the default budget admits %d flows; want 1,000 at least", c.FlowLimit())
		}
		// A flow without a grant copies 4 KiB at a time: the default
		// budget grants enough downloads for many flows to stream at once.
		if p := c.buffers(); tc.mib == DefaultMemoryMiB {
			grant := int64(64<<10 + p.SendGrown - p.SendFloor) // flow.bigBuf and the send buffer's growth
			if n := p.GrantBytes / grant; n < 64 {
				t.Errorf("the default budget grants %d streaming downloads at once; want 64 at least", n)
			}
		}
		if got := c.buffers(); got != tc.want {
			t.Errorf("MemoryMiB %d: %+v, want %+v", tc.mib, got, tc.want)
		}
		// Floors and grants fill at most the budget beside the tunnel's
		// quarter.
		p := c.buffers()
		if flows := int64(p.FlowLimit)*p.FlowFloorBytes + p.GrantBytes + int64(p.TunnelBytes); flows > int64(tc.mib)<<20 {
			t.Errorf("MemoryMiB %d: the shares add up to %d bytes", tc.mib, flows)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ka, _ := crypt.GenerateKey(rand.Reader)
	kb, _ := crypt.GenerateKey(rand.Reader)
	pol, _ := egress.ParsePolicy([]string{"198.18.2.0/24"})
	far := Config{PrivateKey: kb, PeerKey: ka.PublicKey(), Listen: netip.MustParseAddrPort("198.18.0.2:4500"), Policy: pol}
	if err := far.Validate(); err != nil {
		t.Fatalf("a far edge's config: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(c *Config)
		want   string // in the error
	}{
		{"no end", func(c *Config) { c.Listen = netip.AddrPort{} }, "--listen ADDR:PORT"},
		{"both ends", func(c *Config) { c.Peer = c.Listen }, "exclusive"},
		{"no key", func(c *Config) { c.PrivateKey = crypt.PrivateKey{} }, "--key"},
		{"own key as peer", func(c *Config) { c.PeerKey = kb.PublicKey() }, "own public key"},
		{"nothing to do", func(c *Config) { c.Policy = egress.Policy{} }, "would do nothing"},
		{"transparent without TUN", func(c *Config) { c.Transparent = true }, "needs --tun NAME"},
		{"memory", func(c *Config) { c.MemoryMiB = 8 }, "--memory-mib 8"},
		{"MTU", func(c *Config) { c.TUN, c.MTU = "wo0", 100 }, "--mtu"},
		{"tunnel MTU small", func(c *Config) { c.TunnelMTU = 1279 }, "--tunnel-mtu"},
		{"tunnel MTU large", func(c *Config) { c.TunnelMTU = MaxTunnelMTU + 1 }, "--tunnel-mtu"},
		{"routes without setup", func(c *Config) { c.TUN, c.TUNRoutes = "wo0", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} }, "need --tun-setup"},
		{"peer timeout", func(c *Config) { c.PeerTimeout = time.Second }, "--peer-timeout"},
		{"hub with a peer key", func(c *Config) { c.Branches = []Branch{{Name: "a", Key: ka.PublicKey()}} }, "exclusive"},
		{"hub dialling", func(c *Config) {
			c.PeerKey, c.Listen, c.Peer, c.Branches = crypt.PublicKey{}, netip.AddrPort{}, c.Listen, []Branch{{Name: "a", Key: ka.PublicKey()}}
		}, "needs --listen"},
		{"branch name", func(c *Config) {
			c.PeerKey, c.Branches = crypt.PublicKey{}, []Branch{{Name: "a b", Key: ka.PublicKey()}}
		}, "a name is"},
		{"branch twice", func(c *Config) {
			c.PeerKey, c.Branches = crypt.PublicKey{}, []Branch{{Name: "a", Key: ka.PublicKey()}, {Name: "a", Key: kb.PublicKey()}}
		}, "given twice"},
		{"branch keys", func(c *Config) {
			c.PeerKey, c.Branches = crypt.PublicKey{}, []Branch{{Name: "a", Key: ka.PublicKey()}, {Name: "b", Key: ka.PublicKey()}}
		}, "same key"},
		{"branch own key", func(c *Config) { c.PeerKey, c.Branches = crypt.PublicKey{}, []Branch{{Name: "a", Key: kb.PublicKey()}} }, "own public key"},
		{"upstream beside a peer key", func(c *Config) {
			c.Listen, c.Upstreams = netip.AddrPort{}, []Upstream{{Name: "dc", Key: ka.PublicKey(), Addr: netip.MustParseAddrPort("198.18.0.2:4500"), Routes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}
		}, "exclusive"},
		{"upstream without routes", func(c *Config) {
			c.Listen, c.PeerKey, c.Upstreams = netip.AddrPort{}, crypt.PublicKey{}, []Upstream{{Name: "dc", Key: ka.PublicKey(), Addr: netip.MustParseAddrPort("198.18.0.2:4500")}}
		}, "carries nothing"},
		{"upstream routes overlap", func(c *Config) {
			r := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
			k, _ := crypt.GenerateKey(rand.Reader)
			c.Listen, c.PeerKey, c.Upstreams = netip.AddrPort{}, crypt.PublicKey{}, []Upstream{
				{Name: "dc1", Key: ka.PublicKey(), Addr: netip.MustParseAddrPort("198.18.0.2:4500"), Routes: r},
				{Name: "dc2", Key: k.PublicKey(), Addr: netip.MustParseAddrPort("198.18.0.3:4500"), Routes: r}}
		}, "given to both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := far
			tc.change(&c)
			err := c.Validate()
			if !errors.Is(err, ErrConfig) || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Errorf("%v; want ErrConfig mentioning %q", err, tc.want)
			}
			if _, err := New(c); err == nil {
				t.Error("New accepted it")
			}
		})
	}
}

// pair runs a near and a far edge in this process over an in-memory bind
// (no TUN, no root): the far edge's egress connects what its policy allows
// with kernel sockets on loopback.
type pair struct {
	near, far *Edge
	stop      func()
}

func startPair(t *testing.T, allow string) *pair { return startPairWith(t, allow, nil) }

// startPairWith is startPair with mod applied to the far edge's config.
func startPairWith(t *testing.T, allow string, mod func(*Config)) *pair {
	t.Helper()
	ka, _ := crypt.GenerateKey(rand.Reader)
	kb, _ := crypt.GenerateKey(rand.Reader)
	pol, err := egress.ParsePolicy([]string{allow})
	if err != nil {
		t.Fatal(err)
	}
	a, b := bindtest.NewPair(bindtest.Config{})
	once := func(c bind.Conn) func() (bind.Conn, error) {
		var used atomic.Bool
		return func() (bind.Conn, error) {
			if used.Swap(true) {
				return nil, errors.New("the in-memory bind is used up")
			}
			return c, nil
		}
	}
	fcfg := Config{PrivateKey: kb, PeerKey: ka.PublicKey(), Listen: b.LocalAddr(), Policy: pol, Bind: once(b)}
	if mod != nil {
		mod(&fcfg)
	}
	far, err := New(fcfg)
	if err != nil {
		t.Fatal(err)
	}
	// The near edge has no TUN here; flows come in through Dial. Its policy
	// only makes it a valid edge (it connects nothing in this test).
	near, err := New(Config{PrivateKey: ka, PeerKey: kb.PublicKey(), Peer: b.LocalAddr(), Policy: pol, Bind: once(a), CC: tunnel.CCCubic})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- far.Run(ctx) }()
	go func() { done <- near.Run(ctx) }()
	p := &pair{near: near, far: far, stop: func() {
		cancel()
		for range 2 {
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("an edge did not stop within 10 s of its context ending")
			}
		}
	}}
	t.Cleanup(p.stop)
	for _, e := range []*Edge{near, far} {
		deadline := time.Now().Add(10 * time.Second)
		for e.Status().Tunnel == nil {
			if time.Now().After(deadline) {
				t.Fatalf("%s: tunnel not up within 10 s", e.cfg.Role())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return p
}

// hashServer answers a connection with resp after reading the request to
// its end, and reports the request's hash (one connection: a second
// handler would wait for sums to be read).
func hashServer(t *testing.T, resp []byte) (netip.AddrPort, <-chan [32]byte) {
	t.Helper()
	sums := make(chan [32]byte, 1)
	addr := tcptest.Server(t, func(c *net.TCPConn) {
		h := sha256.New()
		io.Copy(h, c)
		var sum [32]byte
		h.Sum(sum[:0])
		sums <- sum
		c.Write(resp)
	})
	return addr, sums
}

// TestEdgePair moves 8 MiB each way through two edges in this process,
// hash-checked, with a half-close in between (the request's end, then the
// answer), and checks what Status and Flows report.
func TestEdgePair(t *testing.T) {
	leaktest.Check(t)
	p := startPair(t, "127.0.0.1/32")
	req, resp := make([]byte, 8<<20), make([]byte, 8<<20)
	rand.Read(req)
	rand.Read(resp)
	dst, sums := hashServer(t, resp)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := p.near.Dial(ctx, netip.MustParseAddrPort("198.18.1.2:40000"), dst)
	if err != nil {
		t.Fatalf("Dial %v through the tunnel: %v", dst, err)
	}
	defer c.Close()
	if fl := p.far.Flows(); len(fl) != 1 || fl[0].Side != "egress" || fl[0].Dst != dst.String() {
		t.Errorf("far edge's flows %+v; want the one egress flow to %v", fl, dst)
	}
	if _, err := c.Write(req); err != nil {
		t.Fatalf("write the request: %v", err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatalf("close-write: %v", err)
	}
	if got, want := <-sums, sha256.Sum256(req); got != want {
		t.Fatal("the server got a request with another hash")
	}
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, resp) {
		t.Fatalf("answer: %d bytes, err %v; want the server's %d bytes and EOF", len(got), err, len(resp))
	}
	st := p.far.Status()
	if st.Egress.Connected != 1 || st.Egress.BytesUp != uint64(len(req)) || st.Tunnel == nil || st.Tunnel.Congestion != "bbr" {
		t.Errorf("far edge's status %+v; want 1 flow connected, %d bytes up, a BBR tunnel", st, len(req))
	}
	if ns := p.near.Status(); ns.Bridge.Opened != 1 || ns.Tunnel == nil || ns.Tunnel.Congestion != "cubic" || ns.Role != "initiator" {
		t.Errorf("near edge's status %+v; want 1 flow opened over a CUBIC tunnel", ns)
	}
}

// TestEdgePairOutcomes: what the far edge answers reaches Dial as the flow
// errors that decide what a client sees.
func TestEdgePairOutcomes(t *testing.T) {
	leaktest.Check(t)
	p := startPair(t, "127.0.0.1/32:1-1000")
	closed := tcptest.ClosedPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	src := netip.MustParseAddrPort("198.18.1.2:40000")
	for _, tc := range []struct {
		name string
		dst  netip.AddrPort
		want error
	}{
		{"outside the policy", netip.MustParseAddrPort("127.0.0.2:80"), flow.ErrNotAllowed},
		{"closed port", netip.AddrPortFrom(closed.Addr(), 9), flow.ErrRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := p.near.Dial(ctx, src, tc.dst); !errors.Is(err, tc.want) {
				if c != nil {
					c.Close()
				}
				t.Errorf("Dial %v: %v; want %v", tc.dst, err, tc.want)
			}
		})
	}
}

// TestEdgePairIdleFlow: a flow nobody uses is reset by the far edge after
// its flow idle timeout (the near end's read fails, not with EOF), and
// counted.
func TestEdgePairIdleFlow(t *testing.T) {
	leaktest.Check(t)
	p := startPairWith(t, "127.0.0.1/32", func(c *Config) { c.FlowIdleTimeout = 200 * time.Millisecond })
	dst := tcptest.Server(t, func(c *net.TCPConn) { io.Copy(io.Discard, c) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := p.near.Dial(ctx, netip.MustParseAddrPort("198.18.1.2:40000"), dst)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Read(make([]byte, 1))
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("read on an idle flow: %v; want a reset", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("reset after %v; want within two idle timeouts", d)
	}
	if n := p.far.Status().Egress.IdleTimeouts; n != 1 {
		t.Errorf("far edge counts %d idle timeouts; want 1", n)
	}
}
