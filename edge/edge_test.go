package edge

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/tcptest"
	"github.com/wanopt/wanopt/stack"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind"
	"github.com/wanopt/wanopt/tunnel/bind/bindtest"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

func TestMemoryBudget(t *testing.T) {
	floor := int64(flowFloorBytes)
	lan := func(grown int) stack.BufferRange {
		return stack.BufferRange{Min: 4 << 10, Default: 16 << 10, Max: grown}
	}
	for _, tc := range []struct {
		mib  int
		want MemoryPlan
	}{
		// The default: 1 MiB each way for streaming flows, room for
		// 1,000 flows and more.
		{384, MemoryPlan{TunnelBytes: 96 << 20, GrantBytes: 96 << 20, FlowFloorBytes: floor, FlowLimit: int((192 << 20) / floor),
			Receive: lan(1 << 20), Send: lan(1 << 20), RuntimeLimitBytes: (384 + 20) << 20}},
		{16, MemoryPlan{TunnelBytes: 4 << 20, GrantBytes: 4 << 20, FlowFloorBytes: floor, FlowLimit: int((8 << 20) / floor),
			Receive: lan(256 << 10), Send: lan(256 << 10), RuntimeLimitBytes: (16 + 20) << 20}},
		// MaxFlows caps the flows the budget would hold.
		{4096, MemoryPlan{TunnelBytes: 1 << 30, GrantBytes: 1 << 30, FlowFloorBytes: floor, FlowLimit: 4096,
			Receive: lan(1 << 20), Send: lan(1 << 20), RuntimeLimitBytes: (4096 + 20) << 20}},
	} {
		p := PlanMemory(tc.mib, egress.DefaultMaxFlows)
		if tc.mib == DefaultMemoryMiB && p.FlowLimit < 1000 {
			t.Errorf("the default budget admits %d flows; want 1,000 at least", p.FlowLimit)
		}
		// A flow without a grant copies 4 KiB at a time: the default
		// budget grants enough downloads for many flows to stream at once.
		if tc.mib == DefaultMemoryMiB {
			grant := int64(64<<10 + p.Send.Max - p.Send.Default) // flow.bigBuf and the send buffer's growth
			if n := p.GrantBytes / grant; n < 64 {
				t.Errorf("the default budget grants %d streaming downloads at once; want 64 at least", n)
			}
		}
		if p != tc.want {
			t.Errorf("MemoryMiB %d: %+v, want %+v", tc.mib, p, tc.want)
		}
		// Floors and grants fill at most the budget beside the tunnel's
		// quarter.
		if flows := int64(p.FlowLimit)*p.FlowFloorBytes + p.GrantBytes + int64(p.TunnelBytes); flows > int64(tc.mib)<<20 {
			t.Errorf("MemoryMiB %d: the shares add up to %d bytes", tc.mib, flows)
		}
	}
	// The edge hands down the plan it made once.
	if e, err := NewFar(FarConfig{Shared: Shared{PrivateKey: mustKey(t), MemoryMiB: 16, Policy: branchPolicy}, PeerKey: mustKey(t).PublicKey(),
		Listen: netip.MustParseAddrPort("198.18.0.2:4500")}); err != nil || e.Memory() != PlanMemory(16, egress.DefaultMaxFlows) {
		t.Errorf("a far edge at 16 MiB plans %+v (%v); want %+v", e.Memory(), err, PlanMemory(16, egress.DefaultMaxFlows))
	}
}

func mustKey(t *testing.T) crypt.PrivateKey {
	k, err := crypt.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestConfigValidate(t *testing.T) {
	ka, kb := mustKey(t), mustKey(t)
	pol, _ := egress.ParsePolicy([]string{"198.18.2.0/24"})
	addr := netip.MustParseAddrPort("198.18.0.2:4500")
	far := FarConfig{Shared: Shared{PrivateKey: kb, Policy: pol}, PeerKey: ka.PublicKey(), Listen: addr}
	if err := Check(far); err != nil {
		t.Fatalf("a far edge's config: %v", err)
	}
	farWith := func(f func(c *FarConfig)) func() Config { return func() Config { c := far; f(&c); return c } }
	hub := func(bs ...Branch) func() Config {
		return func() Config { return HubConfig{Shared: far.Shared, Listen: addr, Branches: bs} }
	}
	ups := func(us ...Upstream) func() Config {
		return func() Config { return NearConfig{Shared: far.Shared, Upstreams: us} }
	}
	r := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	kc := mustKey(t)
	for _, tc := range []struct {
		name  string
		cfg   func() Config
		field string
		want  string // the error
	}{
		{"no key", farWith(func(c *FarConfig) { c.PrivateKey = crypt.PrivateKey{} }), "PrivateKey", "PrivateKey is required"},
		{"no listen", farWith(func(c *FarConfig) { c.Listen = netip.AddrPort{} }), "Listen", "Listen is required"},
		{"own key as peer", farWith(func(c *FarConfig) { c.PeerKey = kb.PublicKey() }), "PeerKey", "own public key"},
		{"nothing to do", farWith(func(c *FarConfig) { c.Policy = egress.Policy{} }), "TUN", "would do nothing"},
		{"transparent without TUN", farWith(func(c *FarConfig) { c.Transparent = true }), "Transparent", "Transparent connects servers through the TUN device's stack: it needs TUN,"},
		{"memory", farWith(func(c *FarConfig) { c.MemoryMiB = 8 }), "MemoryMiB", "MemoryMiB 8: want 16 to 1048576"},
		{"MTU", farWith(func(c *FarConfig) { c.TUN, c.MTU = "wo0", 100 }), "MTU", "MTU 100"},
		{"tunnel MTU small", farWith(func(c *FarConfig) { c.TunnelMTU = 1279 }), "TunnelMTU", "TunnelMTU 1279"},
		{"tunnel MTU large", farWith(func(c *FarConfig) { c.TunnelMTU = MaxTunnelMTU + 1 }), "TunnelMTU", "TunnelMTU 9217"},
		{"routes without setup", farWith(func(c *FarConfig) { c.TUN, c.TUNRoutes = "wo0", r }), "TUNRoutes", "TUNRoutes needs TUNSetup"},
		{"peer timeout", farWith(func(c *FarConfig) { c.PeerTimeout = time.Second }), "PeerTimeout", "PeerTimeout 1s"},
		{"hub intercepting", func() Config { c := hub(Branch{Name: "a", Key: ka.PublicKey()})().(HubConfig); c.TUN = "wo0"; return c }, "TUN", "a hub intercepts nothing"},
		{"hub without branches", hub(), "Branches", "Branches is empty"},
		{"branch name", hub(Branch{Name: "a b", Key: ka.PublicKey()}), "Branches", "a name is"},
		{"branch twice", hub(Branch{Name: "a", Key: ka.PublicKey()}, Branch{Name: "a", Key: kc.PublicKey()}), "Branches", "given twice"},
		{"branch keys", hub(Branch{Name: "a", Key: ka.PublicKey()}, Branch{Name: "b", Key: ka.PublicKey()}), "Branches", "same key"},
		{"branch own key", hub(Branch{Name: "a", Key: kb.PublicKey()}), "Branches", "own public key"},
		{"upstream beside a peer key", func() Config {
			c := ups(Upstream{Name: "dc", Key: ka.PublicKey(), Addr: addr, Routes: r})().(NearConfig)
			c.PeerKey = ka.PublicKey()
			return c
		}, "Upstreams", "exclusive"},
		{"upstream without routes", ups(Upstream{Name: "dc", Key: ka.PublicKey(), Addr: addr}), "Upstreams", "Upstreams dc carries nothing: give it Upstreams.Routes dc:CIDR"},
		{"upstream routes overlap", ups(Upstream{Name: "dc1", Key: ka.PublicKey(), Addr: addr, Routes: r},
			Upstream{Name: "dc2", Key: kc.PublicKey(), Addr: netip.MustParseAddrPort("198.18.0.3:4500"), Routes: r}), "Upstreams.Routes", "given to both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg()
			err := Check(c)
			var fe *FieldError
			if !errors.Is(err, ErrConfig) || !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want a FieldError for %s mentioning %q", err, tc.field, tc.want)
			}
			// A command names the fields its own way.
			if got := fe.Render(func(f string) string { return "<" + f + ">" }); !strings.Contains(got, "<"+tc.field+">") {
				t.Errorf("rendered %q; want the field named the command's way", got)
			}
			if _, err := build(c); err == nil {
				t.Error("the constructor accepted it")
			}
		})
	}
}

// build is the edge cfg configures, from its role's constructor.
func build(cfg Config) (runnable, error) {
	switch c := cfg.(type) {
	case NearConfig:
		return NewNear(c)
	case FarConfig:
		return NewFar(c)
	case HubConfig:
		return NewHub(c)
	}
	return nil, fmt.Errorf("no role has a %T", cfg)
}

// pair runs a near and a far edge in this process over an in-memory bind
// (no TUN, no root): the far edge's egress connects what its policy allows
// with kernel sockets on loopback.
type pair struct {
	near *Near
	far  *Far
	stop func()
}

func startPair(t *testing.T, allow string) *pair { return startPairWith(t, allow, nil) }

// startPairWith is startPair with mod applied to the far edge's config.
func startPairWith(t *testing.T, allow string, mod func(*FarConfig)) *pair {
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
	fcfg := FarConfig{Shared: Shared{PrivateKey: kb, Policy: pol, Bind: once(b)}, PeerKey: ka.PublicKey(), Listen: b.LocalAddr()}
	if mod != nil {
		mod(&fcfg)
	}
	far, err := NewFar(fcfg)
	if err != nil {
		t.Fatal(err)
	}
	// The near edge has no TUN here; flows come in through Dial. Its policy
	// only makes it a valid edge (it connects nothing in this test).
	near, err := NewNear(NearConfig{Shared: Shared{PrivateKey: ka, Policy: pol, Bind: once(a), CC: tunnel.CCCubic}, PeerKey: kb.PublicKey(), Peer: b.LocalAddr()})
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
	for _, e := range []runnable{near, far} {
		waitTunnel(t, e, e.Role())
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
	p := startPairWith(t, "127.0.0.1/32", func(c *FarConfig) { c.FlowIdleTimeout = 200 * time.Millisecond })
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
