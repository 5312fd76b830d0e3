package analyze

import (
	"fmt"
	"math"
	"slices"
)

// Verdict names, in the order they are tested.
const (
	VerdictZeroWindow    = "zero-window"
	VerdictWindowLimited = "window-limited"
	VerdictLossLimited   = "loss-limited"
	VerdictSenderLimited = "sender-limited"
	VerdictPathLimited   = "path-limited"
	VerdictNone          = "none" // no payload in either direction
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
	}
	v.PlateauMbps = plateau(d.Series)
	// A capture near the receiver sees data acknowledged at once: nothing
	// seems in flight and every round trip looks like an idle gap. Judge
	// the window by rate against window/RTT, idleness by long gaps only.
	nearReceiver := f.Handshake.CaptureNear != "" && (f.Handshake.CaptureNear == "client") == (m == 1)
	if nearReceiver && d.TransferS > 0 {
		v.IdleShare = min(d.IdleLongS/d.TransferS, 1)
		f.Notes = append(f.Notes, "capture taken near the receiver: in-flight, window-full and idle figures show the receiver's view; the verdict weighs rate against window/RTT")
	}
	windowBound := v.WindowBound > 0 && v.AchievedMbps >= windowRateShare*v.WindowBound
	dir := fmt.Sprintf("%s→%s", d.From, d.To)
	switch {
	case d.DataSegments < shortTransfer && d.ZeroWindows == 0:
		v.Name = VerdictSenderLimited
		v.Summary = fmt.Sprintf("%s: only %d bytes in %d segments — the application sent too little to reach any network limit",
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
	default:
		v.Name = VerdictPathLimited
		v.Summary = fmt.Sprintf("%s: achieved %s, plateau %s; window not limiting (full %.0f%% of the time, bound %s, in flight avg %d B of %d B), loss %.2f%%, idle %.0f%% — the path's bottleneck sets the rate",
			dir, mbps(v.AchievedMbps), mbps(v.PlateauMbps), 100*v.BlockedShare, mbps(v.WindowBound), d.InFlightAvg, v.WindowBytes, 100*v.LossRate, 100*v.IdleShare)
	}
	return v
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
