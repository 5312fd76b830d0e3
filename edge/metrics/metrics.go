// Package metrics exports an edge's status as Prometheus metrics (wanopt
// run --metrics ADDR), beside the health checks /healthz and /readyz
// (Serve). The collector reads one status snapshot per scrape
// (edge/control's schema, the same 'wanopt status' shows), so the metrics
// cost nothing between scrapes and never disagree with the status.
//
// Names follow the Prometheus conventions: the wanopt_ prefix, base units
// (seconds, bytes), _total for counters. Per-peer series carry a peer
// label, always the peer's name (a hub's branch's, an upstream's, or the
// one peer's --peer-name, "peer" by default); wanopt_peer_info maps each
// name to its public key. A direction label is up (client to server:
// near edge to far edge, toward the servers) or down, at either edge.
// Flows are counted per edge, never per flow, so the number of series
// stays bounded. Series without a sample yet (the RTT before the first
// acknowledgement) are absent rather than a made-up value. The datagrams (UDP and
// ping) are counted per peer where a peer owns them (the one peer; a
// hub's branch: wanopt_peer_datagram_*), else per edge (a near edge's
// upstreams share its ingress: wanopt_datagram_*). The tunnel's counters
// restart at zero when a new tunnel replaces the old one (Prometheus reads
// that as a counter reset).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/wanopt/wanopt/cc"
	"github.com/wanopt/wanopt/dgram"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/internal/version"
)

// Registry returns a registry with the edge's collector, reading status
// at each scrape, and the Go runtime's and the process's collectors.
func Registry(status func() control.Status) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{status: status},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Names lists the names of every wanopt_ metric the edge's collector may
// export (those of a near edge, a far edge, a hub and upstreams alike):
// the alert rules and dashboards in dist/prometheus are checked against
// it. The Go runtime's (go_) and process's (process_) are not included.
func Names() []string { return slices.Sorted(slices.Values(names)) }

// Ready reports whether the edge carries flows, and why not (edge.Near.Ready, edge.Far.Ready, edge.Hub.Ready).
type Ready func() (ready bool, reason string)

// Serve serves reg's metrics on http://addr/metrics until ctx ends or
// stop is called (which waits for the server to close), and two health
// checks: /healthz answers 200 "ok" while the process serves, /readyz 200
// "ready" while ready says so, else 503 with its reason (one line), for
// load balancers and ECMP health checks. A nil ready is always ready. It
// returns once it listens, with the address it listens on (addr's port
// may be 0).
func Serve(ctx context.Context, addr string, reg *prometheus.Registry, ready Ready, log *slog.Logger) (bound string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("metrics: listen on %s: %w (choose a free address, e.g. 127.0.0.1:9550)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { plain(w, http.StatusOK, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready != nil {
			if ok, why := ready(); !ok {
				plain(w, http.StatusServiceUnavailable, why)
				return
			}
		}
		plain(w, http.StatusOK, "ready")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server stopped", "err", err)
		}
	}()
	unhook := context.AfterFunc(ctx, func() { srv.Close() })
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics", "health", "/healthz", "readiness", "/readyz")
	return ln.Addr().String(), func() { unhook(); srv.Close(); <-done }, nil
}

// plain answers a health check: status and one line of text, never
// cached.
func plain(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	fmt.Fprintln(w, text)
}

// collector turns a status snapshot into metrics.
type collector struct {
	status func() control.Status
}

// names are the wanopt_ metrics' names (desc adds each).
var names []string

// desc makes a metric description; the per-peer ones start with the peer
// label.
func desc(name, help string, labels ...string) *prometheus.Desc {
	names = append(names, "wanopt_"+name)
	return prometheus.NewDesc("wanopt_"+name, help, labels, nil)
}

var (
	buildInfo       = desc("build_info", "1, labelled with the running build: module version, commit and Go release.", "version", "revision", "goversion")
	peerInfo        = desc("peer_info", "1 for each configured peer, labelled with its name and public key.", "peer", "public_key")
	peerUp          = desc("peer_up", "1 while the tunnel to the peer is up.", "peer")
	peerAttempts    = desc("peer_handshake_attempts", "Handshake initiations this edge sent since the tunnel to the peer was last up (an initiator's; 0 while up).", "peer")
	peerLastHS      = desc("peer_last_handshake_timestamp_seconds", "When the last handshake or rekey with the peer completed, in seconds since the Unix epoch (absent before the first).", "peer")
	peerRTT         = desc("peer_rtt_seconds", "The tunnel's smoothed round-trip time (absent before the first sample).", "peer")
	peerMinRTT      = desc("peer_min_rtt_seconds", "The tunnel's minimum round-trip time (absent before the first sample).", "peer")
	peerDelivery    = desc("peer_delivery_rate_bytes_per_second", "The congestion controller's estimate of the rate the path delivers toward the peer (BBR's bottleneck bandwidth).", "peer")
	peerRecvRate    = desc("peer_receive_rate_bytes_per_second", "The rate at which the peer delivers stream data to this edge, measured.", "peer")
	peerPacing      = desc("peer_pacing_rate_bytes_per_second", "The tunnel's pacing rate toward the peer.", "peer")
	peerRateCap     = desc("peer_rate_cap_bytes_per_second", "The cap a hub's --hub-rate puts on the tunnel's pace toward the peer (its fair share of the link); 0 without one.", "peer")
	peerCwnd        = desc("peer_congestion_window_bytes", "The tunnel's congestion window.", "peer")
	peerInFlight    = desc("peer_in_flight_bytes", "Bytes sent to the peer and not yet acknowledged.", "peer")
	peerBBRState    = desc("peer_bbr_state", "1 for BBR's current state, 0 for the others (BBR only).", "peer", "state")
	peerBytes       = desc("peer_bytes_total", "UDP payload bytes exchanged with the peer, by direction (up: near edge to far edge).", "peer", "direction")
	peerPackets     = desc("peer_packets_total", "Packets exchanged with the peer, by direction (up: near edge to far edge).", "peer", "direction")
	peerLost        = desc("peer_lost_packets_total", "Packets to the peer declared lost.", "peer")
	peerRetrans     = desc("peer_retransmitted_bytes_total", "Stream bytes sent to the peer again after a loss.", "peer")
	peerPTOs        = desc("peer_probe_timeouts_total", "Probe timeouts of the tunnel (an outage shows as a run of them).", "peer")
	peerHandshake   = desc("peer_handshake_age_seconds", "Time since the session in use was keyed (handshake or rekey).", "peer")
	peerRekeys      = desc("peer_rekeys_total", "Sessions replaced by a rekey.", "peer")
	peerStreams     = desc("peer_streams_open", "Tunnel streams open, both directions.", "peer")
	peerStreamBuf   = desc("peer_stream_buffer_bytes", "Memory the tunnel's stream buffers and windows hold.", "peer")
	peerStreamLimit = desc("peer_stream_buffer_limit_bytes", "The tunnel's stream memory budget.", "peer")
	peerUnread      = desc("peer_stream_unread_bytes", "Bytes the peer sent on the flows' streams that the flows have not taken yet.", "peer")
	peerDropped     = desc("peer_dropped_packets_total", "Datagrams dropped before use, by reason: unauthenticated, replayed.", "peer", "reason")
	peerHandshakes  = desc("peer_handshakes_refused_total", "Handshake initiations the peer's tunnel did not answer while it was up, by reason: replay, refused (key or state), bad_mac, rate_limited, resume_declined.", "peer", "reason")
	refused         = desc("handshakes_refused_total", "Handshake initiations this edge (a far edge or hub) refused over its life, up or down, by reason: bad_mac (the initiator lacks this edge's public key), unauthenticated, unknown_key (this edge lacks the initiator's), replay, rate_limited.", "reason")
	peerCookies     = desc("peer_cookies_sent_total", "Cookie replies sent under handshake load.", "peer")
	peerRestarts    = desc("peer_client_restarts_total", "Sessions replaced because the client restarted.", "peer")
	peerRejects     = desc("peer_rejects_sent_total", "REJECTs sent for data of a session this edge does not hold.", "peer")
	peerPathMTU     = desc("peer_path_mtu_bytes", "UDP payload size of the tunnel's packets toward the peer: the largest the path was found to carry (path MTU discovery).", "peer")
	peerPMTULost    = desc("peer_pmtu_probes_lost_total", "Path MTU probes lost (three per size too big for the path).", "peer")
	peerPMTUHoles   = desc("peer_pmtu_black_holes_total", "Falls back to the base packet size after full-size packets vanished on the path.", "peer")

	flowsOpen    = desc("flows_open", "Flows open now, by side: ingress (intercepted here) or egress (connected here).", "side")
	flowsTotal   = desc("flows_total", "Flows established, by side.", "side")
	flowsRefused = desc("flows_refused_total", "Flows not established, by side and reason.", "side", "reason")
	flowsIdle    = desc("flows_idle_timeouts_total", "Flows reset after the idle timeout, by side.", "side")
	egressBytes  = desc("egress_bytes_total", "Bytes the egress relayed, by direction (up: toward the servers).", "direction")

	tunPackets = desc("tun_packets_total", "Packets (a GRO or TSO segment once) the netstack exchanged with the TUN device, by direction (up: the clients' toward the servers; down: the answers).", "direction")
	tunDrops   = desc("tun_dropped_packets_total", "Packets from the TUN device the netstack could not use (not TCP, malformed) or could not send.")

	memFlows       = desc("memory_flows", "Flows holding their memory floor.")
	memMaxFlows    = desc("memory_max_flows", "Flows the memory budget admits at once.")
	memFloor       = desc("memory_flow_floor_bytes", "Memory each admitted flow reserves.")
	memGranted     = desc("memory_granted_bytes", "Memory lent to streaming flows for large buffers.")
	memGrantLimit  = desc("memory_grant_limit_bytes", "The most that may be lent to streaming flows.")
	memGrants      = desc("memory_grants_total", "Grants of large buffers taken.")
	memGrantsFewer = desc("memory_grants_refused_total", "Times a streaming flow asked for large buffers and was held to its floor.")
)

// dgramDescs are the datagram series (UDP and ping, package dgram), per
// peer or per edge.
type dgramDescs struct{ packets, bytes, dropped, flows, tooBig *prometheus.Desc }

// newDgramDescs makes the datagram series, named prefix+"datagram_...",
// with labels first.
func newDgramDescs(prefix string, labels ...string) dgramDescs {
	l := func(more ...string) []string { return append(append([]string(nil), labels...), more...) }
	return dgramDescs{
		packets: desc(prefix+"datagram_packets_total", "UDP and ICMP echo packets, and the packets of TCP flows a near rule passes, carried as tunnel datagrams, by side (ingress: the clients' here; egress: sent on to the servers from here), protocol (udp, icmp, tcp) and direction (up: toward the servers; down: the answers).", l("side", "protocol", "direction")...),
		bytes:   desc(prefix+"datagram_bytes_total", "IP packet bytes of the datagram packets, by side, protocol and direction.", l("side", "protocol", "direction")...),
		dropped: desc(prefix+"datagram_dropped_packets_total", "Datagram packets dropped, by side and reason: not_allowed, too_big, queue_full, malformed, unsupported, no_tunnel, flow_limit, policy (a near rule drops them), unmatched (an answer at a far edge with transparent egress to no flow it sent on), socket_error.", l("side", "reason")...),
		flows:   desc(prefix+"datagram_flows", "Datagram flows (UDP or ping sockets) the egress holds open now.", labels...),
		tooBig:  desc(prefix+"datagram_too_big_answers_total", "Packets too big for a tunnel datagram, by whether the client was sent an ICMP packet-too-big answer (sent) or the answers' rate limit held it back (rate_limited).", l("result")...),
	}
}

var (
	peerDgram = newDgramDescs("peer_", "peer")
	edgeDgram = newDgramDescs("")
)

// collectDatagrams emits d's series for the datagram stats s (nil: none)
// of one side, after the labels (the peer's, or none).
func collectDatagrams(gauge func(*prometheus.Desc, float64, ...string), counter func(*prometheus.Desc, uint64, ...string), d dgramDescs, side string, s *dgram.Stats, labels ...string) {
	if s == nil {
		return
	}
	l := func(more ...string) []string { return append(append([]string(nil), labels...), more...) }
	for _, p := range []struct {
		name string
		s    dgram.ProtoStats
	}{{"udp", s.UDP}, {"icmp", s.ICMP}, {"tcp", s.TCP}} {
		counter(d.packets, p.s.PacketsUp, l(side, p.name, "up")...)
		counter(d.packets, p.s.PacketsDown, l(side, p.name, "down")...)
		counter(d.bytes, p.s.BytesUp, l(side, p.name, "up")...)
		counter(d.bytes, p.s.BytesDown, l(side, p.name, "down")...)
	}
	x := s.Drops
	for _, r := range []struct {
		reason string
		n      uint64
	}{{"not_allowed", x.NotAllowed}, {"too_big", x.TooBig}, {"queue_full", x.QueueFull}, {"malformed", x.Malformed},
		{"unsupported", x.Unsupported}, {"no_tunnel", x.NoTunnel}, {"flow_limit", x.FlowLimit}, {"policy", x.Policy}, {"unmatched", x.Unmatched}, {"socket_error", x.SocketErrors}} {
		counter(d.dropped, r.n, l(side, r.reason)...)
	}
	if side == "egress" {
		gauge(d.flows, float64(s.Flows), labels...)
	} else {
		counter(d.tooBig, s.TooBigAnswered, l("sent")...)
		counter(d.tooBig, s.TooBigLimited, l("rate_limited")...)
	}
}

// Describe sends nothing: the collector is unchecked, as its per-peer
// series come and go with the tunnel.
func (c *collector) Describe(chan<- *prometheus.Desc) {}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(buildInfo, 1, version.Version(), version.Revision(), version.GoVersion())
	// Traffic toward the far edge is up: the near edge (the initiator)
	// sends it, the far edge receives it.
	dir := directions{sent: "down", received: "up"}
	if s.Role == "initiator" {
		dir = directions{sent: "up", received: "down"}
	}
	if len(s.Peers) > 0 { // a hub or upstreams: one series per peer, by name
		perPeer := false
		for _, p := range s.Peers {
			gauge(peerInfo, 1, p.Name, p.Key)
			collectPeer(gauge, counter, dir, p.Name, p.Tunnel, p.TunnelState)
			// A hub's branch has its own datagram egress.
			collectDatagrams(gauge, counter, peerDgram, "egress", p.Datagrams, p.Name)
			perPeer = perPeer || p.Datagrams != nil
		}
		if !perPeer {
			// Upstreams share the edge's datagram ingress: per edge.
			collectDatagrams(gauge, counter, edgeDgram, "ingress", s.DatagramIngress)
			collectDatagrams(gauge, counter, edgeDgram, "egress", s.DatagramEgress)
		}
	} else {
		name := s.PeerName
		if name == "" {
			name = "peer"
		}
		if s.PeerKey != "" {
			gauge(peerInfo, 1, name, s.PeerKey)
		}
		collectPeer(gauge, counter, dir, name, s.Tunnel, s.TunnelState)
		collectDatagrams(gauge, counter, peerDgram, "ingress", s.DatagramIngress, name)
		collectDatagrams(gauge, counter, peerDgram, "egress", s.DatagramEgress, name)
	}
	if r := s.Refused; r != nil {
		for _, x := range []struct {
			reason string
			n      uint64
		}{{"bad_mac", r.BadMAC}, {"unauthenticated", r.Unauthenticated}, {"unknown_key", r.UnknownKey}, {"replay", r.Replays}, {"rate_limited", r.RateLimited}} {
			counter(refused, x.n, x.reason)
		}
	}
	c.collectEdge(s, dir, gauge, counter)
}

// directions name what this edge sends and receives: up or down.
type directions struct{ sent, received string }

// collectPeer emits the series of one peer, whose tunnel is t (nil: down)
// and whose tunnel's life is ts (nil: not known).
func collectPeer(gauge func(*prometheus.Desc, float64, ...string), counter func(*prometheus.Desc, uint64, ...string), dir directions, p string, t *control.Tunnel, ts *control.TunnelState) {
	if ts != nil {
		gauge(peerAttempts, float64(ts.HandshakeAttempts), p)
		if !ts.LastHandshake.IsZero() {
			gauge(peerLastHS, float64(ts.LastHandshake.UnixNano())/1e9, p)
		}
	}
	if t != nil {
		gauge(peerUp, 1, p)
		// Before the first RTT sample the smoothed RTT is the initial
		// guess (333 ms) and the minimum 0: no figure is better than those.
		if t.MinRTT > 0 {
			gauge(peerRTT, t.SmoothedRTT.Seconds(), p)
			gauge(peerMinRTT, t.MinRTT.Seconds(), p)
		}
		gauge(peerDelivery, float64(t.BandwidthBps)/8, p)
		gauge(peerRecvRate, float64(t.RecvRateBps)/8, p)
		gauge(peerPacing, float64(t.PacingRateBps)/8, p)
		gauge(peerRateCap, float64(t.RateCapBps)/8, p)
		gauge(peerCwnd, float64(t.Cwnd), p)
		gauge(peerInFlight, float64(t.InFlight), p)
		if t.BBRMode != "" {
			for m := cc.BBRMode(0); m.String() != "unknown"; m++ {
				v := 0.0
				if m.String() == t.BBRMode {
					v = 1
				}
				gauge(peerBBRState, v, p, m.String())
			}
		}
		counter(peerBytes, t.BytesSent, p, dir.sent)
		counter(peerBytes, t.BytesReceived, p, dir.received)
		counter(peerPackets, t.PacketsSent, p, dir.sent)
		counter(peerPackets, t.PacketsReceived, p, dir.received)
		counter(peerLost, t.PacketsLost, p)
		counter(peerRetrans, t.Retransmitted, p)
		counter(peerPTOs, t.PTOs, p)
		gauge(peerHandshake, t.HandshakeAge.Seconds(), p)
		counter(peerRekeys, t.Rekeys, p)
		gauge(peerStreams, float64(t.StreamsOpen), p)
		gauge(peerStreamBuf, float64(t.BudgetUsedBytes), p)
		gauge(peerStreamLimit, float64(t.BudgetBytes), p)
		gauge(peerUnread, float64(t.UnreadBytes), p)
		counter(peerDropped, t.DroppedUnauthenticated, p, "unauthenticated")
		counter(peerDropped, t.DroppedReplays, p, "replayed")
		counter(peerHandshakes, t.HandshakeReplays, p, "replay")
		counter(peerHandshakes, t.HandshakesRefused, p, "refused")
		counter(peerHandshakes, t.HandshakesBadMAC, p, "bad_mac")
		counter(peerHandshakes, t.HandshakesRateLimited, p, "rate_limited")
		counter(peerHandshakes, t.ResumesDeclined, p, "resume_declined")
		counter(peerCookies, t.CookiesSent, p)
		counter(peerRestarts, t.ClientRestarts, p)
		counter(peerRejects, t.RejectsSent, p)
		gauge(peerPathMTU, float64(t.PathMTUBytes), p)
		counter(peerPMTULost, t.PMTUProbesLost, p)
		counter(peerPMTUHoles, t.PMTUBlackHoles, p)
	} else {
		gauge(peerUp, 0, p)
	}
}

// collectEdge emits the edge's own series.
func (c *collector) collectEdge(s control.Status, dir directions, gauge func(*prometheus.Desc, float64, ...string), counter func(*prometheus.Desc, uint64, ...string)) {
	if in := s.Ingress; in != nil {
		gauge(flowsOpen, float64(in.ActiveFlows), "ingress")
		counter(flowsTotal, in.Dialed, "ingress")
		for _, r := range []struct {
			reason string
			n      uint64
		}{{"refused", in.Refused}, {"not_allowed", in.NotAllowed}, {"unreachable", in.Unreachable},
			{"timed_out", in.Timeouts}, {"error", in.DialErrors}, {"over_budget", in.OverBudget},
			{"syn_dropped", in.ForwarderDrops}, {"client_gave_up", in.HandshakeFailed}} {
			counter(flowsRefused, r.n, "ingress", r.reason)
		}
		counter(flowsIdle, in.IdleTimeouts, "ingress")
		// A near edge's TUN brings the clients' packets (up); a far edge's
		// (transparent egress) the servers' (down).
		counter(tunPackets, in.TUNPacketsIn, dir.sent)
		counter(tunPackets, in.TUNPacketsOut, dir.received)
		counter(tunDrops, in.TUNDrops)
	}
	g := s.Egress
	gauge(flowsOpen, float64(g.Active), "egress")
	counter(flowsTotal, g.Connected, "egress")
	for _, r := range []struct {
		reason string
		n      uint64
	}{{"not_allowed", g.NotAllowed}, {"denied", g.Denied}, {"refused", g.Refused}, {"unreachable", g.Unreachable},
		{"timed_out", g.TimedOut}, {"overloaded", g.Overloaded}, {"over_budget", g.OverBudget}, {"error", g.Failed}} {
		counter(flowsRefused, r.n, "egress", r.reason)
	}
	counter(flowsIdle, g.IdleTimeouts, "egress")
	counter(egressBytes, g.BytesUp, "up")
	counter(egressBytes, g.BytesDown, "down")

	m := s.Memory
	gauge(memFlows, float64(m.Flows))
	gauge(memMaxFlows, float64(m.MaxFlows))
	gauge(memFloor, float64(m.FloorBytes))
	gauge(memGranted, float64(m.GrantedBytes))
	gauge(memGrantLimit, float64(m.GrantLimitBytes))
	counter(memGrants, m.Grants)
	counter(memGrantsFewer, m.GrantsRefused)
}
