package analyze

import (
	"fmt"
	"math"
	"slices"
)

// Verdict names, in the order they are tested. They follow the classes of
// T-RAT (Zhang, Breslau, Paxson, Shenker, "On the characteristics and
// origins of Internet flow rates", SIGCOMM 2002): opportunity, receiver
// window (window-limited, zero-window), congestion (loss-limited),
// application (sender-limited), bandwidth (path-limited), send buffer and
// transport.
const (
	VerdictOpportunityLimited = "opportunity-limited"
	VerdictZeroWindow         = "zero-window"
	VerdictWindowLimited      = "window-limited"
	VerdictLossLimited        = "loss-limited"
	VerdictSenderLimited      = "sender-limited"
	VerdictPathLimited        = "path-limited"
	VerdictSendBufferLimited  = "send-buffer-limited"
	VerdictTransportLimited   = "transport-limited"
	VerdictUnclear            = "unclear" // no test matched: the figures are given instead
	VerdictNone               = "none"    // no payload in either direction
)

// Thresholds behind the verdicts, as fractions of the transfer time (or of
// the unique bytes, for loss).
const (
	zeroWindowShare = 0.05 // receive window at zero for ≥ 5 % of the transfer
	blockedShare    = 0.50 // window had no room for a segment ≥ 50 % of the time
	lossShare       = 0.01 // ≥ 1 % of the bytes retransmitted or lost
	idleShare       = 0.20 // sender idle with nothing in flight ≥ 20 % of the time
	shortTransfer   = 10   // fewer data segments than this: too short to judge the path
	windowRateShare = 0.80 // or: achieved ≥ 80 % of window/RTT
)

// Thresholds for the evidence at the plateau.
const (
	// A queue at a bottleneck raises the RTT at the plateau above its
	// minimum by ≥ 10 % and ≥ 1 ms; jitter and delayed ACKs stay below
	// that, since each slice counts its least sample.
	queueShare = 0.10
	queueMinMs = 1.0
	// Flight per round trip is flat when its lower quartile is ≥ 75 % of
	// its upper one (a send buffer refills in bursts, so single rounds
	// vary), and growing when the plateau's last third is ≥ 1.3 times its
	// first.
	flatShare  = 0.75
	growFactor = 1.3
	// A flight within 3 segments of the window is the window's doing
	// (T-RAT's test for receiver-window limits).
	windowSlackSegs = 3
	// A transfer whose peak flight held ≥ 1/4 of its bytes, reached in its
	// last two round trips, ended while the window was still doubling.
	opportunityShare = 0.25
)

// Verdict names what limited a flow's main direction, with the figures.
type Verdict struct {
	Name         string  `json:"name"`
	Direction    int     `json:"direction"` // index into FlowReport.Dirs
	Summary      string  `json:"summary"`   // the figures, as printed after the name
	AchievedMbps float64 `json:"achieved_mbps"`
	RTTms        float64 `json:"rtt_ms"`            // RTT used for the bounds
	WindowBytes  int64   `json:"window_bytes"`      // time-weighted advertised window
	WindowBound  float64 `json:"window_bound_mbps"` // window / RTT
	LossRate     float64 `json:"loss_rate"`
	ZeroWinShare float64 `json:"zero_window_share"`
	BlockedShare float64 `json:"blocked_share"`
	IdleShare    float64 `json:"idle_share"`
	PlateauMbps  float64 `json:"plateau_mbps"`
	// The evidence at the plateau (the busy time without its first and
	// last 10 %).
	RTTMinMs       float64 `json:"rtt_min_ms"`      // least path RTT seen, handshake included
	RTTPlateauMs   float64 `json:"rtt_plateau_ms"`  // median RTT at the plateau
	FlightBytes    int64   `json:"flight_bytes"`    // median of the peak bytes in flight per round trip
	FlightLoBytes  int64   `json:"flight_lo_bytes"` // … its quartiles
	FlightHiBytes  int64   `json:"flight_hi_bytes"`
	PlateauWindow  int64   `json:"plateau_window_bytes"` // median advertised window (-1: unknown)
	PlateauRetrans int64   `json:"plateau_retrans_bytes"`
	PauseShare     float64 `json:"pause_share"` // sender paused with room to send, share of the transfer
}

func verdictFor(f *FlowReport) Verdict {
	m := 0
	if f.Dirs[1].UniqueBytes > f.Dirs[0].UniqueBytes {
		m = 1
	}
	d := &f.Dirs[m]
	v := Verdict{Direction: m}
	if d.UniqueBytes == 0 {
		v.Name, v.Summary = VerdictNone, "no payload in either direction"
		return v
	}
	rtt := max(f.Handshake.RTTms, d.RTTMedianMs)
	if f.Handshake.RTTms == 0 {
		rtt = max(rtt, f.Handshake.TSRTTms) // no handshake: timestamps see the whole path
	}
	v.RTTms = rtt
	v.AchievedMbps = d.GoodputMbps
	v.WindowBytes = d.WindowAvg
	if v.WindowBytes == 0 {
		v.WindowBytes = d.WindowMax
	}
	if rtt > 0 {
		v.WindowBound = float64(v.WindowBytes) * 8 / (rtt / 1e3) / 1e6
	}
	v.LossRate = float64(max(d.RetransBytes, d.LostBytes)) / float64(d.UniqueBytes)
	if t := d.TransferS; t > 0 {
		v.ZeroWinShare = min(d.ZeroWindowMs/1e3/t, 1)
		v.BlockedShare = min(d.BlockedS/t, 1)
		v.IdleShare = min(d.IdleS/t, 1)
		v.PauseShare = min(d.PauseS/t, 1)
	}
	e := gatherEvidence(f, m)
	v.PlateauMbps = e.plateauMbps
	if v.PlateauMbps == 0 {
		v.PlateauMbps = plateau(d.Series)
	}
	v.RTTMinMs, v.RTTPlateauMs = e.rttMin, e.rttPlateau
	v.FlightBytes, v.FlightLoBytes, v.FlightHiBytes = e.flightMed, e.flightLo, e.flightHi
	v.PlateauWindow, v.PlateauRetrans = e.window, e.plateauRetrans
	// A capture near the receiver sees data acknowledged at once: nothing
	// seems in flight and every round trip looks like an idle gap. Judge
	// the window by rate against window/RTT, idleness by long gaps only.
	nearReceiver := !e.senderSide
	if nearReceiver && d.TransferS > 0 {
		v.IdleShare = min(d.IdleLongS/d.TransferS, 1)
		v.PauseShare = 0
		f.Notes = append(f.Notes, "capture taken near the receiver: in-flight, window-full and idle figures show the receiver's view; the verdict weighs rate against window/RTT")
	}
	windowBound := v.WindowBound > 0 && v.AchievedMbps >= windowRateShare*v.WindowBound
	rise := e.rttPlateau - e.rttMin
	queued := e.rttMin > 0 && e.rttPlateau > 0 && rise >= max(queueMinMs, queueShare*e.rttMin)
	slack := windowSlackSegs * d.MSS
	belowWindow := e.window > 0 && e.flightHi+slack <= e.window
	// A sender waiting for room sends the moment an ACK makes it; an
	// application sends on its own clock. Half the long gaps ended by an
	// ACK: the sender was clocked by ACKs, not by its application.
	ackClocked := d.AckedGaps*2 >= d.SendGaps
	dir := fmt.Sprintf("%s→%s", d.From, d.To)
	switch {
	case d.DataSegments < shortTransfer && d.ZeroWindows == 0:
		v.Name = VerdictOpportunityLimited
		v.Summary = fmt.Sprintf("%s: only %d bytes in %d segments — the application sent too little to reach any network limit; the handshake and slow start set the rate (reuse connections, send more per connection)",
			dir, d.UniqueBytes, d.DataSegments)
	case d.ZeroWindows > 0 && v.ZeroWinShare >= zeroWindowShare:
		v.Name = VerdictZeroWindow
		v.Summary = fmt.Sprintf("%s: receiver advertised a zero window %d times, %.0f ms in total (%.0f%% of the %.2f s transfer), %d window probes; achieved %s — the receiving application reads slower than data arrives",
			dir, d.ZeroWindows, d.ZeroWindowMs, 100*v.ZeroWinShare, d.TransferS, d.ZeroWindowProbes, mbps(v.AchievedMbps))
	case v.BlockedShare >= blockedShare || windowBound:
		v.Name = VerdictWindowLimited
		v.Summary = fmt.Sprintf("%s: window %d B / RTT %.1f ms = %s bound, achieved %s (%.0f%% of bound); window full %.0f%% of the time, %d window-full segments",
			dir, v.WindowBytes, rtt, mbps(v.WindowBound), mbps(v.AchievedMbps), pct(v.AchievedMbps, v.WindowBound), 100*v.BlockedShare, d.WindowFull)
		switch {
		case d.WindowMin > 0 && d.WindowMin < d.WindowMax/2:
			v.Summary += fmt.Sprintf("; the advertised window shrank from %d B to %d B: the receiving application is not draining its buffer", d.WindowMax, d.WindowMin)
		case d.WindowMax >= 60000 && !f.Handshake.Client.hasScale(f.Handshake.Server):
			v.Summary += "; no window scaling: the window cannot exceed 64 KiB"
		default:
			v.Summary += "; the receiver's buffer is too small for this path (raise it, or let it auto-tune)"
		}
	case v.LossRate >= lossShare:
		v.Name = VerdictLossLimited
		mathis := 0.0
		if rtt > 0 {
			mathis = float64(d.MSS) * 8 / (rtt / 1e3) * 1.22 / math.Sqrt(v.LossRate) / 1e6
		}
		v.Summary = fmt.Sprintf("%s: %.1f%% of bytes retransmitted or lost (%d retransmissions, %d fast, %d gaps), RTT %.1f ms, achieved %s; loss bound MSS/RTT·1.22/√p = %s",
			dir, 100*v.LossRate, d.Retransmissions, d.FastRetransmits, d.Lost, rtt, mbps(v.AchievedMbps), mbps(mathis))
		if mathis > 0 && v.AchievedMbps > mathis {
			v.Summary += fmt.Sprintf(" (a steady-state estimate, which this short %.2f s transfer beat)", d.TransferS)
		}
	case v.IdleShare >= idleShare:
		v.Name = VerdictSenderLimited
		v.Summary = fmt.Sprintf("%s: sender idle with nothing in flight %.0f ms in %d gaps (%.0f%% of the %.2f s transfer); achieved %s, window bound %s — the application did not supply data fast enough",
			dir, d.IdleS*1e3, d.IdleGaps, 100*v.IdleShare, d.TransferS, mbps(v.AchievedMbps), mbps(v.WindowBound))
	case e.senderSide && d.Retransmissions == 0 && d.Lost == 0 && e.opportunity(d.UniqueBytes):
		v.Name = VerdictOpportunityLimited
		v.Summary = fmt.Sprintf("%s: %d bytes in %d round trips of %.1f ms, peak bytes in flight per round trip %s, still growing when the data ran out; no loss, window not limiting (%d B) — the transfer ended in slow start, before any limit was reached: reuse connections or send more per connection (a larger initial window helps)",
			dir, d.UniqueBytes, len(e.rounds), e.rttMin, roundList(e.rounds), e.window)
	case queued || e.plateauRetrans > 0:
		v.Name = VerdictPathLimited
		var why string
		switch {
		case queued && e.plateauRetrans > 0:
			why = fmt.Sprintf("RTT rose from %.1f ms to %.1f ms at the plateau (+%.1f ms of queueing) and %d B were retransmitted there", e.rttMin, e.rttPlateau, rise, e.plateauRetrans)
		case queued:
			why = fmt.Sprintf("RTT rose from %.1f ms to %.1f ms at the plateau (+%.1f ms of queueing)", e.rttMin, e.rttPlateau, rise)
		default:
			why = fmt.Sprintf("%d B retransmitted at the plateau (RTT %.1f ms min, %.1f ms at the plateau)", e.plateauRetrans, e.rttMin, e.rttPlateau)
		}
		v.Summary = fmt.Sprintf("%s: achieved %s, plateau %s; %s; window not limiting (full %.0f%% of the time, bound %s, in flight avg %d B of %d B), loss %.2f%%, idle %.0f%% — the path's bottleneck sets the rate (more bandwidth, or a less loaded path, would help)",
			dir, mbps(v.AchievedMbps), mbps(v.PlateauMbps), why, 100*v.BlockedShare, mbps(v.WindowBound), d.InFlightAvg, v.WindowBytes, 100*v.LossRate, 100*v.IdleShare)
	case e.senderSide && !ackClocked && v.IdleShare+v.PauseShare >= idleShare:
		v.Name = VerdictSenderLimited
		v.Summary = fmt.Sprintf("%s: sender paused with room to send %.0f ms (%.0f%% of the %.2f s transfer; idle with nothing in flight %.0f%% more): %d of %d gaps longer than RTT/8 ended on the application's clock, not by an ACK; %s — the application did not supply data fast enough",
			dir, d.PauseS*1e3, 100*v.PauseShare, d.TransferS, 100*v.IdleShare, d.SendGaps-d.AckedGaps, d.SendGaps, e.describe(d, &v))
	case e.senderSide && ackClocked && belowWindow && len(e.rounds) >= 3 && e.growth < growFactor && e.flightLo >= int64(flatShare*float64(e.flightHi)) && e.flightHi > 0:
		v.Name = VerdictSendBufferLimited
		need := int64(100e6 / 8 * e.rttMin / 1e3)
		v.Summary = fmt.Sprintf("%s: bytes in flight flat, %d B on average, peaking at %d B per round trip (quartiles %d–%d B), %.0f%% of the receiver's %d B window; no loss, no queueing (RTT %.1f ms at the plateau, %.1f ms min); sends clocked by ACKs (%d of %d gaps longer than RTT/8); plateau %s ≈ average flight/RTT, achieved %s, the window would allow %s — the sender's socket buffer caps the data in flight (or a clamped congestion window: on the wire they look alike): raise SO_SNDBUF (or net.ipv4.tcp_wmem) to the bandwidth × RTT wanted (%d B for 100 Mbit/s at this RTT), or stop setting SO_SNDBUF so that it auto-tunes",
			dir, d.InFlightAvg, e.flightMed, e.flightLo, e.flightHi, pct(float64(e.flightMed), float64(e.window)), e.window, e.rttPlateau, e.rttMin, d.AckedGaps, d.SendGaps,
			mbps(v.PlateauMbps), mbps(v.AchievedMbps), mbps(float64(e.window)*8/(e.rttMin/1e3)/1e6), need)
	case e.senderSide && ackClocked && belowWindow && e.growth >= growFactor:
		v.Name = VerdictTransportLimited
		v.Summary = fmt.Sprintf("%s: bytes in flight grew %.1f× across the plateau, clocked by ACKs, with no loss and no queueing; %s — TCP's congestion window was still opening (congestion avoidance after slow start ended early): TCP's own ramp-up set the rate, not the path; longer transfers, or a congestion control that ramps up faster (BBR), would go faster",
			dir, e.growth, e.describe(d, &v))
	default:
		v.Name = VerdictUnclear
		v.Summary = fmt.Sprintf("%s: no test matched — no queueing or loss shows a bottleneck, and the window is not limiting; %s",
			dir, e.describe(d, &v))
		if !e.senderSide {
			v.Summary += " — captured near the receiver, so the limit is likely at the sender (its send buffer, application or congestion window): capture at the sender to tell which"
		} else {
			v.Summary += fmt.Sprintf("; %d of %d gaps longer than RTT/8 ended by an ACK, paused %.0f%%, idle %.0f%%, flight grew %.1f× — plot the flow (--plot) to see the flight's shape",
				d.AckedGaps, d.SendGaps, 100*v.PauseShare, 100*v.IdleShare, e.growth)
		}
	}
	return v
}

// describe lists the plateau's figures, for verdicts that rest on them.
// Near the receiver, bytes in flight cannot be seen and are left out.
func (e *evidence) describe(d *DirReport, v *Verdict) string {
	flight := fmt.Sprintf("window %d B", e.window)
	if e.senderSide {
		flight = fmt.Sprintf("in flight %d B on average, peaking at %d B per round trip (quartiles %d–%d B), against a %d B window",
			d.InFlightAvg, e.flightMed, e.flightLo, e.flightHi, e.window)
	}
	return fmt.Sprintf("achieved %s, plateau %s; %s; RTT %.1f ms min, %.1f ms at the plateau; %d B retransmitted at the plateau",
		mbps(v.AchievedMbps), mbps(v.PlateauMbps), flight, e.rttMin, e.rttPlateau, e.plateauRetrans)
}

// opportunity reports whether the transfer ended in slow start: its peak
// flight held a large share of its bytes and came in its last round trips.
func (e *evidence) opportunity(total int64) bool {
	n := len(e.rounds)
	if n == 0 {
		return false
	}
	peak := slices.Index(e.rounds, slices.Max(e.rounds))
	return peak >= n-2 && float64(e.rounds[peak]) >= opportunityShare*float64(total)
}

func roundList(r []int64) string {
	var b []byte
	for i, x := range r {
		if i > 0 {
			b = append(b, ", "...)
		}
		if i == 8 && len(r) > 9 {
			b = append(b, "…"...)
			break
		}
		b = fmt.Appendf(b, "%d", x)
	}
	return "[" + string(b) + " B]"
}

// plateau is the median goodput over the busy buckets of a series, dropping
// the first and last 10 % (slow start and tail).
func plateau(pts []Point) float64 {
	var r []float64
	for _, p := range pts {
		if p.Mbps > 0 {
			r = append(r, p.Mbps)
		}
	}
	if len(r) == 0 {
		return 0
	}
	cut := len(r) / 10
	r = r[cut : len(r)-cut]
	slices.Sort(r)
	return r[len(r)/2]
}

func mbps(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f Mbit/s", v)
	case v >= 1:
		return fmt.Sprintf("%.2f Mbit/s", v)
	}
	return fmt.Sprintf("%.1f kbit/s", v*1e3)
}

func pct(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return 100 * a / b
}

// hasScale reports whether both SYNs offered window scaling.
func (o SideOption) hasScale(peer SideOption) bool { return o.WScale >= 0 && peer.WScale >= 0 }

// evidence is what a flow's series shows about its plateau: the figures the
// verdicts beyond the window, zero-window and loss tests weigh.
type evidence struct {
	senderSide     bool    // the capture sees the sender's view (in-flight bytes, ACK clocking)
	rttMin         float64 // ms: least path RTT seen (handshake included)
	rttPlateau     float64 // ms: median of the per-slice least RTTs at the plateau
	plateauRetrans int64   // bytes retransmitted at the plateau
	rounds         []int64 // peak bytes in flight per round trip, from the first data
	flightLo       int64   // quartiles of rounds at the plateau
	flightMed      int64
	flightHi       int64
	growth         float64 // flight in the plateau's last third over its first third
	window         int64   // median advertised window at the plateau (-1: unknown)
	plateauMbps    float64 // median goodput per round trip at the plateau (0: no rounds)
}

// plateauSpan returns the index range of the busy slices after dropping the
// first and last 10 % (as plateau does): slow start and the tail.
func plateauSpan(pts []Point) (lo, hi int, ok bool) {
	var busy []int
	for i, p := range pts {
		if p.Mbps > 0 {
			busy = append(busy, i)
		}
	}
	if len(busy) == 0 {
		return 0, 0, false
	}
	cut := len(busy) / 10
	return busy[cut], busy[len(busy)-1-cut], true
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// quantile returns the q-quantile of v (sorted in place).
func quantile(v []int64, q float64) int64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[min(int(q*float64(len(v))), len(v)-1)]
}

func gatherEvidence(f *FlowReport, m int) evidence {
	d := &f.Dirs[m]
	h := f.Handshake
	e := evidence{window: -1, senderSide: true}
	switch {
	case h.CaptureNear != "":
		e.senderSide = (h.CaptureNear == "client") == (m == 0)
	case h.TSRTTms > 0 && d.RTTSamples > 0:
		// Data is acknowledged at once near the receiver.
		e.senderSide = d.RTTMinMs >= h.TSRTTms/2
	}
	// Near the receiver the data-to-ACK RTT is only the receiver's half; the
	// sender's echo of the receiver's timestamps adds the path behind it.
	pathRTT := func(p Point) float64 {
		if e.senderSide {
			return p.RTTms
		}
		if p.RTTms == 0 || p.EchoMs == 0 {
			return 0
		}
		return p.RTTms + p.EchoMs
	}
	pts := d.Series
	e.rttMin = h.RTTms
	for _, p := range pts {
		if r := pathRTT(p); r > 0 && (e.rttMin == 0 || r < e.rttMin) {
			e.rttMin = r
		}
	}
	lo, hi, ok := plateauSpan(pts)
	if !ok {
		return e
	}
	var rtts, wins []float64
	for _, p := range pts[lo : hi+1] {
		if r := pathRTT(p); r > 0 {
			rtts = append(rtts, r)
		}
		if p.Window >= 0 {
			wins = append(wins, float64(p.Window))
		}
		e.plateauRetrans += p.Retransmit
	}
	e.rttPlateau = median(rtts)
	if len(wins) > 0 {
		e.window = int64(median(wins))
	}
	// Rounds of one (least) RTT from the first data sent, but no shorter
	// than a slice: on a LAN the series is coarser than the RTT.
	width := 0.0
	if len(pts) > 1 {
		width = pts[1].T - pts[0].T
	}
	round := max(e.rttMin/1e3, width)
	first := -1
	for i, p := range pts {
		if p.SentMbps > 0 {
			first = i
			break
		}
	}
	if e.rttMin <= 0 || round <= 0 || first < 0 {
		return e
	}
	t0 := pts[first].T
	var acked []float64 // bytes acknowledged per round
	for i := first; i < len(pts); i++ {
		r := int((pts[i].T - t0) / round)
		for len(e.rounds) <= r {
			e.rounds = append(e.rounds, 0)
			acked = append(acked, 0)
		}
		e.rounds[r] = max(e.rounds[r], pts[i].InFlight)
		acked[r] += pts[i].Mbps * 1e6 / 8 * width
	}
	var plat []int64
	var rates []float64
	for r, fl := range e.rounds {
		start, end := t0+float64(r)*round, t0+float64(r+1)*round
		if start >= pts[lo].T && end <= pts[hi].T+width {
			plat = append(plat, fl)
			rates = append(rates, acked[r]*8/round/1e6)
		}
	}
	if len(plat) < 3 && len(e.rounds) > 2 {
		plat = slices.Clone(e.rounds[1 : len(e.rounds)-1])
		rates = nil
	}
	e.plateauMbps = median(rates)
	if n := len(plat); n >= 3 {
		a, b := slices.Clone(plat[:n/3]), slices.Clone(plat[n-n/3:])
		if x := quantile(a, 0.5); x > 0 {
			e.growth = float64(quantile(b, 0.5)) / float64(x)
		}
	}
	e.flightLo, e.flightMed, e.flightHi = quantile(plat, 0.25), quantile(plat, 0.5), quantile(plat, 0.75)
	return e
}
