package edge

import (
	"cmp"
	"slices"
	"time"

	"github.com/wanopt/wanopt/dgram"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// Status reports the edge's tunnel and counters (the control socket's
// "status").
func (e *Edge) Status() control.Status {
	cfg := e.config()
	r := control.Status{Role: cfg.Role(), Config: cfg.Summary(), Bridge: e.br.Stats()}
	m := e.budget.Stats()
	r.Memory = control.Memory{Flows: m.Flows, MaxFlows: m.MaxFlows, FloorBytes: m.FloorBytes,
		GrantedBytes: m.GrantedBytes, GrantLimitBytes: m.GrantLimitBytes, FlowsRefused: m.FlowsRefused, Grants: m.Grants, GrantsRefused: m.GrantsRefused}
	e.mu.Lock()
	started := e.started
	e.mu.Unlock()
	if !started.IsZero() {
		r.Uptime = time.Since(started)
	}
	if eg := e.egress(); eg != nil {
		r.Egress = eg.Stats()
	}
	now := time.Now()
	if len(cfg.Branches) == 0 && len(cfg.Upstreams) == 0 {
		r.PeerName, r.PeerKey = cfg.peerName(), cfg.PeerKey.Base64()
		var keysAge time.Duration
		if t := e.br.Tunnel(); t != nil {
			r.Tunnel = tunnelStatus(t)
			keysAge = r.Tunnel.HandshakeAge
		}
		ts := e.link.snapshot(now, keysAge)
		ts.Host = cfg.PeerHost
		r.TunnelState = &ts
	}
	if e.refusals != nil {
		r.Refused = refusedStatus(e.refusals.Stats())
	}
	if ups := e.upstreamStatus(); ups != nil {
		r.Peers = ups
	}
	if peers := e.peerStatus(); peers != nil {
		r.Peers = peers
		var ds dgram.Stats
		for _, p := range peers {
			r.Egress = r.Egress.Add(p.Egress)
			if p.Datagrams != nil {
				ds = ds.Add(*p.Datagrams)
			}
		}
		r.DatagramEgress = &ds
		if h := e.hubOf(); h != nil {
			hs := h.Stats()
			r.Hub = &hs
		}
	}
	if st := e.stack(); st != nil {
		s := st.Stats()
		r.Ingress = &s
	}
	if e.near != nil {
		s := e.near.Stats()
		r.DatagramIngress = &s
	}
	if far := e.far.Load(); far != nil {
		s := far.Stats()
		r.DatagramEgress = &s
	}
	return r
}

// Flows lists the flows through the edge now (the control socket's
// "flows"): those intercepted here, then those connected here.
func (e *Edge) Flows() []control.Flow {
	var out []control.Flow
	var srtt time.Duration
	if t := e.br.Tunnel(); t != nil {
		srtt = t.Stats().Tunnel.SmoothedRTT
	}
	if st := e.stack(); st != nil {
		for _, f := range st.Flows() {
			var peer string
			if e.router != nil {
				if u := e.router.route(f.Dst.Addr().Unmap()); u != nil {
					peer = u.Name
				}
			}
			out = append(out, control.Flow{Side: "ingress", Action: "optimise", Peer: peer, Src: f.Src.String(), Dst: f.Dst.String(), State: f.State.String(),
				BytesUp: f.BytesUp, BytesDown: f.BytesDown, RateUpBps: f.RateUpBps, RateDownBps: f.RateDownBps, TunnelRTT: srtt, Age: f.Age,
				Why: f.Why.Name("client", "far-edge")})
		}
	}
	passed := func(side string, fl []dgram.PassedFlow) {
		slices.SortFunc(fl, func(a, b dgram.PassedFlow) int { return cmp.Compare(b.Age, a.Age) }) // oldest first
		for _, f := range fl {
			state := "passing"
			if f.Closing {
				state = "closing"
			}
			var peer string
			if e.router != nil {
				if u := e.router.route(f.Server.Addr().Unmap()); u != nil {
					peer = u.Name
				}
			}
			out = append(out, control.Flow{Side: side, Action: "pass", Peer: peer, Src: f.Client.String(), Dst: f.Server.String(), State: state,
				BytesUp: f.BytesUp, BytesDown: f.BytesDown, TunnelRTT: srtt, Age: f.Age})
		}
	}
	if e.near != nil {
		passed("ingress", e.near.PassedFlows())
	}
	if far := e.far.Load(); far != nil {
		passed("egress", far.PassedFlows())
	}
	egressFlows := func(eg *egress.Egress, peer string, srtt time.Duration) {
		for _, f := range eg.Flows() {
			out = append(out, control.Flow{Side: "egress", Action: "optimise", Peer: peer, Src: f.Src.String(), Dst: f.Dst.String(), State: "relaying",
				BytesUp: f.BytesUp, BytesDown: f.BytesDown, RateUpBps: f.RateUpBps, RateDownBps: f.RateDownBps, TunnelRTT: srtt, Age: time.Since(f.Started),
				Why: f.Why.Name("server", "near-edge")})
		}
	}
	if eg := e.egress(); eg != nil {
		egressFlows(eg, "", srtt)
	}
	for _, b := range e.hubBranches() {
		var srtt time.Duration
		if t := b.tunnel(); t != nil {
			srtt = t.Stats().Tunnel.SmoothedRTT
		}
		egressFlows(b.eg, b.Name, srtt)
	}
	return out
}

// refusedStatus is the status of the initiations a responder refused.
func refusedStatus(s driver.RefusalStats) *control.Refused {
	n := s.ByReason
	r := &control.Refused{BadMAC: n[driver.RefusedBadMAC], Unauthenticated: n[driver.RefusedUnauthenticated],
		UnknownKey: n[driver.RefusedUnknownKey], Replays: n[driver.RefusedReplay], RateLimited: n[driver.RefusedRateLimited]}
	if l := s.Last; !l.At.IsZero() {
		r.Last = &control.Refusal{At: l.At, From: l.From.String(), Reason: l.Reason.String()}
		if !l.Key.IsZero() {
			r.Last.Key = l.Key.Base64()
		}
	}
	return r
}

// tunnelStatus is the status of one tunnel.
func tunnelStatus(t *driver.Tunnel) *control.Tunnel {
	s := t.Stats()
	r := &control.Tunnel{
		Peer: s.PeerAddr.String(), Congestion: s.Tunnel.Congestion, Cipher: s.Tunnel.Cipher,
		SmoothedRTT: s.Tunnel.SmoothedRTT, MinRTT: s.Tunnel.MinRTT,
		BandwidthBps: s.Tunnel.BandwidthBps, PacingRateBps: s.Tunnel.PacingRateBps, RateCapBps: s.Tunnel.RateCapBps,
		Cwnd: s.Tunnel.CongestionWindow, InFlight: s.Tunnel.BytesInFlight,
		BytesSent: s.Tunnel.BytesSent, BytesReceived: s.Tunnel.BytesReceived,
		PacketsSent: s.Tunnel.PacketsSent, PacketsReceived: s.Tunnel.PacketsReceived,
		RecvRateBps: s.Tunnel.RecvRateBps, HandshakeAge: s.KeysAge,
		PacketsLost: s.Tunnel.PacketsLost, Retransmitted: s.Tunnel.StreamBytesRetransmitted,
		PTOs:            s.Tunnel.PTOs,
		StreamsOpen:     s.Tunnel.StreamsOpen,
		BudgetUsedBytes: s.Tunnel.BudgetUsedBytes, BudgetBytes: s.Tunnel.BudgetBytes,
		UnreadBytes:            s.Tunnel.ConnRecvUnreadBytes,
		DroppedUnauthenticated: s.Tunnel.DroppedUnauthenticated, DroppedReplays: s.Tunnel.DroppedDuplicates,
		HandshakeReplays: s.Tunnel.HandshakeReplays, HandshakesRefused: s.Tunnel.HandshakesRejected + s.InitiationsRefused,
		ResumesDeclined: s.ResumesDeclined, ClientRestarts: s.ClientRestarts, RejectsSent: s.RejectsSent, Rekeys: s.Tunnel.Rekeys,
		HandshakesBadMAC: s.Gate.BadMAC, CookiesSent: s.Gate.CookiesSent, HandshakesRateLimited: s.Gate.RateLimited,
		DatagramsSent: s.Tunnel.DatagramsSent, DatagramsReceived: s.Tunnel.DatagramsReceived,
		DatagramsDropped: s.Tunnel.DatagramsDropped + s.DatagramQueueDrops + s.DatagramsUnclaimed,
		PathMTUBytes:     s.Tunnel.PathMTUBytes, PathMTUCeiling: s.Tunnel.PathMTUCeilingBytes, PathMTUSearching: s.Tunnel.PathMTUSearching,
		PMTUProbesLost: s.Tunnel.PMTUProbesLost, PMTUBlackHoles: s.Tunnel.PMTUBlackHoles,
	}
	if s.Tunnel.Congestion == "bbr" {
		r.BBRMode, r.ProbeRTTs = s.Tunnel.BBR.Mode.String(), s.Tunnel.BBR.ProbeRTTCount
	}
	return r
}
