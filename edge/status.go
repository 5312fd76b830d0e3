package edge

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/wanopt/wanopt/dgram/passthru"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/stack"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// stackFlows appends the flows the stack st (nil: none) intercepted:
// peerFor names the upstream each goes to, srtt is the tunnel's round
// trip.
func stackFlows(out []control.Flow, st *stack.Stack, peerFor func(netip.Addr) string, srtt time.Duration) []control.Flow {
	if st == nil {
		return out
	}
	for _, f := range st.Flows() {
		out = append(out, control.Flow{Side: "ingress", Action: "optimise", Peer: peerFor(f.Dst.Addr().Unmap()), Src: f.Src.String(), Dst: f.Dst.String(), State: f.State.String(),
			BytesUp: f.BytesUp, BytesDown: f.BytesDown, RateUpBps: f.RateUpBps, RateDownBps: f.RateDownBps, TunnelRTT: srtt, Age: f.Age,
			Why: f.Why.Name("client", "far-edge")})
	}
	return out
}

// passedFlows appends the flows a datagram side passes unterminated,
// oldest first.
func passedFlows(out []control.Flow, side string, fl []passthru.PassedFlow, peerFor func(netip.Addr) string, srtt time.Duration) []control.Flow {
	slices.SortFunc(fl, func(a, b passthru.PassedFlow) int { return cmp.Compare(b.Age, a.Age) }) // oldest first
	for _, f := range fl {
		state := "passing"
		if f.Closing {
			state = "closing"
		}
		out = append(out, control.Flow{Side: side, Action: "pass", Peer: peerFor(f.Server.Addr().Unmap()), Src: f.Client.String(), Dst: f.Server.String(), State: state,
			BytesUp: f.BytesUp, BytesDown: f.BytesDown, TunnelRTT: srtt, Age: f.Age})
	}
	return out
}

// egressFlows appends the flows eg connected for peer.
func egressFlows(out []control.Flow, eg *egress.Egress, peer string, srtt time.Duration) []control.Flow {
	for _, f := range eg.Flows() {
		out = append(out, control.Flow{Side: "egress", Action: "optimise", Peer: peer, Src: f.Src.String(), Dst: f.Dst.String(), State: "relaying",
			BytesUp: f.BytesUp, BytesDown: f.BytesDown, RateUpBps: f.RateUpBps, RateDownBps: f.RateDownBps, TunnelRTT: srtt, Age: time.Since(f.Started),
			Why: f.Why.Name("server", "near-edge")})
	}
	return out
}

// noPeer names no upstream: an edge with one peer.
func noPeer(netip.Addr) string { return "" }

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
