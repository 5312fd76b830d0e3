package edge

import (
	"context"
	"crypto/rand"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/tunnel/bind"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// runnable is an edge of any role, as the tests run it.
type runnable interface {
	Run(ctx context.Context) error
	Status() control.Status
	Role() string
}

// edgeRunner returns run, which runs an edge until ctx ends, and wait,
// which waits for every edge run returned (call it after ctx ends).
func edgeRunner(t *testing.T, ctx context.Context) (run func(runnable), wait func()) {
	var wg sync.WaitGroup
	run = func(e runnable) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
	}
	return run, wg.Wait
}

// waitTunnel waits up to 10 s for e's one tunnel to come up.
func waitTunnel(t *testing.T, e runnable, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); e.Status().Tunnel == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no tunnel within 10 s", what)
		}
	}
}

// testHub is a hub on a loopback socket, running, with its branches'
// keys; Reload reads next.
type testHub struct {
	hub      *Hub
	key      crypt.PrivateKey
	addr     netip.AddrPort
	keys     []crypt.PrivateKey
	branches []Branch
	mu       sync.Mutex
	next     HubConfig
}

// startHub runs a hub whose branches are named names, its configuration
// changed by mod (if set) before it starts; what Reload reads starts as
// the same configuration.
func startHub(t *testing.T, run func(runnable), names []string, mod func(*HubConfig)) *testHub {
	t.Helper()
	h := &testHub{}
	h.key, _ = crypt.GenerateKey(rand.Reader)
	for _, n := range names {
		k, _ := crypt.GenerateKey(rand.Reader)
		h.keys = append(h.keys, k)
		h.branches = append(h.branches, Branch{Name: n, Key: k.PublicKey()})
	}
	sock, err := bind.Listen("udp4", netip.MustParseAddrPort("127.0.0.1:0"), bind.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h.addr = sock.LocalAddr()
	cfg := HubConfig{Shared: Shared{PrivateKey: h.key, Bind: func() (bind.Conn, error) { return sock, nil }},
		Listen: h.addr, Branches: append([]Branch(nil), h.branches...)}
	if mod != nil {
		mod(&cfg)
	}
	h.next = cfg
	cfg.Reload = func() (Config, error) { h.mu.Lock(); defer h.mu.Unlock(); return h.next, nil }
	if h.hub, err = NewHub(cfg); err != nil {
		t.Fatal(err)
	}
	run(h.hub)
	return h
}

// setNext changes what the hub's Reload reads.
func (h *testHub) setNext(f func(*HubConfig)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(&h.next)
}

// branchPolicy only makes the branches' near edges valid: they connect
// nothing in these tests.
var branchPolicy = egress.Policy{Rules: []egress.Rule{{Prefix: netip.MustParsePrefix("192.0.2.1/32")}}}

// branch is a near edge with key k dialling the hub (not yet running).
func (h *testHub) branch(t *testing.T, k crypt.PrivateKey) *Near {
	t.Helper()
	n, err := NewNear(NearConfig{Shared: Shared{PrivateKey: k, Policy: branchPolicy}, PeerKey: h.key.PublicKey(), Peer: h.addr})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// metricsAt is where the edge's metrics server listens ("": not yet).
func (b *base) metricsAt() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.metricsAddr
}

// served is an edge whose metrics the tests ask.
type served interface {
	runnable
	metricsAt() string
}
