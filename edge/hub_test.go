package edge

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/edge/share"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/flow"
	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/tcptest"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// TestEdgeHub: one far edge serves three branches on one UDP socket
// (loopback, no root). Each branch moves 2 MiB each way at once, hash
// checked; branch b is refused a destination branch a may reach; a key
// the hub does not list gets no tunnel; status and flows name each branch.
func TestEdgeHub(t *testing.T) {
	leaktest.Check(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := tcptest.Server(t, tcptest.Echo)    // every branch may reach it
	private := tcptest.Server(t, tcptest.Echo) // branch a only
	rule := func(ap netip.AddrPort) egress.Rule {
		r, err := egress.ParseRule(fmt.Sprintf("%v/32:%d", ap.Addr(), ap.Port()))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	names := []string{"a", "b", "c"}
	run, wait := edgeRunner(t, ctx)
	defer wait()
	defer cancel()
	h := startHub(t, run, names, func(c *HubConfig) {
		c.Branches[0].Allow = []egress.Rule{rule(private)}
		c.Policy = egress.Policy{Rules: []egress.Rule{rule(open)}}
	})
	hub, branches := h.hub, h.next.Branches
	near := make([]*Near, len(names)+1)
	for i := range near {
		var k crypt.PrivateKey
		if i < len(names) {
			k = h.keys[i]
		} else {
			k, _ = crypt.GenerateKey(rand.Reader) // a stranger
		}
		near[i] = h.branch(t, k)
		run(near[i])
	}
	for i := range names {
		waitTunnel(t, near[i], "branch "+names[i])
	}
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	src := netip.MustParseAddrPort("198.18.1.2:40000")

	var ewg sync.WaitGroup
	for i := range names {
		ewg.Add(1)
		go func() {
			defer ewg.Done()
			c, err := near[i].Dial(dctx, src, open)
			if err != nil {
				t.Errorf("branch %s: dial: %v", names[i], err)
				return
			}
			defer c.Close()
			data := tcptest.Payload(uint64(i), 2<<20)
			go func() { c.Write(data); c.CloseWrite() }()
			got, err := io.ReadAll(c)
			if err != nil || string(got) != string(data) {
				t.Errorf("branch %s: echo of 2 MiB: %d bytes, err %v, equal %v", names[i], len(got), err, string(got) == string(data))
			}
		}()
	}
	// Meanwhile: a may reach the private server, b may not.
	if c, err := near[0].Dial(dctx, src, private); err != nil {
		t.Errorf("branch a to its own destination: %v", err)
	} else {
		c.Close()
	}
	if c, err := near[1].Dial(dctx, src, private); !errors.Is(err, flow.ErrNotAllowed) {
		if c != nil {
			c.Close()
		}
		t.Errorf("branch b to branch a's destination: %v; want not allowed", err)
	}
	ewg.Wait()

	if near[len(names)].Status().Tunnel != nil {
		t.Error("a key the hub does not list got a tunnel")
	}
	st := hub.Status()
	if len(st.Peers) != len(names) || st.Hub == nil || st.Hub.UnknownKey == 0 {
		t.Fatalf("hub status: %d peers, hub %+v; want 3 and the stranger counted", len(st.Peers), st.Hub)
	}
	// The hub's refusals name the stranger's key, and its branches'
	// tunnels their state.
	stranger := near[len(names)].sh.PrivateKey.PublicKey().Base64()
	if r := st.Refused; r == nil || r.UnknownKey == 0 || r.Last == nil || r.Last.Reason != "unknown_key" || r.Last.Key != stranger {
		t.Errorf("hub's refusals %+v; want the stranger's key %s", r, stranger)
	}
	for _, p := range st.Peers {
		if p.TunnelState == nil || p.TunnelState.State != "up" || p.TunnelState.LastHandshake.IsZero() {
			t.Errorf("branch %s: tunnel state %+v; want up", p.Name, p.TunnelState)
		}
	}
	if ok, why := hub.Ready(); !ok {
		t.Errorf("hub with its branches up: not ready: %s", why)
	}
	if ok, why := near[len(names)].Ready(); ok || !strings.Contains(why, "no answer to") {
		t.Errorf("the stranger: Ready() = %v, %q; want its unanswered handshakes", ok, why)
	}
	for i, p := range st.Peers {
		if p.Name != names[i] || p.Tunnel == nil || p.Egress.Connected == 0 {
			t.Errorf("peer %d: %s, tunnel %v, connected %d", i, p.Name, p.Tunnel != nil, p.Egress.Connected)
		}
	}
	// (On loopback the refusal counts as denied: 127.0.0.1 is reachable
	// only where a rule names it, and b's rules name another port.)
	if b := st.Peers[1].Egress; b.NotAllowed+b.Denied != 1 || st.Egress.NotAllowed+st.Egress.Denied != 1 {
		t.Errorf("branch b's refusals: %+v (sum %+v); want 1", b, st.Egress)
	}
	for deadline := time.Now().Add(5 * time.Second); len(hub.Flows()) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("%d flows still listed 5 s after every echo ended", len(hub.Flows()))
			break
		}
	}

	// A reload gives b a rule of its own; a new branch needs a restart.
	h.setNext(func(c *HubConfig) {
		c.Branches = append([]Branch(nil), branches...)
		c.Branches[1].Allow = []egress.Rule{rule(private)}
	})
	if changed, err := hub.Reload(); err != nil || len(changed) != 1 {
		t.Fatalf("reload: changed %q, err %v; want branch b's policy", changed, err)
	}
	if c, err := near[1].Dial(dctx, src, private); err != nil {
		t.Errorf("branch b after the reload gave it the destination: %v", err)
	} else {
		c.Close()
	}
	// A branch added by a reload is served at once; one removed is gone.
	dk, _ := crypt.GenerateKey(rand.Reader)
	h.setNext(func(c *HubConfig) {
		c.Branches = append(append([]Branch(nil), c.Branches[:2]...), Branch{Name: "d", Key: dk.PublicKey()})
	})
	changed, err := hub.Reload()
	if err != nil || strings.Join(changed, "; ") != "branch c removed; branch d added" {
		t.Fatalf("reload adding d and removing c: changed %q, err %v", changed, err)
	}
	d := h.branch(t, dk)
	run(d)
	waitTunnel(t, d, "branch d, after the reload adding it")
	c, err := d.Dial(dctx, src, open)
	if err != nil {
		t.Fatalf("branch d: dial: %v", err)
	}
	c.Close()
	var got []string
	for _, p := range hub.Status().Peers {
		got = append(got, p.Name)
	}
	if strings.Join(got, ",") != "a,b,d" {
		t.Errorf("hub's branches after the reload: %v; want a, b, d", got)
	}
}

// TestEdgeHubRate: a hub told its link's rate (HubRateBps) caps each
// branch's tunnel at its share: the caps divide the link's budget, and two
// branches echoing at once through it on loopback take at least the time
// their caps allow; a reload that removes the rate lifts the caps.
func TestEdgeHubRate(t *testing.T) {
	leaktest.Check(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	echo := tcptest.Server(t, tcptest.Echo)
	rule, err := egress.ParseRule(fmt.Sprintf("%v/32:%d", echo.Addr(), echo.Port()))
	if err != nil {
		t.Fatal(err)
	}
	const rateBps = 16_000_000
	names := []string{"a", "b"}
	run, wait := edgeRunner(t, ctx)
	defer wait()
	defer cancel()
	h := startHub(t, run, names, func(c *HubConfig) {
		c.HubRateBps = rateBps
		c.Policy = egress.Policy{Rules: []egress.Rule{rule}}
	})
	h.setNext(func(c *HubConfig) { c.HubRateBps = 0 })
	hub := h.hub
	near := make([]*Near, len(names))
	for i := range near {
		near[i] = h.branch(t, h.keys[i])
		run(near[i])
	}
	capped := func() (caps []uint64) {
		for _, p := range hub.Status().Peers {
			if p.Tunnel != nil && p.Tunnel.RateCapBps != 0 {
				caps = append(caps, p.Tunnel.RateCapBps)
			}
		}
		return caps
	}
	for deadline := time.Now().Add(10 * time.Second); len(capped()) < len(names); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no cap on every branch's tunnel within 10 s: %v", capped())
		}
	}
	// The caps divide the budget; idle tunnels' floors (a quarter of an
	// equal share each) may add to it.
	budget := share.Budget(rateBps)
	var sum uint64
	for _, c := range capped() {
		sum += c
	}
	if sum > budget*5/4 {
		t.Errorf("the caps %v sum to %d bit/s, beyond the budget %d of the hub's link and the idle floors", capped(), sum, budget)
	}

	const size = 1 << 20
	start := time.Now()
	var ewg sync.WaitGroup
	for i := range names {
		ewg.Add(1)
		go func() {
			defer ewg.Done()
			c, err := near[i].Dial(ctx, netip.MustParseAddrPort("198.18.1.2:40000"), echo)
			if err != nil {
				t.Errorf("branch %s: dial: %v", names[i], err)
				return
			}
			defer c.Close()
			data := tcptest.Payload(uint64(i), size)
			go func() { c.Write(data); c.CloseWrite() }()
			if got, err := io.ReadAll(c); err != nil || string(got) != string(data) {
				t.Errorf("branch %s: echo of 1 MiB: %d bytes, err %v", names[i], len(got), err)
			}
		}()
	}
	ewg.Wait()
	// The hub sends both echoes back, 2 MiB in all, within its caps.
	least := time.Duration(float64(2*size*8) / float64(budget*5/4) * float64(time.Second))
	if took := time.Since(start); took < least {
		t.Errorf("the two echoes took %v through a hub capped at %d bit/s; want at least %v", took, budget, least)
	}

	if _, err := hub.Reload(); err != nil {
		t.Fatalf("reload without the hub's rate: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); len(capped()) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("caps %v still set 5 s after a reload removed the hub's rate", capped())
		}
	}
}
