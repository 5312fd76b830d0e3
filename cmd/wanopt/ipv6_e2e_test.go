package main

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/wanem"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/internal/tcptest"
)

// TestEdgeIPv6 runs the edges lab's IPv6 client and server (2001:2:0:1::2
// and 2001:2:0:2::2, see bench/lab) through wanopt at 20 ms RTT and
// 100 Mbit/s, with the tunnel over IPv4, over IPv6 ([2001:2::2]:4500), and
// over IPv6 to a far edge listening on [::]: each time a hash-checked
// 20 MB echo each way that the tunnel carried, a UDP request and answer,
// and ICMPv6 echo whose least round trip is the link's within 2 ms; and
// the link carried no more packets than the tunnel sent (a tunnel packet
// too big for the link's 1500-byte MTU is refused or fragmented).
func TestEdgeIPv6(t *testing.T) {
	needLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const rtt = 20 * time.Millisecond
	link := wanem.Config{Delay: rtt / 2, RateBps: 100_000_000}
	l := newLab(t, ctx, link, link)
	if !l.Client.Addr6.Is6() || !l.Server.Addr6.Is6() {
		t.Fatalf("the edges lab gave the client %v and the server %v: want IPv6 addresses (bench/lab builds it dual-stack)", l.Client.Addr6, l.Server.Addr6)
	}
	echo6 := netip.AddrPortFrom(l.Server.Addr6, echoPort)
	udp6 := netip.AddrPortFrom(l.Server.Addr6, udpEchoPort)
	serveAt(t, l.Server.NS, echo6, tcptest.Echo)
	serveUDPEchoAt(t, l.Server.NS, udp6)
	// Ping sockets (ICMPv6 too) for the far edge's egress and the client.
	for _, h := range []*lab.Host{l.EdgeB, l.Client} {
		allowPing(t, ctx, l, h, true)
	}

	for _, tc := range []struct {
		name     string
		tunnel6  bool
		farArgs  []string
		wantPeer netip.AddrPort
	}{
		{"tunnel over IPv4", false, nil, netip.MustParseAddrPort("198.18.0.2:4500")},
		{"tunnel over IPv6", true, nil, netip.MustParseAddrPort("[2001:2::2]:4500")},
		// A far edge on every address (a dual-stack socket) does not know
		// its peer's family when it starts: its packets must fit IPv6's
		// 1500 bytes too.
		{"tunnel over IPv6 to a far edge on [::]", true, []string{"--listen", "[::]:4500"}, netip.MustParseAddrPort("[2001:2::2]:4500")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A fresh link: its counters are this tunnel's alone.
			l.StopLink()
			if err := l.StartLink(ctx, link, link); err != nil {
				t.Fatal(err)
			}
			edges := startEdges(t, ctx, l, harness.EdgeOptions{
				IPv6: true, TunnelIPv6: tc.tunnel6,
				Allow: []string{l.Server.Addr6.String() + "/128"},
				// The tunnel starts at the link's rate, so the first
				// datagrams do not wait for BBR's startup (see
				// TestEdgeDatagrams).
				Args:    []string{"--wan-rate", "100mbit"},
				FarArgs: tc.farArgs,
			})
			e := &edgeLab{l: l, edges: edges}
			near := tunnelStatus(t, e, "near")
			if p, err := netip.ParseAddrPort(near.Peer); err != nil || p.Addr().Unmap() != tc.wantPeer.Addr() || p.Port() != tc.wantPeer.Port() {
				t.Fatalf("the near edge's tunnel goes to %q, want %v", near.Peer, tc.wantPeer)
			}

			// (a) TCP: 20 MB each way, through the tunnel.
			const size = 20 << 20
			nearBefore, farBefore := near, tunnelStatus(t, e, "far")
			el, err := echoCheckTo(ctx, l.Client.NS, echo6, size, 6, 90*time.Second)
			if err != nil {
				t.Fatalf("IPv6 echo through wanopt: %v", err)
			}
			nearAfter, farAfter := tunnelStatus(t, e, "near"), tunnelStatus(t, e, "far")
			up, down := farAfter.BytesReceived-farBefore.BytesReceived, nearAfter.BytesReceived-nearBefore.BytesReceived
			t.Logf("TCP %v → %v: 20 MB up and 20 MB back, SHA-256 equal, in %v (%.1f Mbit/s each way); tunnel bytes up %d, down %d",
				l.Client.Addr6, echo6, el.Round(time.Millisecond), float64(size)*8/el.Seconds()/1e6, up, down)
			if up < size || down < size {
				t.Errorf("the tunnel carried %d bytes up and %d down during the 20 MB echo: the flow did not go through wanopt", up, down)
			}

			// (b) UDP request and answer.
			dBefore, fBefore := datagramStats(t, e)
			c := dialUDPTo(t, l.Client.NS, udp6)
			query := []byte("wanopt IPv6 datagram")
			answer, udpEl, err := udpAsk(c, query)
			if err != nil {
				t.Fatalf("no UDP answer from %v through the edges: %v", udp6, err)
			}
			if !bytes.Equal(answer, query) {
				t.Fatalf("UDP answer %q, want the query echoed", answer)
			}
			dAfter, fAfter := datagramStats(t, e)
			t.Logf("UDP %v: answer after %v", udp6, udpEl.Round(100*time.Microsecond))
			if udpEl < rtt {
				t.Errorf("the UDP answer came after %v, under the link's %v round trip: it did not cross the link", udpEl, rtt)
			}
			if dAfter.UDP.PacketsUp <= dBefore.UDP.PacketsUp || dAfter.UDP.PacketsDown <= dBefore.UDP.PacketsDown ||
				fAfter.UDP.PacketsUp <= fBefore.UDP.PacketsUp || fAfter.UDP.PacketsDown <= fBefore.UDP.PacketsDown {
				t.Errorf("UDP counters did not move for the exchange: near %+v → %+v, far %+v → %+v", dBefore.UDP, dAfter.UDP, fBefore.UDP, fAfter.UDP)
			}

			// (c) ICMPv6 echo.
			rtts := pingRounds(t, l.Client.NS, l.Server.Addr6.String(), 5, 100*time.Millisecond, rtt)
			pAfter, pfAfter := datagramStats(t, e)
			tunnelMin := tunnelStatus(t, e, "near").MinRTT
			t.Logf("ping %v: %v on a %v link (the tunnel's own min RTT %v)", l.Server.Addr6, rtts, rtt, tunnelMin)
			checkPingRTT(t, rtts, rtt, tunnelMin)
			if pAfter.ICMP.PacketsUp < dAfter.ICMP.PacketsUp+5 || pAfter.ICMP.PacketsDown < dAfter.ICMP.PacketsDown+5 || pfAfter.ICMP.PacketsDown < fAfter.ICMP.PacketsDown+5 {
				t.Errorf("ICMP counters after 5 echoes: near %+v → %+v, far %+v → %+v", dAfter.ICMP, pAfter.ICMP, fAfter.ICMP, pfAfter.ICMP)
			}

			// (d) No fragments: each tunnel packet crossed the link as one.
			nearEnd, farEnd := tunnelStatus(t, e, "near"), tunnelStatus(t, e, "far")
			st := l.StopLink()
			// Slack for what else the kernels send on wan0 (MLD reports)
			// and for packets sent between the status and the stop.
			const slack = 100
			t.Logf("link A→B %d packets, tunnel near→far %d; link B→A %d, tunnel far→near %d", st.AB.Packets, nearEnd.PacketsSent, st.BA.Packets, farEnd.PacketsSent)
			if st.AB.Packets > nearEnd.PacketsSent+slack || st.BA.Packets > farEnd.PacketsSent+slack {
				t.Errorf("the link carried %d packets A→B and %d B→A for %d and %d tunnel packets: tunnel packets were fragmented (too big for the 1500-byte MTU?)",
					st.AB.Packets, st.BA.Packets, nearEnd.PacketsSent, farEnd.PacketsSent)
			}
			if st.AB.Packets < nearEnd.PacketsSent/2 || st.BA.Packets < farEnd.PacketsSent/2 {
				t.Errorf("the link carried %d and %d packets for %d and %d tunnel packets: the link helper's counters are not the tunnel's link",
					st.AB.Packets, st.BA.Packets, nearEnd.PacketsSent, farEnd.PacketsSent)
			}
			if err := edges.Stop(); err != nil {
				t.Error(err)
			}
		})
	}
}

// tunnelStatus is the side's tunnel counters from its control socket.
func tunnelStatus(t *testing.T, e *edgeLab, side string) control.Tunnel {
	t.Helper()
	var st control.Status
	if err := queryControl(e.sock(side), "status", &st); err != nil {
		t.Fatalf("%s edge's status: %v", side, err)
	}
	if st.Tunnel == nil {
		t.Fatalf("the %s edge reports its tunnel down", side)
	}
	return *st.Tunnel
}

// serveAt listens on TCP addr (IPv4 or IPv6) in namespace ns and serves
// each connection with handle until the test ends.
func serveAt(t *testing.T, ns string, addr netip.AddrPort, handle func(c *net.TCPConn)) {
	t.Helper()
	var ln net.Listener
	err := lab.InNetns(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr.String())
		return err
	})
	if err != nil {
		t.Fatalf("listen on %v in %s: %v", addr, ns, err)
	}
	tcptest.Serve(t, ln, handle)
}

// serveUDPEchoAt echoes UDP datagrams on addr in namespace ns until the
// test ends.
func serveUDPEchoAt(t *testing.T, ns string, addr netip.AddrPort) {
	t.Helper()
	serveUDPAt(t, ns, addr, func(b []byte, _ netip.AddrPort) []byte { return b })
}

// serveUDPAt answers each UDP datagram to addr in namespace ns with
// answer(its payload, its source), until the test ends.
func serveUDPAt(t *testing.T, ns string, addr netip.AddrPort, answer func(b []byte, from netip.AddrPort) []byte) {
	t.Helper()
	var c *net.UDPConn
	err := lab.InNetns(ns, func() error {
		var err error
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		t.Fatalf("UDP server on %v in %s: %v", addr, ns, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		b := make([]byte, 65536)
		for {
			n, from, err := c.ReadFromUDPAddrPort(b)
			if err != nil {
				return
			}
			c.WriteToUDPAddrPort(answer(b[:n], from), from)
		}
	}()
	t.Cleanup(func() { c.Close(); wg.Wait() })
}

// udpAsk sends query on c and returns the answer and the time from the
// write to it; err if none came within 3 s.
func udpAsk(c *net.UDPConn, query []byte) ([]byte, time.Duration, error) {
	start := time.Now()
	if _, err := c.Write(query); err != nil {
		return nil, 0, err
	}
	c.SetReadDeadline(start.Add(3 * time.Second))
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		return nil, 0, err
	}
	return buf[:n], time.Since(start), nil
}

// dialUDPTo opens a UDP socket in ns connected to dst, closed when the
// test ends.
func dialUDPTo(t *testing.T, ns string, dst netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := lab.InNetns(ns, func() error {
		var err error
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		return err
	})
	if err != nil {
		t.Fatalf("UDP socket to %v in %s: %v", dst, ns, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
