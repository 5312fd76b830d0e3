package edge

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// TestPeerAddrSchedule: a host name is looked up an interval after the
// tunnel went down, then at most once an interval; a failed lookup keeps
// the address and is worth a warning at most once a minute; an address
// among the answers stays, else the first answer is taken.
func TestPeerAddrSchedule(t *testing.T) {
	var answer []netip.Addr
	var fail error
	resolve := func(context.Context, string) ([]netip.Addr, error) { return answer, fail }
	start := netip.MustParseAddrPort("192.0.2.2:4500")
	p := newPeerAddr(start, "far.example.net", resolve, slog.New(slog.DiscardHandler))
	t0 := time.Unix(1e9, 0)
	if got := p.dueAt(t0); !got.Equal(t0.Add(reresolveInterval)) {
		t.Errorf("first lookup due at %v; want %v after the tunnel went down", got.Sub(t0), reresolveInterval)
	}
	ctx := context.Background()
	now := t0.Add(reresolveInterval)
	fail = errors.New("no answer")
	if p.refresh(ctx, now) || p.current() != start {
		t.Errorf("a failed lookup moved the address to %v", p.current())
	}
	if got := p.dueAt(t0); !got.Equal(now.Add(reresolveInterval)) {
		t.Errorf("next lookup due %v after the first; want %v", got.Sub(now), reresolveInterval)
	}
	// The failed lookup above was warned of; the next warnings are a
	// minute apart.
	if p.warnDue(now.Add(reresolveInterval)) {
		t.Error("a second warning within a minute")
	}
	if !p.warnDue(now.Add(reresolveWarnEvery)) {
		t.Error("no warning a minute after the last")
	}
	fail = nil
	answer = []netip.Addr{netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("192.0.2.2")}
	if p.refresh(ctx, now.Add(2*reresolveInterval)) || p.current() != start {
		t.Errorf("an answer holding the address in use moved it to %v", p.current())
	}
	answer = []netip.Addr{netip.MustParseAddr("::ffff:198.18.0.7"), netip.MustParseAddr("192.0.2.9")}
	if !p.refresh(ctx, now.Add(3*reresolveInterval)) || p.current() != netip.MustParseAddrPort("198.18.0.7:4500") {
		t.Errorf("a new answer: address %v; want the first answer, unmapped, on the same port", p.current())
	}
	// A new outage: its first lookup is an interval after it began.
	down := now.Add(time.Hour)
	if got := p.dueAt(down); !got.Equal(down.Add(reresolveInterval)) {
		t.Errorf("a new outage's first lookup due %v after it began", got.Sub(down))
	}
}

// shortReresolve shortens the lookup interval for the test, and restores
// it at its end (after the edges, which copy it at New, stopped).
func shortReresolve(t *testing.T, d time.Duration) {
	saved := reresolveInterval
	reresolveInterval = d
	t.Cleanup(func() { reresolveInterval = saved })
}

// fakeDNS answers lookups of one name from a script (its last answer
// repeats), recording when each came.
type fakeDNS struct {
	mu      sync.Mutex
	script  []func() ([]netip.Addr, error)
	at      []time.Time
	started time.Time
}

func (d *fakeDNS) lookup(_ context.Context, host string) ([]netip.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at = append(d.at, time.Now())
	if host != "far.test" {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := min(len(d.at), len(d.script)) - 1
	return d.script[i]()
}

// times returns when the lookups came, from the start.
func (d *fakeDNS) times() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []time.Duration
	for _, at := range d.at {
		out = append(out, at.Sub(d.started))
	}
	return out
}

// TestReresolvePeer: a near edge given a host name that resolved to an
// address where no far edge listens (127.0.0.2) looks the name up again
// while the tunnel is down, an interval after it went down and then at
// most once an interval; a failed lookup keeps the address; when the
// name moves to the far edge's address (127.0.0.1), the dial in progress
// (which would wait --peer-timeout) ends and the next one brings the
// tunnel up. The status shows the name beside the new address. Once up,
// the name is not looked up again. For the one peer and an upstream.
func TestReresolvePeer(t *testing.T) {
	leaktest.Check(t)
	const interval = 300 * time.Millisecond
	shortReresolve(t, interval)
	for _, upstream := range []bool{false, true} {
		name := "peer"
		if upstream {
			name = "upstream"
		}
		t.Run(name, func(t *testing.T) {
			kn, _ := crypt.GenerateKey(rand.Reader)
			kf, _ := crypt.GenerateKey(rand.Reader)
			pol, _ := egress.ParsePolicy([]string{"127.0.0.1/32:9"})
			addr := freeUDP(t)
			if c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)}); err != nil {
				t.Skipf("no 127.0.0.2 here: %v", err)
			} else {
				c.Close()
			}
			dead := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), addr.Port())
			answer := func(a string) func() ([]netip.Addr, error) {
				return func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr(a)}, nil }
			}
			dns := &fakeDNS{script: []func() ([]netip.Addr, error){
				func() ([]netip.Addr, error) { return nil, &net.DNSError{Err: "server misbehaving", Name: "far.test"} },
				answer("127.0.0.2"), answer("127.0.0.1"),
			}}
			far, err := NewFar(FarConfig{Shared: Shared{PrivateKey: kf, Policy: pol}, PeerKey: kn.PublicKey(), Listen: addr})
			if err != nil {
				t.Fatal(err)
			}
			nc := NearConfig{Shared: Shared{PrivateKey: kn, Policy: pol, Resolver: dns.lookup}}
			if upstream {
				nc.Upstreams = []Upstream{{Name: "dc1", Key: kf.PublicKey(), Addr: dead, Host: "far.test",
					Routes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}}
			} else {
				nc.PeerKey, nc.Peer, nc.PeerHost = kf.PublicKey(), dead, "far.test"
			}
			near, err := NewNear(nc)
			if err != nil {
				t.Fatal(err)
			}
			state := func() (up bool, peer, host string) {
				st := near.Status()
				ts := st.TunnelState
				if upstream {
					up, ts = st.Peers[0].Tunnel != nil, st.Peers[0].TunnelState
				} else {
					up = st.Tunnel != nil
				}
				return up, ts.Peer, ts.Host
			}
			ctx, cancel := context.WithCancel(context.Background())
			run, wait := edgeRunner(t, ctx)
			defer wait()
			defer cancel()
			run(far)
			dns.mu.Lock()
			dns.started = time.Now()
			dns.mu.Unlock()
			run(near)
			if !waitFor(10*time.Second, func() bool { up, _, _ := state(); return up }) {
				t.Fatalf("tunnel not up within 10 s; lookups at %v", dns.times())
			}
			if _, peer, host := state(); peer != addr.String() || host != "far.test" {
				t.Errorf("status: peer %q, host %q; want %v and far.test", peer, host, addr)
			}
			at := dns.times()
			if len(at) != 3 {
				t.Fatalf("lookups at %v; want 3 (a failure, the old address, the new)", at)
			}
			// The edge reads the clock before Run's, so allow some slack.
			const slack = 50 * time.Millisecond
			if at[0] < interval-slack {
				t.Errorf("first lookup %v after the start; want an interval (%v) of the tunnel down first", at[0], interval)
			}
			for i := 1; i < len(at); i++ {
				if gap := at[i] - at[i-1]; gap < interval-slack {
					t.Errorf("lookups %v apart (at %v); want at least %v", gap, at, interval)
				}
			}
			time.Sleep(3 * interval)
			if n := len(dns.times()); n != 3 {
				t.Errorf("%d lookups with the tunnel up; want none after the 3 before", n-3)
			}
		})
	}
}

// reloadReady reports whether n runs what Reload works on: its control
// socket and, with upstreams, their loops.
func reloadReady(n *Near) bool {
	n.mu.Lock()
	serving := n.serving
	n.mu.Unlock()
	if u, ok := n.peers.(*upstreams); ok {
		return serving && u.running()
	}
	return serving
}

// TestReloadKeepsResolved: a reload reads the configuration again, which
// looks the host names up again; an answer that changed is no change of
// --peer (nor of an upstream, whose tunnel would restart), and the
// running address stays. Another host name or port needs a restart (the
// one peer) or restarts the upstream.
func TestReloadKeepsResolved(t *testing.T) {
	leaktest.Check(t)
	kn, _ := crypt.GenerateKey(rand.Reader)
	kf, _ := crypt.GenerateKey(rand.Reader)
	pol, _ := egress.ParsePolicy([]string{"127.0.0.1/32:9"})
	dns := func(context.Context, string) ([]netip.Addr, error) { return nil, errors.New("not in this test") }
	start := netip.MustParseAddrPort("127.0.0.2:4500")
	moved := netip.MustParseAddrPort("127.0.0.3:4500")
	routes := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	// A command's words for the fields: both name the peer's address.
	flags := func(field string) string {
		if field == "Peer" || field == "PeerHost" {
			return "--peer"
		}
		return field
	}
	for _, tc := range []struct {
		name string
		cfg  func(addr netip.AddrPort, host string) NearConfig
		// status is the running address in the status.
		status func(*Near) string
	}{
		{"peer", func(addr netip.AddrPort, host string) NearConfig {
			return NearConfig{Shared: Shared{PrivateKey: kn, Policy: pol, Resolver: dns, FieldName: flags}, PeerKey: kf.PublicKey(), Peer: addr, PeerHost: host}
		}, func(n *Near) string { return n.Status().TunnelState.Peer }},
		{"upstream", func(addr netip.AddrPort, host string) NearConfig {
			return NearConfig{Shared: Shared{PrivateKey: kn, Policy: pol, Resolver: dns, FieldName: flags},
				Upstreams: []Upstream{{Name: "dc1", Key: kf.PublicKey(), Addr: addr, Host: host, Routes: routes}}}
		}, func(n *Near) string { return n.Status().Peers[0].TunnelState.Peer }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				next = tc.cfg(moved, "far.test")
			)
			cfg := tc.cfg(start, "far.test")
			cfg.Reload = func() (Config, error) { mu.Lock(); defer mu.Unlock(); return next, nil }
			e, err := NewNear(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			run, wait := edgeRunner(t, ctx)
			defer wait()
			defer cancel()
			run(e)
			if !waitFor(5*time.Second, func() bool { return reloadReady(e) }) {
				t.Fatal("the edge did not start within 5 s")
			}
			if changed, err := e.Reload(); err != nil || len(changed) != 0 {
				t.Errorf("reload with the name resolving elsewhere: changed %q, err %v; want nothing", changed, err)
			}
			if got := tc.status(e); got != start.String() {
				t.Errorf("after the reload the status shows %s; want the running %v", got, start)
			}
			for _, o := range []struct {
				what string
				addr netip.AddrPort
				host string
			}{
				{"another name", moved, "other.test"},
				{"another port", netip.AddrPortFrom(moved.Addr(), 4501), "far.test"},
				{"an address for the name", start, ""},
			} {
				mu.Lock()
				next = tc.cfg(o.addr, o.host)
				mu.Unlock()
				changed, err := e.Reload()
				if tc.name == "peer" {
					if err == nil || !strings.Contains(err.Error(), "--peer cannot change without a restart") {
						t.Errorf("%s: reload changed %q, err %v; want refused for --peer", o.what, changed, err)
					}
					continue
				}
				if err != nil || fmt.Sprint(changed) != "[upstream dc1 removed upstream dc1 added]" {
					t.Errorf("%s: reload changed %q, err %v; want the upstream restarted", o.what, changed, err)
				}
			}
		})
	}
}
