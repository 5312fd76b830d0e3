package analyze

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// WriteText writes the human-readable report: a capture summary, then per
// flow its handshake, both directions, one "verdict:" line, one "anomaly:"
// line per middlebox anomaly and one "event:" line per notable event.
func WriteText(w io.Writer, rep *Report) error {
	bw := bufio.NewWriter(w)
	s := rep.Stats
	fmt.Fprintf(bw, "capture: %s (%s), %d packets, %s, %.3f s; %d TCP",
		rep.File, s.Format, s.Packets, size(s.Bytes), rep.Duration, s.TCPPackets)
	skipped := []struct {
		n    int
		what string
	}{{s.NotIP, "not IP"}, {s.NotTCP, "not TCP"}, {s.Fragments, "fragments"}, {s.Truncated, "truncated"},
		{s.Malformed, "malformed"}, {s.UnsupportedLink, "unsupported link type"}, {s.FlowsDropped, "over the flow limit"}}
	var sk []string
	for _, x := range skipped {
		if x.n > 0 {
			sk = append(sk, fmt.Sprintf("%d %s", x.n, x.what))
		}
	}
	if len(sk) > 0 {
		fmt.Fprintf(bw, "; skipped: %s", strings.Join(sk, ", "))
	}
	fmt.Fprintln(bw)
	if s.ReadError != "" {
		fmt.Fprintf(bw, "warning: %s\n", s.ReadError)
	}
	if len(rep.Flows) == 0 {
		fmt.Fprintln(bw, "no TCP flows found (check --flow, or that the capture holds TCP)")
	}
	for i := range rep.Flows {
		writeFlow(bw, &rep.Flows[i])
	}
	return bw.Flush()
}

func writeFlow(w *bufio.Writer, f *FlowReport) {
	fmt.Fprintf(w, "\nflow %d: %s → %s  start %.3f s  duration %.3f s  %d packets\n",
		f.ID, f.Client, f.Server, f.Start, f.Duration, f.Packets)
	h := f.Handshake
	hs := "not captured"
	if h.SYNSeen || h.SYNACKSeen {
		hs = fmt.Sprintf("client %s; server %s; sack %s", opts(h.SYNSeen, h.Client), opts(h.SYNACKSeen, h.Server), h.SACK)
		if h.RTTms > 0 {
			hs = fmt.Sprintf("rtt %.1f ms; %s", h.RTTms, hs)
		}
		if h.TSRTTms > 0 {
			hs += fmt.Sprintf("; timestamp min rtt %.1f ms", h.TSRTTms)
		}
		if h.CaptureNear != "" {
			hs += "; captured near the " + h.CaptureNear
		}
	}
	fmt.Fprintf(w, "  handshake: %s\n", hs)
	for i := range f.Dirs {
		writeDir(w, &f.Dirs[i])
	}
	fmt.Fprintf(w, "  verdict: %s %s\n", f.Verdict.Name, f.Verdict.Summary)
	for _, a := range f.Anomalies {
		fmt.Fprintf(w, "  anomaly: %s ×%d at packets %s: %s\n", a.Name, a.Count, pkts(a), a.Detail)
	}
	for _, a := range f.Events {
		fmt.Fprintf(w, "  event: %s ×%d at packets %s\n", a.Name, a.Count, pkts(a))
	}
	for _, n := range f.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

func opts(seen bool, o SideOption) string {
	if !seen {
		return "SYN not captured"
	}
	var p []string
	if o.MSS > 0 {
		p = append(p, fmt.Sprintf("mss %d", o.MSS))
	}
	if o.WScale >= 0 {
		p = append(p, fmt.Sprintf("wscale %d", o.WScale))
	} else {
		p = append(p, "no wscale")
	}
	if o.SACKPerm {
		p = append(p, "sack-permitted")
	}
	if o.Timestamps {
		p = append(p, "timestamps")
	}
	return strings.Join(p, " ")
}

func writeDir(w *bufio.Writer, d *DirReport) {
	fmt.Fprintf(w, "  %s → %s: %s in %d data segments (%d segments), unique %s",
		d.From, d.To, size(d.Bytes), d.DataSegments, d.Segments, size(d.UniqueBytes))
	if d.TransferS > 0 {
		fmt.Fprintf(w, ", goodput %s over %.3f s", mbps(d.GoodputMbps), d.TransferS)
	}
	fmt.Fprintln(w)
	if d.DataSegments == 0 {
		return
	}
	scale := "scaled"
	if !d.WindowScaled {
		scale = "scale unknown"
	}
	fmt.Fprintf(w, "    rtt min/median/max %.1f/%.1f/%.1f ms (%d samples); window min/avg/max %d/%d/%d B (%s); in flight avg %d B\n",
		d.RTTMinMs, d.RTTMedianMs, d.RTTMaxMs, d.RTTSamples, d.WindowMin, d.WindowAvg, d.WindowMax, scale, d.InFlightAvg)
	fmt.Fprintf(w, "    retransmissions %d (%s, %d fast, %d spurious), out-of-order %d, lost %d (%s), dup acks %d, dsack %d, acked-unseen %d\n",
		d.Retransmissions, size(d.RetransBytes), d.FastRetransmits, d.Spurious, d.OutOfOrder, d.Lost, size(d.LostBytes), d.DupAcks, d.DSACKs, d.AckedUnseen)
	fmt.Fprintf(w, "    zero windows %d (%.0f ms, %d probes), window-full segments %d, no room in window %.3f s, busy %.3f s, idle %.3f s in %d gaps\n",
		d.ZeroWindows, d.ZeroWindowMs, d.ZeroWindowProbes, d.WindowFull, d.BlockedS, d.BusyS, d.IdleS, d.IdleGaps)
}

func pkts(a Anomaly) string {
	p := make([]string, len(a.Packets))
	for i, n := range a.Packets {
		p[i] = strconv.Itoa(n)
	}
	s := strings.Join(p, ",")
	if a.Count > len(a.Packets) {
		s += ",…"
	}
	return s
}

func size(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
