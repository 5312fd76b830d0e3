package edge

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/tcptest"
	"github.com/wanopt/wanopt/tunnel/bind"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// TestEdgeUpstreams: a near edge with two upstreams (far edges on
// loopback) sends each flow to the one whose routes hold its destination,
// the most specific prefix winning; a destination no route holds is
// unreachable. UDP goes the same way (datagramRoute), and the answers
// come back through the upstream's tunnel.
func TestEdgeUpstreams(t *testing.T) {
	leaktest.Check(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	one := tcptest.Server(t, tcptest.Echo) // 127.0.0.1: upstream dc1 (127.0.0.1/32)
	ln, err := net.Listen("tcp4", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2 here: %v", err)
	}
	tcptest.Serve(t, ln, tcptest.Echo)
	two := netip.MustParseAddrPort(ln.Addr().String()) // 127.0.0.2: upstream dc2 (127.0.0.0/8)
	udpOne, udpTwo := udpEcho(t, "127.0.0.1:0"), udpEcho(t, "127.0.0.2:0")

	run, wait := edgeRunner(t, ctx)
	defer wait()
	defer cancel()
	nk, _ := crypt.GenerateKey(rand.Reader)
	pol, _ := egress.ParsePolicy([]string{"127.0.0.1/32", "127.0.0.2/32"})
	var ups []Upstream
	var fars []*Far
	for i, route := range []string{"127.0.0.1/32", "127.0.0.0/8"} {
		fk, _ := crypt.GenerateKey(rand.Reader)
		// A free port for the far edge, which opens its socket anew for
		// each tunnel (a reload below ends one).
		sock, err := bind.Listen("udp4", netip.MustParseAddrPort("127.0.0.1:0"), bind.Options{})
		if err != nil {
			t.Fatal(err)
		}
		addr := sock.LocalAddr()
		sock.Close()
		far, err := NewFar(FarConfig{Shared: Shared{PrivateKey: fk, Policy: pol}, PeerKey: nk.PublicKey(), Listen: addr})
		if err != nil {
			t.Fatal(err)
		}
		run(far)
		fars = append(fars, far)
		ups = append(ups, Upstream{Name: fmt.Sprintf("dc%d", i+1), Key: fk.PublicKey(), Addr: addr,
			Routes: []netip.Prefix{netip.MustParsePrefix(route)}})
	}
	var (
		mu      sync.Mutex
		nearCfg = NearConfig{Shared: Shared{PrivateKey: nk, Policy: branchPolicy}, Upstreams: ups}
		next    = nearCfg
	)
	nearCfg.Reload = func() (Config, error) { mu.Lock(); defer mu.Unlock(); return next, nil }
	near, err := NewNear(nearCfg)
	if err != nil {
		t.Fatal(err)
	}
	answers := attachNear(near)
	run(near)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st := near.Status()
		up := 0
		for _, p := range st.Peers {
			if p.Tunnel != nil {
				up++
			}
		}
		if up == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("near edge: %d of 2 upstream tunnels up within 10 s", up)
		}
	}
	if ok, why := near.Ready(); !ok {
		t.Errorf("near edge with both upstreams up: not ready: %s", why)
	}
	for _, p := range near.Status().Peers {
		if p.TunnelState == nil || p.TunnelState.State != "up" || p.TunnelState.Peer == "" {
			t.Errorf("upstream %s: tunnel state %+v", p.Name, p.TunnelState)
		}
	}
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	src := netip.MustParseAddrPort("198.18.1.2:40000")
	// 127.0.0.1 is in both upstreams' routes: the /32 (dc1) wins;
	// 127.0.0.2 only in dc2's /8.
	for i, tc := range []struct {
		dst      netip.AddrPort
		dc1, dc2 uint64 // flows each far edge has seen after the dial
	}{{one, 1, 0}, {two, 1, 1}} {
		c, err := near.Dial(dctx, src, tc.dst)
		if err != nil {
			t.Fatalf("dial %v: %v", tc.dst, err)
		}
		go func() { io.WriteString(c, "hello"); c.CloseWrite() }()
		if got, err := io.ReadAll(c); err != nil || string(got) != "hello" {
			t.Errorf("echo from %v: %q, %v", tc.dst, got, err)
		}
		c.Close()
		if a, b := fars[0].Status().Egress.Streams, fars[1].Status().Egress.Streams; a != tc.dc1 || b != tc.dc2 {
			t.Errorf("dial %d (%v): dc1 saw %d flows, dc2 %d; want %d and %d", i, tc.dst, a, b, tc.dc1, tc.dc2)
		}
	}
	// UDP: to 127.0.0.1 through dc1, to 127.0.0.2 through dc2; to what no
	// route holds, nowhere (counted as no tunnel).
	client := netip.MustParseAddrPort("198.18.1.2:40001")
	// A far edge counts a packet after its socket took it, so the answer
	// can reach the near edge first: counts are waited for, up to 5 s.
	settled := func(ok func() bool) bool {
		for deadline := time.Now().Add(5 * time.Second); !ok() && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		return ok()
	}
	udpVia := func(dst netip.AddrPort, dc1, dc2 uint64) {
		t.Helper()
		if got, err := udpExchange(t, near, answers, client, dst, "ping "+dst.String(), 5*time.Second); err != nil || got != "ping "+dst.String() {
			t.Errorf("UDP to %v: %q, %v", dst, got, err)
		}
		var n [2]uint64
		if !settled(func() bool {
			for i, f := range fars {
				if s := f.Status().DatagramEgress; s != nil {
					n[i] = s.UDP.PacketsUp
				}
			}
			return n[0] == dc1 && n[1] == dc2
		}) {
			t.Errorf("UDP to %v: dc1 sent on %d packets, dc2 %d; want %d and %d", dst, n[0], n[1], dc1, dc2)
		}
	}
	udpVia(udpOne, 1, 0)
	udpVia(udpTwo, 1, 1)
	near.near.Divert(udpPacket(t, client, netip.MustParseAddrPort("192.0.2.9:53"), "x"))
	ingressOK := func() bool {
		s := near.Status().DatagramIngress
		return s != nil && s.Drops.NoTunnel == 1 && s.UDP.PacketsUp == 2 && s.UDP.PacketsDown == 2
	}
	if !settled(ingressOK) {
		t.Errorf("near edge's datagram ingress: %+v; want 2 up, 2 down, 1 without a route", near.Status().DatagramIngress)
	}
	// A reload removes dc1: 127.0.0.1 now goes to dc2's /8. Another
	// brings dc1 back, and its /32 wins again.
	echoVia := func(dst netip.AddrPort) {
		t.Helper()
		c, err := near.Dial(dctx, src, dst)
		if err != nil {
			t.Fatalf("dial %v: %v", dst, err)
		}
		c.Close()
	}
	mu.Lock()
	next.Upstreams = ups[1:]
	mu.Unlock()
	if changed, err := near.Reload(); err != nil || fmt.Sprint(changed) != "[upstream dc1 removed]" {
		t.Fatalf("reload removing dc1: %q, %v", changed, err)
	}
	echoVia(one)
	if n := fars[1].Status().Egress.Streams; n != 2 {
		t.Errorf("after dc1 was removed, %v went to dc2 %d times; want 2 flows there in all", one, n)
	}
	udpVia(udpOne, 1, 2)
	mu.Lock()
	next.Upstreams = ups
	mu.Unlock()
	if changed, err := near.Reload(); err != nil || fmt.Sprint(changed) != "[upstream dc1 added]" {
		t.Fatalf("reload adding dc1 back: %q, %v", changed, err)
	}
	for deadline := time.Now().Add(10 * time.Second); near.Status().Peers[0].Tunnel == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("dc1's tunnel not back within 10 s of the reload")
		}
	}
	echoVia(one)
	if n := fars[0].Status().Egress.Streams; n != 2 {
		t.Errorf("after dc1 came back, it saw %d flows; want 2", n)
	}

	if c, err := near.Dial(dctx, src, netip.MustParseAddrPort("192.0.2.9:80")); err == nil || !isUnreachable(err) {
		if c != nil {
			c.Close()
		}
		t.Errorf("a destination no route holds: %v; want unreachable", err)
	}
}

func isUnreachable(err error) bool { return errors.Is(err, flow.ErrUnreachable) }
