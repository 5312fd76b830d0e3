package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/wanem"
	"github.com/wanopt/wanopt/dgram"
)

// Lab UDP ports of TestEdgeTransparentDatagrams' server: one answers with
// the source address it saw, one has no socket (the server's kernel
// answers port unreachable), one the far edge's --deny refuses.
const (
	udpWhoamiPort = 7020
	udpClosedPort = 7021
	udpDenyPort   = 7022
)

// TestEdgeTransparentDatagrams carries UDP and ping through a far edge
// with transparent egress, over IPv4 and IPv6 (20 ms RTT, 100 Mbit/s):
// the server sees the client's own address and port as the UDP source
// (kernel egress would show the far edge's, 198.18.2.1 or
// 2001:2:0:2::1), and its answer crosses back; a closed port's ICMP port
// unreachable reaches the client's socket as ECONNREFUSED; a denied port
// is refused by the policy; echo requests are answered across the link
// although the far edge is not allowed ping sockets (so they did not go
// out of one); and a UDP packet from the server to a client port no flow
// used is dropped at the far edge and counted.
func TestEdgeTransparentDatagrams(t *testing.T) {
	needLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const rtt = 20 * time.Millisecond
	link := wanem.Config{Delay: rtt / 2, RateBps: 100_000_000}
	l := newLab(t, ctx, link, link)
	// Ping sockets for the test's client only: the far edge has none.
	allowPing(t, ctx, l, l.Client, true)
	allowPing(t, ctx, l, l.EdgeB, false)
	srv4, srv6 := netip.MustParseAddr("198.18.2.2"), l.Server.Addr6
	for _, a := range []netip.Addr{srv4, srv6} {
		serveUDPWhoamiAt(t, l.Server.NS, netip.AddrPortFrom(a, udpWhoamiPort))
	}
	edges := startEdges(t, ctx, l, harness.EdgeOptions{Transparent: true, IPv6: true,
		Allow: []string{"198.18.2.2/32", srv6.String() + "/128"},
		// The tunnel starts at the link's rate (see TestEdgeDatagrams).
		Args:    []string{"--wan-rate", "100mbit"},
		FarArgs: []string{"--deny", fmt.Sprintf("198.18.2.2/32:%d", udpDenyPort), "--deny", fmt.Sprintf("[%s/128]:%d", srv6, udpDenyPort)},
	})
	e := &edgeLab{l: l, edges: edges}

	for _, srv := range []netip.Addr{srv4, srv6} {
		t.Run(fmt.Sprintf("UDP %v", srv), func(t *testing.T) {
			near0, far0 := datagramStats(t, e)
			c := dialUDPTo(t, l.Client.NS, netip.AddrPortFrom(srv, udpWhoamiPort))
			local := c.LocalAddr().(*net.UDPAddr).AddrPort()
			answer, el, err := udpAsk(c, []byte("who am I?"))
			if err != nil {
				t.Fatalf("no answer through the edges: %v", err)
			}
			seen, err := netip.ParseAddrPort(string(answer))
			if err != nil {
				t.Fatalf("answer %q: %v", answer, err)
			}
			t.Logf("the server saw the datagram from %v; the client's socket is %v; answer after %v", seen, local, el.Round(100*time.Microsecond))
			if seen.Addr().Unmap() != local.Addr().Unmap() || seen.Port() != local.Port() {
				t.Errorf("the server saw %v, want the client's own address and port %v (transparent egress)", seen, local)
			}
			if el < rtt {
				t.Errorf("the answer came after %v, under the link's %v round trip: it did not cross the link", el, rtt)
			}
			near1, far1 := datagramStats(t, e)
			if near1.UDP.PacketsUp <= near0.UDP.PacketsUp || near1.UDP.PacketsDown <= near0.UDP.PacketsDown ||
				far1.UDP.PacketsUp <= far0.UDP.PacketsUp || far1.UDP.PacketsDown <= far0.UDP.PacketsDown || far1.Flows < 1 {
				t.Errorf("UDP counters for the exchange: near %+v → %+v, far %+v → %+v, far flows %d", near0.UDP, near1.UDP, far0.UDP, far1.UDP, far1.Flows)
			}

			// A closed port: the server's port unreachable comes back.
			cc := dialUDPTo(t, l.Client.NS, netip.AddrPortFrom(srv, udpClosedPort))
			if _, _, err := udpAsk(cc, []byte("anyone?")); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("a closed port: the client's read returned %v, want connection refused (the port unreachable carried back)", err)
			}
			near2, far2 := datagramStats(t, e)
			if near2.ICMP.PacketsDown <= near1.ICMP.PacketsDown || far2.ICMP.PacketsDown <= far1.ICMP.PacketsDown {
				t.Errorf("ICMP counters for the port unreachable: near %+v → %+v, far %+v → %+v", near1.ICMP, near2.ICMP, far1.ICMP, far2.ICMP)
			}

			// A denied port: refused by the policy, no answer.
			dc := dialUDPTo(t, l.Client.NS, netip.AddrPortFrom(srv, udpDenyPort))
			dc.Write([]byte("let me in"))
			dc.SetReadDeadline(time.Now().Add(3 * rtt))
			if n, err := dc.Read(make([]byte, 256)); err == nil {
				t.Errorf("the denied port answered %d bytes", n)
			}
			if _, far3 := datagramStats(t, e); far3.Drops.NotAllowed != far2.Drops.NotAllowed+1 {
				t.Errorf("far edge's not-allowed drops %d → %d, want one more", far2.Drops.NotAllowed, far3.Drops.NotAllowed)
			}
		})

		t.Run(fmt.Sprintf("ping %v", srv), func(t *testing.T) {
			_, far0 := datagramStats(t, e)
			rtts := pingRounds(t, l.Client.NS, srv.String(), 5, 50*time.Millisecond, rtt)
			tunnelMin := tunnelStatus(t, e, "near").MinRTT
			t.Logf("ping %v through transparent egress: %v on a %v link (the tunnel's own min RTT %v)", srv, rtts, rtt, tunnelMin)
			checkPingRTT(t, rtts, rtt, tunnelMin)
			_, far1 := datagramStats(t, e)
			if far1.ICMP.PacketsUp < far0.ICMP.PacketsUp+5 || far1.ICMP.PacketsDown < far0.ICMP.PacketsDown+5 || far1.Drops.SocketErrors != far0.Drops.SocketErrors {
				t.Errorf("far edge's ICMP counters for 5 echoes: %+v → %+v, socket errors %d → %d", far0.ICMP, far1.ICMP, far0.Drops.SocketErrors, far1.Drops.SocketErrors)
			}
		})
	}

	t.Run("answer of no flow", func(t *testing.T) {
		_, far0 := datagramStats(t, e)
		stray := netip.MustParseAddrPort("198.18.1.2:7999")
		err := lab.InNetns(l.Server.NS, func() error {
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(stray))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("unsolicited"))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(3 * time.Second)
		for {
			_, far1 := datagramStats(t, e)
			if far1.Drops.Unmatched == far0.Drops.Unmatched+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("far edge's unmatched drops %d → %d, want one more", far0.Drops.Unmatched, far1.Drops.Unmatched)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	code, out, _ := run("status", "--control", e.sock("far"))
	if code != 0 || !strings.Contains(out, "datagrams out: udp") || !regexp.MustCompile(`[1-9]\d* unmatched answers`).MatchString(out) {
		t.Errorf("wanopt status on the far edge (code %d) shows no datagram line with the unmatched answer:\n%s", code, out)
	}
	near, far := datagramStats(t, e)
	t.Logf("near edge datagrams: udp %+v, icmp %+v, drops %+v", near.UDP, near.ICMP, near.Drops)
	t.Logf("far edge datagrams: udp %+v, icmp %+v, flows %d (%d opened), drops %+v", far.UDP, far.ICMP, far.Flows, far.FlowsOpened, far.Drops)
	stopEdges(t, edges)
}

// serveUDPWhoamiAt answers each UDP datagram to addr in namespace ns
// with the source address and port it came from, until the test ends.
func serveUDPWhoamiAt(t *testing.T, ns string, addr netip.AddrPort) {
	t.Helper()
	serveUDPAt(t, ns, addr, func(_ []byte, from netip.AddrPort) []byte { return []byte(from.String()) })
}

// TestEdgeHubTransparentDatagrams: a hub with transparent egress serves
// two branches (20 ms, 100 Mbit/s). Each branch's client sends a UDP
// datagram to the server, which sees that client's own address and port
// and answers it; the answer, routed into the hub's TUN, reaches the
// branch that sent the request, each branch's counters showing its own
// exchange alone; and each branch's client pings the server through the
// hub, which has no ping sockets.
func TestEdgeHubTransparentDatagrams(t *testing.T) {
	needLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const rtt = 20 * time.Millisecond
	link := wanem.Config{Delay: rtt / 2, RateBps: 100_000_000}
	l := newLab(t, ctx, link, link)
	srv := netip.AddrPortFrom(netip.MustParseAddr("198.18.2.2"), udpWhoamiPort)
	serveUDPWhoamiAt(t, l.Server.NS, srv)
	hub := startHub(t, ctx, l, harness.HubOptions{Branches: 2, Transparent: true,
		Lines: []string{"allow = 198.18.2.2/32", "wan-rate = 100mbit"}})
	names := []string{"a", "b"}
	allowPing(t, ctx, l, l.EdgeB, false)
	branchStats := func() map[string]dgram.Stats {
		t.Helper()
		hs, err := hub.Status("hub")
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]dgram.Stats{}
		for _, p := range hs.Peers {
			if p.Datagrams != nil {
				m[p.Name] = *p.Datagrams
			}
		}
		return m
	}
	for i, name := range names {
		ns := hub.ClientNS(i)
		before := branchStats()
		c := dialUDPTo(t, ns, srv)
		local := c.LocalAddr().(*net.UDPAddr).AddrPort()
		answer, _, err := udpAsk(c, []byte("who am I?"))
		if err != nil {
			t.Fatalf("branch %s: no answer through the hub: %v", name, err)
		}
		seen, err := netip.ParseAddrPort(string(answer))
		if err != nil {
			t.Fatalf("branch %s: answer %q: %v", name, answer, err)
		}
		t.Logf("branch %s: the server saw %v; the client's socket is %v", name, seen, local)
		if seen != local || local.Addr() != hub.ClientAddr(i) {
			t.Errorf("branch %s: the server saw %v, want the client's own %v, from %v", name, seen, local, hub.ClientAddr(i))
		}
		after := branchStats()
		for _, other := range names {
			up := after[other].UDP.PacketsUp - before[other].UDP.PacketsUp
			down := after[other].UDP.PacketsDown - before[other].UDP.PacketsDown
			want := uint64(0)
			if other == name {
				want = 1
			}
			if up != want || down != want {
				t.Errorf("branch %s's exchange: branch %s's counters moved %d up, %d down; want %d each", name, other, up, down, want)
			}
		}
		// The branch's client may ping from its namespace.
		allowPing(t, ctx, l, &lab.Host{NS: ns}, true)
		rtts := pingIn(t, ns, "198.18.2.2", 3, 50*time.Millisecond)
		t.Logf("branch %s: ping through the hub %v", name, rtts)
		if st := branchStats()[name]; st.ICMP.PacketsDown < after[name].ICMP.PacketsDown+3 {
			t.Errorf("branch %s's ICMP counters: %+v → %+v", name, after[name].ICMP, st.ICMP)
		}
	}
	hs, _ := hub.Status("hub")
	if d := hs.DatagramEgress; d != nil {
		t.Logf("hub datagrams: udp %+v, icmp %+v, flows %d, drops %+v", d.UDP, d.ICMP, d.Flows, d.Drops)
	}
}
