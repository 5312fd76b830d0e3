package metrics

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/wanopt/wanopt/dgram"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/internal/tcptest"
	"github.com/wanopt/wanopt/stack"
)

// sample is a status with every figure set apart from the others.
func sample() control.Status {
	return control.Status{
		Tunnel: &control.Tunnel{SmoothedRTT: 101 * time.Millisecond, MinRTT: 100 * time.Millisecond,
			BandwidthBps: 240e6, RecvRateBps: 8e6, PacingRateBps: 248e6, Cwnd: 6 << 20, InFlight: 5 << 20,
			BBRMode: "probe_bw_cruise", BytesSent: 1000, BytesReceived: 2000, PacketsSent: 10, PacketsReceived: 20,
			PacketsLost: 3, Retransmitted: 4500, PTOs: 2, HandshakeAge: 90 * time.Second, Rekeys: 7, StreamsOpen: 5,
			BudgetUsedBytes: 1 << 20, BudgetBytes: 96 << 20, DroppedUnauthenticated: 11, DroppedReplays: 12,
			HandshakeReplays: 13, HandshakesRefused: 14, HandshakesBadMAC: 15, HandshakesRateLimited: 16,
			ResumesDeclined: 17, CookiesSent: 18, ClientRestarts: 19, RejectsSent: 20,
			PathMTUBytes: 1252, PMTUProbesLost: 21, PMTUBlackHoles: 22},
		Ingress: &stack.Stats{ActiveFlows: 3, Dialed: 30, Refused: 1, OverBudget: 2, TUNPacketsIn: 100, TUNPacketsOut: 90, TUNDrops: 4},
		Memory:  control.Memory{Flows: 3, MaxFlows: 1293, FloorBytes: 152 << 10, GrantedBytes: 7 << 20, GrantLimitBytes: 96 << 20, Grants: 9, GrantsRefused: 1},
		DatagramIngress: &dgram.Stats{UDP: dgram.ProtoStats{PacketsUp: 31, BytesUp: 3100, PacketsDown: 32, BytesDown: 3200},
			ICMP:  dgram.ProtoStats{PacketsUp: 33, BytesUp: 3300, PacketsDown: 34, BytesDown: 3400},
			Drops: dgram.Drops{TooBig: 35, NoTunnel: 36}, TooBigAnswered: 30, TooBigLimited: 5},
		DatagramEgress: &dgram.Stats{UDP: dgram.ProtoStats{PacketsUp: 41, BytesUp: 4100, PacketsDown: 42, BytesDown: 4200},
			Flows: 43, Drops: dgram.Drops{NotAllowed: 44, FlowLimit: 45, SocketErrors: 46}},
	}
}

func TestCollect(t *testing.T) {
	st := sample()
	reg := Registry(func() control.Status { return st }, "PEERKEY")
	for _, tc := range []struct {
		name, want string
	}{
		{"wanopt_peer_delivery_rate_bytes_per_second", `wanopt_peer_delivery_rate_bytes_per_second{peer="PEERKEY"} 3e+07`},
		{"wanopt_peer_rtt_seconds", `wanopt_peer_rtt_seconds{peer="PEERKEY"} 0.101`},
		{"wanopt_peer_handshake_age_seconds", `wanopt_peer_handshake_age_seconds{peer="PEERKEY"} 90`},
		{"wanopt_peer_bbr_state", `wanopt_peer_bbr_state{peer="PEERKEY",state="probe_bw_cruise"} 1`},
		{"wanopt_peer_bbr_state", `wanopt_peer_bbr_state{peer="PEERKEY",state="startup"} 0`},
		{"wanopt_peer_packets_total", `wanopt_peer_packets_total{direction="received",peer="PEERKEY"} 20`},
		{"wanopt_peer_path_mtu_bytes", `wanopt_peer_path_mtu_bytes{peer="PEERKEY"} 1252`},
		{"wanopt_peer_pmtu_probes_lost_total", `wanopt_peer_pmtu_probes_lost_total{peer="PEERKEY"} 21`},
		{"wanopt_peer_pmtu_black_holes_total", `wanopt_peer_pmtu_black_holes_total{peer="PEERKEY"} 22`},
		{"wanopt_flows_refused_total", `wanopt_flows_refused_total{reason="over_budget",side="ingress"} 2`},
		{"wanopt_tun_dropped_packets_total", `wanopt_tun_dropped_packets_total 4`},
		{"wanopt_memory_granted_bytes", `wanopt_memory_granted_bytes 7.340032e+06`},
		{"wanopt_peer_datagram_packets_total", `wanopt_peer_datagram_packets_total{direction="down",peer="PEERKEY",protocol="icmp",side="ingress"} 34`},
		{"wanopt_peer_datagram_packets_total", `wanopt_peer_datagram_packets_total{direction="up",peer="PEERKEY",protocol="udp",side="egress"} 41`},
		{"wanopt_peer_datagram_bytes_total", `wanopt_peer_datagram_bytes_total{direction="down",peer="PEERKEY",protocol="udp",side="egress"} 4200`},
		{"wanopt_peer_datagram_dropped_packets_total", `wanopt_peer_datagram_dropped_packets_total{peer="PEERKEY",reason="no_tunnel",side="ingress"} 36`},
		{"wanopt_peer_datagram_dropped_packets_total", `wanopt_peer_datagram_dropped_packets_total{peer="PEERKEY",reason="socket_error",side="egress"} 46`},
		{"wanopt_peer_datagram_flows", `wanopt_peer_datagram_flows{peer="PEERKEY"} 43`},
		{"wanopt_peer_datagram_too_big_answers_total", `wanopt_peer_datagram_too_big_answers_total{peer="PEERKEY",result="rate_limited"} 5`},
	} {
		text := gatherText(t, reg, tc.name)
		if !strings.Contains(text, tc.want+"\n") {
			t.Errorf("%s: want a line %q in:\n%s", tc.name, tc.want, text)
		}
	}
	// A hub: one series per branch, by name.
	hub := st
	hub.Peers = []control.Peer{{Name: "paris", Tunnel: st.Tunnel}, {Name: "lyon"}}
	hreg := Registry(func() control.Status { return hub }, "")
	if text := gatherText(t, hreg, "wanopt_peer_up"); !strings.Contains(text, `wanopt_peer_up{peer="paris"} 1`) || !strings.Contains(text, `wanopt_peer_up{peer="lyon"} 0`) {
		t.Errorf("hub:\n%s", text)
	}
	// A hub: datagrams per branch, never the edge's sum besides.
	hub.DatagramIngress = nil
	hub.Peers[1].Datagrams = &dgram.Stats{ICMP: dgram.ProtoStats{PacketsUp: 7}, Flows: 2}
	names := []string{"wanopt_peer_datagram_packets_total", "wanopt_peer_datagram_flows", "wanopt_datagram_packets_total", "wanopt_datagram_flows"}
	if text := gatherText(t, hreg, names...); !strings.Contains(text, `wanopt_peer_datagram_packets_total{direction="up",peer="lyon",protocol="icmp",side="egress"} 7`+"\n") ||
		!strings.Contains(text, `wanopt_peer_datagram_flows{peer="lyon"} 2`+"\n") || strings.Contains(text, `peer="paris"`) || strings.Contains(text, "wanopt_datagram_") {
		t.Errorf("hub datagrams:\n%s", text)
	}
	// Upstreams: the datagrams are the edge's, without a peer label.
	ups := st
	ups.Peers = []control.Peer{{Name: "dc1", Tunnel: st.Tunnel}, {Name: "dc2"}}
	ureg := Registry(func() control.Status { return ups }, "")
	if text := gatherText(t, ureg, names...); !strings.Contains(text, `wanopt_datagram_packets_total{direction="up",protocol="udp",side="ingress"} 31`+"\n") ||
		!strings.Contains(text, "wanopt_datagram_flows 43\n") || strings.Contains(text, "wanopt_peer_datagram") {
		t.Errorf("upstream datagrams:\n%s", text)
	}
	// With the tunnel down the peer is down and its other series are gone.
	st.Tunnel = nil
	if text := gatherText(t, reg, "wanopt_peer_up", "wanopt_peer_rtt_seconds"); !strings.Contains(text, `wanopt_peer_up{peer="PEERKEY"} 0`) || strings.Contains(text, "wanopt_peer_rtt_seconds{") {
		t.Errorf("tunnel down:\n%s", text)
	}
}

// gatherText returns the text exposition of the named metrics.
func gatherText(t *testing.T, reg *prometheus.Registry, names ...string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if slices.Contains(names, mf.GetName()) {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b.String()
}

// TestLint: the exposition passes the Prometheus linter, and promtool's
// check when promtool is installed (Debian's prometheus package).
func TestLint(t *testing.T) {
	st := sample()
	reg := Registry(func() control.Status { return st }, "PEERKEY")
	// A hub's and an upstream edge's series are linted too.
	hub, ups := sample(), sample()
	hub.Peers = []control.Peer{{Name: "paris", Tunnel: st.Tunnel, Datagrams: st.DatagramEgress}, {Name: "lyon", Datagrams: &dgram.Stats{}}}
	ups.Peers = []control.Peer{{Name: "dc1", Tunnel: st.Tunnel}}
	for _, s := range []control.Status{st, hub, ups} {
		problems, err := testutil.GatherAndLint(Registry(func() control.Status { return s }, "PEERKEY"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, stop, err := Serve(ctx, "127.0.0.1:0", reg, tcptest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "wanopt_peer_up") {
		t.Fatalf("GET /metrics: %v %v\n%.500s", resp.Status, err, body)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed (apt-get install prometheus): checked with the client library's linter only")
		return
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(string(body))
	cmd.Stderr = os.Stderr
	if out, err := cmd.Output(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
