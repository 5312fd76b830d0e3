package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/wanem"
	"github.com/wanopt/wanopt/dgram"
	"github.com/wanopt/wanopt/edge/control"
)

// Lab UDP ports on the server: an echo the far edge allows, one its
// --deny refuses, and iperf3's.
const (
	udpEchoPort   = 7005
	udpDeniedPort = 7006
	iperf3Port    = 5201
)

// TestEdgeDatagrams carries UDP and ping through the edges lab (100 ms
// RTT, 100 Mbit/s) as tunnel datagrams: a DNS-style request and answer, a
// destination the policy refuses, five echo requests whose least round
// trip is the link's within 2 ms, and iperf3 -u at 50 Mbit/s (if installed).
func TestEdgeDatagrams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rtt := 100 * time.Millisecond
	link := wanem.Config{Delay: rtt / 2, RateBps: 100_000_000}
	e := startEdgeLab(t, ctx, link, link, harness.EdgeOptions{
		Allow: []string{"198.18.2.2/32"},
		// The tunnel starts at the link's rate: datagrams do not wait for
		// congestion control, so on a cold tunnel BBR's startup would
		// drop what exceeds its pace at the near edge's tunnel queue.
		Args:    []string{"--wan-rate", "100mbit"},
		FarArgs: []string{"--deny", fmt.Sprintf("198.18.2.2/32:%d", udpDeniedPort)},
	})
	l := e.l
	// Ping sockets (unprivileged ICMP) for the far edge's egress and for
	// the test's own client.
	for _, h := range []*lab.Host{l.EdgeB, l.Client} {
		allowPing(t, ctx, l, h, true)
	}
	serveUDPEcho(t, l.Server.NS, udpEchoPort)
	serveUDPEcho(t, l.Server.NS, udpDeniedPort)

	t.Run("UDP request and answer", func(t *testing.T) {
		c := dialUDPIn(t, l.Client.NS, udpEchoPort)
		query := []byte("\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01")
		answer, el, err := udpAsk(c, query)
		if err != nil {
			t.Fatalf("no answer through the edges: %v", err)
		}
		if !bytes.Equal(answer, query) {
			t.Fatalf("answer %q, want the query echoed", answer)
		}
		t.Logf("UDP answer of %d bytes after %v", len(answer), el.Round(100*time.Microsecond))
		if el < rtt {
			t.Errorf("the answer came after %v, under the link's %v round trip: it did not cross the link", el, rtt)
		}
		near, far := datagramStats(t, e)
		if near.UDP.PacketsUp < 1 || near.UDP.PacketsDown < 1 || far.UDP.PacketsUp < 1 || far.UDP.PacketsDown < 1 || far.Flows < 1 {
			t.Errorf("counters after one exchange: near %+v, far %+v", near, far)
		}
		code, out, _ := run("status", "--control", e.sock("near"))
		if code != 0 || !bytes.Contains([]byte(out), []byte("datagrams in: udp")) {
			t.Errorf("wanopt status (code %d) shows no datagram line:\n%s", code, out)
		}
	})

	t.Run("UDP to a denied port is dropped", func(t *testing.T) {
		_, before := datagramStats(t, e)
		c := dialUDPIn(t, l.Client.NS, udpDeniedPort)
		c.Write([]byte("let me in"))
		c.SetReadDeadline(time.Now().Add(3 * rtt))
		if n, err := c.Read(make([]byte, 64)); err == nil {
			t.Fatalf("the denied port answered %d bytes", n)
		}
		_, after := datagramStats(t, e)
		if after.Drops.NotAllowed != before.Drops.NotAllowed+1 {
			t.Errorf("far edge's not-allowed drops %d -> %d, want one more", before.Drops.NotAllowed, after.Drops.NotAllowed)
		}
	})

	t.Run("ping RTT", func(t *testing.T) {
		rtts := pingRounds(t, l.Client.NS, "198.18.2.2", 5, 200*time.Millisecond, rtt)
		var ns control.Status
		if err := queryControl(e.sock("near"), "status", &ns); err != nil || ns.Tunnel == nil {
			t.Fatalf("near status: %v", err)
		}
		t.Logf("ping through the edges: %v on a %v link (the tunnel's own min RTT %v, srtt %v)",
			rtts, rtt, ns.Tunnel.MinRTT, ns.Tunnel.SmoothedRTT)
		checkPingRTT(t, rtts, rtt, ns.Tunnel.MinRTT)
		near, far := datagramStats(t, e)
		if near.ICMP.PacketsUp < 5 || near.ICMP.PacketsDown < 5 || far.ICMP.PacketsDown < 5 {
			t.Errorf("ICMP counters: near %+v, far %+v", near.ICMP, far.ICMP)
		}
	})

	t.Run("iperf3 UDP 50 Mbit/s", func(t *testing.T) {
		if _, err := exec.LookPath("iperf3"); err != nil {
			t.Skip("iperf3 is not installed")
		}
		// A second round only when the first loses more than 2 %: iperf3
		// -u owes its rate from the start, so a client the host kept off
		// the CPU sends what it owes at once when it runs again, and the
		// burst overflows the tunnel's queue of 1,024 as it would a
		// router's. Edges that drop steadily fail both rounds.
		for round := 1; ; round++ {
			packets, delivered := iperf3UDP(t, ctx, e)
			if packets > 0 && delivered >= 98 {
				return
			}
			if round == 2 {
				t.Errorf("iperf3 -u delivered %.2f %% of %d packets in round %d (and under 98 %% in round 1), want at least 98 %%", delivered, packets, round)
				return
			}
			t.Logf("round %d delivered %.2f %% of %d packets; trying once more", round, delivered, packets)
		}
	})
}

// iperf3UDP sends iperf3 -u at 50 Mbit/s for 5 s from the client to the
// server through the edges and returns the packets iperf3 sent and the
// percentage delivered. It logs the drops the edges and the kernel
// counted in the meantime.
func iperf3UDP(t *testing.T, ctx context.Context, e *edgeLab) (packets int, delivered float64) {
	t.Helper()
	l := e.l
	srv := l.Command(ctx, l.Server, "iperf3", "-s", "-1", "-B", "198.18.2.2", "-p", strconv.Itoa(iperf3Port))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Wait()
	time.Sleep(300 * time.Millisecond)
	// -l 1200: a 1,228-byte IP packet, which one tunnel datagram holds
	// (MaxDatagramBytes is about 1,430 at the default tunnel MTU);
	// iperf3's default for UDP (1,448) would be dropped as too big.
	// -w 4M: the server's socket buffer (iperf3 passes it on). On a busy
	// host the iperf3 server itself reads late, and its default 208 KiB
	// overflows (RcvbufErrors).
	kernelBefore := dropCounts(ctx, l)
	nearBefore, farBefore := datagramStats(t, e)
	ndBefore, fdBefore := tunnelDatagramDrops(e)
	cli := l.Command(ctx, l.Client, "iperf3", "-c", "198.18.2.2", "-p", strconv.Itoa(iperf3Port), "-u", "-b", "50M", "-t", "5", "-l", "1200", "-w", "4M", "-J")
	out, err := cli.Output()
	if err != nil {
		t.Fatalf("iperf3 -u: %v\n%s", err, out)
	}
	var r struct {
		End struct {
			Sum struct {
				Packets     int     `json:"packets"`
				LostPackets int     `json:"lost_packets"`
				LostPercent float64 `json:"lost_percent"`
				BitsPerSec  float64 `json:"bits_per_second"`
			} `json:"sum"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("iperf3 -J output: %v\n%s", err, out)
	}
	s := r.End.Sum
	near, far := datagramStats(t, e)
	nd, fd := tunnelDatagramDrops(e)
	t.Logf("iperf3 -u -b 50M -l 1200 -w 4M -t 5: %d packets, %d lost (%.2f %% delivered), %.1f Mbit/s; edges' drops in the meantime: near %+v, far %+v; tunnel datagram drops near %d, far %d; kernel drops %s",
		s.Packets, s.LostPackets, 100-s.LostPercent, s.BitsPerSec/1e6, dropsSince(nearBefore.Drops, near.Drops), dropsSince(farBefore.Drops, far.Drops), nd-ndBefore, fd-fdBefore, dropDelta(kernelBefore, dropCounts(ctx, l)))
	return s.Packets, 100 - s.LostPercent
}

// tunnelDatagramDrops returns each edge's tunnel datagram drops so far
// (0 where its status has no tunnel).
func tunnelDatagramDrops(e *edgeLab) (near, far uint64) {
	var ns, fs control.Status
	queryControl(e.sock("near"), "status", &ns)
	queryControl(e.sock("far"), "status", &fs)
	if ns.Tunnel != nil {
		near = ns.Tunnel.DatagramsDropped
	}
	if fs.Tunnel != nil {
		far = fs.Tunnel.DatagramsDropped
	}
	return near, far
}

// pingRounds pings dst from ns in rounds of count echoes, as pingIn, and
// returns the round with the least echo RTT: the first within 2 ms of the
// link's rtt, or the best of three. The echoes measure the host as well as
// the edges: under 'go test ./...' other packages' end-to-end tests share
// the cores. An edge that delays echoes at every round still fails
// checkPingRTT.
func pingRounds(t *testing.T, ns, dst string, count int, interval, rtt time.Duration) []time.Duration {
	t.Helper()
	var best []time.Duration
	for round := 1; round <= 3; round++ {
		rtts := pingIn(t, ns, dst, count, interval)
		least := slices.Min(rtts)
		if best == nil || least < slices.Min(best) {
			best = rtts
		}
		if least-rtt <= 2*time.Millisecond {
			break
		}
		t.Logf("ping round %d: %v, least %v above the link's %v", round, rtts, least-rtt, rtt)
	}
	return best
}

// checkPingRTT checks echo round trips against the link's rtt: the least
// must be at least rtt and within 2 ms above the higher of rtt and the
// tunnel's own least RTT sample (tunnelMin, 0 if unknown), as ping's
// minimum gives a path's RTT (a ping answered on the near side would take
// a fraction of a millisecond); the median within 10 ms above rtt. A busy
// host (packages side by side, under -race) delays some echoes in the
// edges' scheduling, and on a slow machine the tunnel itself measures
// more than the link's RTT, which the datagram path is not to blame for.
func checkPingRTT(t *testing.T, rtts []time.Duration, rtt, tunnelMin time.Duration) {
	t.Helper()
	sorted := slices.Clone(rtts)
	slices.Sort(sorted)
	least, med := sorted[0], sorted[len(sorted)/2]
	base := max(rtt, tunnelMin)
	if least < rtt || least-base > 2*time.Millisecond {
		t.Errorf("least echo RTT %v of %v: want within 2 ms above the link's %v (the tunnel's own least RTT %v)", least, rtts, rtt, tunnelMin)
	}
	if d := med - rtt; d < 0 || d > 10*time.Millisecond {
		t.Errorf("median echo RTT %v of %v: want within 10 ms above the link's %v", med, rtts, rtt)
	}
}

// datagramStats returns the near edge's datagram ingress and the far
// edge's egress counters.
func datagramStats(t *testing.T, e *edgeLab) (near, far dgram.Stats) {
	t.Helper()
	var ns, fs control.Status
	if err := queryControl(e.sock("near"), "status", &ns); err != nil {
		t.Fatal(err)
	}
	if err := queryControl(e.sock("far"), "status", &fs); err != nil {
		t.Fatal(err)
	}
	if ns.DatagramIngress == nil || fs.DatagramEgress == nil {
		t.Fatalf("status without datagram counters: near %v, far %v", ns.DatagramIngress, fs.DatagramEgress)
	}
	return *ns.DatagramIngress, *fs.DatagramEgress
}

// serveUDPEcho echoes UDP datagrams on 198.18.2.2:port in namespace ns
// until the test ends.
func serveUDPEcho(t *testing.T, ns string, port int) {
	t.Helper()
	serveUDPEchoAt(t, ns, netip.AddrPortFrom(netip.MustParseAddr("198.18.2.2"), uint16(port)))
}

// dialUDPIn opens a UDP socket in ns connected to 198.18.2.2:port, closed
// when the test ends.
func dialUDPIn(t *testing.T, ns string, port int) *net.UDPConn {
	t.Helper()
	return dialUDPTo(t, ns, netip.AddrPortFrom(netip.MustParseAddr("198.18.2.2"), uint16(port)))
}

// pingIn sends count ICMP (ICMPv6 if dst is IPv6) echo requests from a
// ping socket in ns to dst, interval apart, and returns each round trip.
// The client's kernel only hands the socket replies that carry its own
// echo identifier, so an answer arriving at all shows the far edge
// restored it.
func pingIn(t *testing.T, ns, dst string, count int, interval time.Duration) []time.Duration {
	t.Helper()
	network, laddr, proto := "udp4", "0.0.0.0", 1
	var echo, reply icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if net.ParseIP(dst).To4() == nil {
		network, laddr, proto = "udp6", "::", 58
		echo, reply = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	var c *icmp.PacketConn
	err := lab.InNetns(ns, func() error {
		var err error
		c, err = icmp.ListenPacket(network, laddr)
		return err
	})
	if err != nil {
		t.Fatalf("ping socket in %s: %v", ns, err)
	}
	defer c.Close()
	to := &net.UDPAddr{IP: net.ParseIP(dst)}
	var rtts []time.Duration
	buf := make([]byte, 1500)
	for seq := 1; seq <= count; seq++ {
		msg := icmp.Message{Type: echo, Body: &icmp.Echo{ID: 1, Seq: seq, Data: []byte("wanopt datagram ping")}}
		b, err := msg.Marshal(nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := c.WriteTo(b, to); err != nil {
			t.Fatalf("ping %d: %v", seq, err)
		}
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				t.Fatalf("ping %d: no reply: %v", seq, err)
			}
			m, err := icmp.ParseMessage(proto, buf[:n])
			if err != nil {
				t.Fatalf("ping %d: %v", seq, err)
			}
			if e, ok := m.Body.(*icmp.Echo); ok && m.Type == reply && e.Seq == seq {
				if string(e.Data) != "wanopt datagram ping" {
					t.Errorf("ping %d: reply data %q", seq, e.Data)
				}
				rtts = append(rtts, time.Since(start))
				break
			}
		}
		time.Sleep(interval)
	}
	if len(rtts) != count {
		t.Fatalf("%d of %d replies", len(rtts), count)
	}
	return rtts
}

// dropCounts returns the kernel's drop counters in each of the lab's
// namespaces, keyed "host iface rx|tx" and "host udp Counter" (only
// counters above 0): where a datagram the edges did not count was lost
// (a TUN queue the edge read too late, a socket buffer the server read
// too late).
func dropCounts(ctx context.Context, l *lab.Lab) map[string]uint64 {
	m := map[string]uint64{}
	for _, h := range l.Hosts() {
		out, err := exec.CommandContext(ctx, "ip", "-n", h.NS, "-j", "-s", "link", "show").Output()
		if err == nil {
			var links []struct {
				Name  string `json:"ifname"`
				Stats struct {
					RX struct{ Dropped uint64 } `json:"rx"`
					TX struct{ Dropped uint64 } `json:"tx"`
				} `json:"stats64"`
			}
			if json.Unmarshal(out, &links) == nil {
				for _, k := range links {
					if k.Stats.RX.Dropped > 0 {
						m[h.Role+" "+k.Name+" rx"] = k.Stats.RX.Dropped
					}
					if k.Stats.TX.Dropped > 0 {
						m[h.Role+" "+k.Name+" tx"] = k.Stats.TX.Dropped
					}
				}
			}
		}
		out, err = exec.CommandContext(ctx, "ip", "netns", "exec", h.NS, "cat", "/proc/net/snmp").Output()
		if err != nil {
			continue
		}
		for name, n := range harness.ProcNetCounters(string(out), "Udp") {
			if strings.HasSuffix(name, "Errors") && n > 0 {
				m[h.Role+" udp "+name] = n
			}
		}
	}
	return m
}

// dropDelta formats what grew from before to after, "none" if nothing.
func dropDelta(before, after map[string]uint64) string {
	var s []string
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			s = append(s, fmt.Sprintf("%s +%d", k, d))
		}
	}
	if len(s) == 0 {
		return "none"
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// dropsSince returns the drops counted between two readings.
func dropsSince(before, after dgram.Drops) dgram.Drops {
	d := after
	b, v := reflect.ValueOf(before), reflect.ValueOf(&d).Elem()
	for i := range v.NumField() {
		v.Field(i).SetUint(v.Field(i).Uint() - b.Field(i).Uint())
	}
	return d
}
