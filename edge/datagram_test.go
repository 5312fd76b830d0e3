package edge

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/dgram"
	"github.com/wanopt/wanopt/dgram/packet"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/internal/leaktest"
)

// The near edges of these tests have no TUN: attachNear gives one the
// near side a TUN would (newNear's, with its peers' route), whose Write
// hands the packets for the client to a channel instead of the TUN. The
// rest — routing, the tunnels, the far sides, the policy — is the edge's.

// attachNear sets e's near side (before Run) and returns what it writes
// toward the client.
func attachNear(n *Near) <-chan []byte {
	out := make(chan []byte, 64)
	n.near = dgram.NewNear(dgram.NearConfig{Route: n.peers.route, Write: func(p []byte) error {
		select {
		case out <- bytes.Clone(p):
			return nil
		default:
			return fmt.Errorf("test: answers not read")
		}
	}})
	return out
}

// udpEcho is a UDP server on addr (port 0: any) that sends each datagram
// back; it stops at the end of the test.
func udpEcho(t *testing.T, addr string) netip.AddrPort {
	t.Helper()
	c, err := net.ListenPacket("udp4", addr)
	if err != nil {
		t.Skipf("cannot listen on %s here: %v", addr, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo(buf[:n], from)
		}
	}()
	t.Cleanup(func() { c.Close(); wg.Wait() })
	return netip.MustParseAddrPort(c.LocalAddr().String())
}

// udpPacket is an IPv4 UDP packet from src to dst.
func udpPacket(t *testing.T, src, dst netip.AddrPort, payload string) []byte {
	t.Helper()
	pkt := append(make([]byte, packet.HeaderLen(src.Addr())), payload...)
	if err := packet.PutUDP(pkt, src, dst); err != nil {
		t.Fatal(err)
	}
	return pkt
}

// udpExchange sends payload from src to dst through e's near side and
// returns the payload of the answer written toward the client, or an
// error if none came within wait.
func udpExchange(t *testing.T, n *Near, answers <-chan []byte, src, dst netip.AddrPort, payload string, wait time.Duration) (string, error) {
	t.Helper()
	if !n.near.Divert(udpPacket(t, src, dst, payload)) {
		t.Fatalf("the near side did not take a UDP packet to %v", dst)
	}
	select {
	case a := <-answers:
		p, err := packet.Parse(a)
		if err != nil {
			return "", fmt.Errorf("the answer does not parse: %w", err)
		}
		if p.SrcAddrPort() != dst || p.DstAddrPort() != src {
			return "", fmt.Errorf("answer from %v to %v; want from %v to %v", p.SrcAddrPort(), p.DstAddrPort(), dst, src)
		}
		return string(p.Payload), nil
	case <-time.After(wait):
		return "", fmt.Errorf("no answer from %v within %v", dst, wait)
	}
}

// TestEdgeHubDatagrams: a hub's branches carry UDP, each under its own
// policy (the edge's rules and its --branch-allow ones, which a reload
// changes); status counts each branch's datagrams; a removed branch's
// table is closed (its flow gone at once, not after the idle timeout).
func TestEdgeHubDatagrams(t *testing.T) {
	leaktest.Check(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	echo := udpEcho(t, "127.0.0.1:0")
	rule, err := egress.ParseRule(fmt.Sprintf("%v/32:%d", echo.Addr(), echo.Port()))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b"}
	run, wait := edgeRunner(t, ctx)
	defer wait()
	defer cancel()
	h := startHub(t, run, names, func(c *HubConfig) {
		c.Branches[0].Allow = []egress.Rule{rule} // a may reach the server, b not
		c.Policy = branchPolicy
	})
	hub, branches := h.hub, h.next.Branches
	near := make([]*Near, len(names))
	answers := make([]<-chan []byte, len(names))
	for i := range near {
		near[i] = h.branch(t, h.keys[i])
		answers[i] = attachNear(near[i])
		run(near[i])
	}
	for i := range near {
		waitTunnel(t, near[i], "branch "+names[i])
	}
	client := netip.MustParseAddrPort("198.18.1.2:40000")
	if got, err := udpExchange(t, near[0], answers[0], client, echo, "hello a", 5*time.Second); err != nil || got != "hello a" {
		t.Errorf("branch a: %q, %v", got, err)
	}
	if got, err := udpExchange(t, near[1], answers[1], client, echo, "hello b", 500*time.Millisecond); err == nil {
		t.Errorf("branch b reached a destination only a may: %q", got)
	}
	peer := func(name string) dgram.Stats {
		for _, p := range hub.Status().Peers {
			if p.Name == name && p.Datagrams != nil {
				return *p.Datagrams
			}
		}
		t.Fatalf("hub status: no datagram counters for branch %s", name)
		return dgram.Stats{}
	}
	if a := peer("a"); a.UDP.PacketsUp != 1 || a.UDP.PacketsDown != 1 || a.Flows != 1 || a.Drops.Total() != 0 {
		t.Errorf("branch a's datagrams: %+v", a)
	}
	if b := peer("b"); b.UDP.PacketsUp != 0 || b.Drops.NotAllowed != 1 {
		t.Errorf("branch b's datagrams: %+v; want one not allowed", b)
	}
	if s := hub.Status().DatagramEgress; s == nil || s.UDP.PacketsUp != 1 || s.Drops.NotAllowed != 1 {
		t.Errorf("hub's datagram egress (the branches' sum): %+v", s)
	}

	// A reload lets b reach the server too.
	h.setNext(func(c *HubConfig) {
		c.Branches = []Branch{branches[0], {Name: "b", Key: branches[1].Key, Allow: []egress.Rule{rule}}}
	})
	if _, err := hub.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, err := udpExchange(t, near[1], answers[1], client, echo, "hello again b", 5*time.Second); err != nil || got != "hello again b" {
		t.Errorf("branch b after the reload allowed it: %q, %v", got, err)
	}
	// A reload removing a closes its table: its flow is gone at once.
	var farA *dgram.Far
	for _, b := range hub.running() {
		if b.Name == "a" {
			farA = b.far
		}
	}
	if farA == nil || farA.Stats().Flows != 1 {
		t.Fatalf("branch a's table before its removal: %v", farA)
	}
	h.setNext(func(c *HubConfig) { c.Branches = c.Branches[1:] })
	if changed, err := hub.Reload(); err != nil || fmt.Sprint(changed) != "[branch a removed]" {
		t.Fatalf("reload removing a: %q, %v", changed, err)
	}
	if n := farA.Stats().Flows; n != 0 {
		t.Errorf("branch a removed: its table still holds %d flows", n)
	}
}
