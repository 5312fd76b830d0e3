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
	"sync/atomic"
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
		Role: "initiator", PeerName: "paris", PeerKey: "PEERKEY",
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
	reg := Registry(func() control.Status { return st })
	for _, tc := range []struct {
		name, want string
	}{
		{"wanopt_peer_delivery_rate_bytes_per_second", `wanopt_peer_delivery_rate_bytes_per_second{peer="paris"} 3e+07`},
		{"wanopt_peer_rtt_seconds", `wanopt_peer_rtt_seconds{peer="paris"} 0.101`},
		{"wanopt_peer_handshake_age_seconds", `wanopt_peer_handshake_age_seconds{peer="paris"} 90`},
		{"wanopt_peer_bbr_state", `wanopt_peer_bbr_state{peer="paris",state="probe_bw_cruise"} 1`},
		{"wanopt_peer_bbr_state", `wanopt_peer_bbr_state{peer="paris",state="startup"} 0`},
		{"wanopt_peer_packets_total", `wanopt_peer_packets_total{direction="down",peer="paris"} 20`},
		{"wanopt_peer_packets_total", `wanopt_peer_packets_total{direction="up",peer="paris"} 10`},
		{"wanopt_peer_info", `wanopt_peer_info{peer="paris",public_key="PEERKEY"} 1`},
		{"wanopt_tun_packets_total", `wanopt_tun_packets_total{direction="up"} 100`},
		{"wanopt_peer_path_mtu_bytes", `wanopt_peer_path_mtu_bytes{peer="paris"} 1252`},
		{"wanopt_peer_pmtu_probes_lost_total", `wanopt_peer_pmtu_probes_lost_total{peer="paris"} 21`},
		{"wanopt_peer_pmtu_black_holes_total", `wanopt_peer_pmtu_black_holes_total{peer="paris"} 22`},
		{"wanopt_flows_refused_total", `wanopt_flows_refused_total{reason="over_budget",side="ingress"} 2`},
		{"wanopt_tun_dropped_packets_total", `wanopt_tun_dropped_packets_total 4`},
		{"wanopt_memory_granted_bytes", `wanopt_memory_granted_bytes 7.340032e+06`},
		{"wanopt_peer_datagram_packets_total", `wanopt_peer_datagram_packets_total{direction="down",peer="paris",protocol="icmp",side="ingress"} 34`},
		{"wanopt_peer_datagram_packets_total", `wanopt_peer_datagram_packets_total{direction="up",peer="paris",protocol="udp",side="egress"} 41`},
		{"wanopt_peer_datagram_bytes_total", `wanopt_peer_datagram_bytes_total{direction="down",peer="paris",protocol="udp",side="egress"} 4200`},
		{"wanopt_peer_datagram_dropped_packets_total", `wanopt_peer_datagram_dropped_packets_total{peer="paris",reason="no_tunnel",side="ingress"} 36`},
		{"wanopt_peer_datagram_dropped_packets_total", `wanopt_peer_datagram_dropped_packets_total{peer="paris",reason="socket_error",side="egress"} 46`},
		{"wanopt_peer_datagram_flows", `wanopt_peer_datagram_flows{peer="paris"} 43`},
		{"wanopt_peer_datagram_too_big_answers_total", `wanopt_peer_datagram_too_big_answers_total{peer="paris",result="rate_limited"} 5`},
	} {
		text := gatherText(t, reg, tc.name)
		if !strings.Contains(text, tc.want+"\n") {
			t.Errorf("%s: want a line %q in:\n%s", tc.name, tc.want, text)
		}
	}
	// A hub: one series per branch, by name; what the initiator sends is
	// up.
	hub := st
	hub.Role, hub.PeerName, hub.PeerKey = "responder", "", ""
	hub.Peers = []control.Peer{{Name: "paris", Key: "KEYP", Tunnel: st.Tunnel}, {Name: "lyon", Key: "KEYL"}}
	hreg := Registry(func() control.Status { return hub })
	if text := gatherText(t, hreg, "wanopt_peer_up"); !strings.Contains(text, `wanopt_peer_up{peer="paris"} 1`) || !strings.Contains(text, `wanopt_peer_up{peer="lyon"} 0`) {
		t.Errorf("hub:\n%s", text)
	}
	if text := gatherText(t, hreg, "wanopt_peer_packets_total", "wanopt_peer_info"); !strings.Contains(text, `wanopt_peer_packets_total{direction="up",peer="paris"} 20`) ||
		!strings.Contains(text, `wanopt_peer_info{peer="lyon",public_key="KEYL"} 1`) {
		t.Errorf("hub directions and keys:\n%s", text)
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
	ureg := Registry(func() control.Status { return ups })
	if text := gatherText(t, ureg, names...); !strings.Contains(text, `wanopt_datagram_packets_total{direction="up",protocol="udp",side="ingress"} 31`+"\n") ||
		!strings.Contains(text, "wanopt_datagram_flows 43\n") || strings.Contains(text, "wanopt_peer_datagram") {
		t.Errorf("upstream datagrams:\n%s", text)
	}
	// With the tunnel down the peer is down and its other series are gone.
	st.Tunnel = nil
	if text := gatherText(t, reg, "wanopt_peer_up", "wanopt_peer_rtt_seconds"); !strings.Contains(text, `wanopt_peer_up{peer="paris"} 0`) || strings.Contains(text, "wanopt_peer_rtt_seconds{") {
		t.Errorf("tunnel down:\n%s", text)
	}
}

// TestSeriesWithoutSample: before the tunnel's first RTT sample the RTT
// gauges are absent (not the initial 333 ms guess); the build and the
// refused handshakes are there from the start.
func TestSeriesWithoutSample(t *testing.T) {
	st := sample()
	st.Tunnel.SmoothedRTT, st.Tunnel.MinRTT = 333*time.Millisecond, 0
	st.Refused = &control.Refused{UnknownKey: 3, BadMAC: 1}
	st.TunnelState = &control.TunnelState{State: "up", HandshakeAttempts: 0, LastHandshake: time.Unix(1700000000, 0)}
	reg := Registry(func() control.Status { return st })
	text := gatherText(t, reg, "wanopt_peer_rtt_seconds", "wanopt_peer_min_rtt_seconds", "wanopt_peer_up", "wanopt_build_info",
		"wanopt_handshakes_refused_total", "wanopt_peer_last_handshake_timestamp_seconds", "wanopt_peer_handshake_attempts")
	for _, want := range []string{`wanopt_peer_up{peer="paris"} 1`, `wanopt_handshakes_refused_total{reason="unknown_key"} 3`,
		`wanopt_handshakes_refused_total{reason="bad_mac"} 1`, `wanopt_peer_last_handshake_timestamp_seconds{peer="paris"} 1.7e+09`,
		`wanopt_peer_handshake_attempts{peer="paris"} 0`, `wanopt_build_info{goversion="go`} {
		if !strings.Contains(text, want) {
			t.Errorf("want %q in:\n%s", want, text)
		}
	}
	if strings.Contains(text, "rtt_seconds{") {
		t.Errorf("RTT gauges before the first sample:\n%s", text)
	}
	st.Tunnel.MinRTT = 20 * time.Millisecond
	if text := gatherText(t, reg, "wanopt_peer_rtt_seconds"); !strings.Contains(text, `wanopt_peer_rtt_seconds{peer="paris"} 0.333`) {
		t.Errorf("RTT after a sample:\n%s", text)
	}
}

// TestNames: every series the collector exports is listed by Names (the
// dist/prometheus rules are checked against it), and Names lists no
// other.
func TestNames(t *testing.T) {
	hub, ups := sample(), sample()
	hub.Role, hub.Refused = "responder", &control.Refused{}
	hub.Peers = []control.Peer{{Name: "paris", Key: "K", Tunnel: hub.Tunnel, Datagrams: hub.DatagramEgress, TunnelState: &control.TunnelState{LastHandshake: time.Now()}}}
	ups.Peers = []control.Peer{{Name: "dc1", Tunnel: ups.Tunnel}}
	seen := map[string]bool{}
	for _, s := range []control.Status{sample(), hub, ups} {
		mfs, err := Registry(func() control.Status { return s }).Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if strings.HasPrefix(mf.GetName(), "wanopt_") {
				seen[mf.GetName()] = true
			}
		}
	}
	for n := range seen {
		if !slices.Contains(Names(), n) {
			t.Errorf("%s is exported but not in Names", n)
		}
	}
	for _, n := range Names() {
		if !seen[n] {
			t.Errorf("%s is in Names but no sample status exports it", n)
		}
	}
}

// TestHealth: /healthz answers while the server runs; /readyz follows
// the readiness function, with its reason when not ready.
func TestHealth(t *testing.T) {
	var ready atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, stop, err := Serve(ctx, "127.0.0.1:0", prometheus.NewRegistry(), func() (bool, string) {
		if ready.Load() {
			return true, ""
		}
		return false, "tunnel to 192.0.2.2:4500 down since 12s: no answer to 3 handshakes"
	}, tcptest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		ready bool
		path  string
		code  int
		body  string
	}{
		{false, "/healthz", 200, "ok\n"},
		{false, "/readyz", 503, "tunnel to 192.0.2.2:4500 down since 12s: no answer to 3 handshakes\n"},
		{true, "/readyz", 200, "ready\n"},
		{true, "/healthz", 200, "ok\n"},
	} {
		ready.Store(c.ready)
		if code, body := get(c.path); code != c.code || body != c.body {
			t.Errorf("ready %v: GET %s = %d %q, want %d %q", c.ready, c.path, code, body, c.code, c.body)
		}
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
	reg := Registry(func() control.Status { return st })
	// A hub's and an upstream edge's series are linted too.
	hub, ups := sample(), sample()
	hub.Peers = []control.Peer{{Name: "paris", Tunnel: st.Tunnel, Datagrams: st.DatagramEgress}, {Name: "lyon", Datagrams: &dgram.Stats{}}}
	ups.Peers = []control.Peer{{Name: "dc1", Tunnel: st.Tunnel}}
	for _, s := range []control.Status{st, hub, ups} {
		problems, err := testutil.GatherAndLint(Registry(func() control.Status { return s }))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, stop, err := Serve(ctx, "127.0.0.1:0", reg, nil, tcptest.Logger())
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
