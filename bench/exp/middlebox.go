package exp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/wanopt/wanopt/analyze"
	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/report"
	"github.com/wanopt/wanopt/bench/wanem"
)

// MiddleboxOptions configure Middlebox. Zero values play the field case: a WAN
// device left in bypass on a 40 ms path that clamps the advertised window
// to 16 kB and injects selective ACKs for data not yet sent.
type MiddleboxOptions struct {
	// RTT and RateBps are the link's (default 40 ms and 100 Mbit/s, so the
	// clamp, not the link, limits plain TCP); QueueBytes its queue
	// (default one bandwidth-delay product).
	RTT        time.Duration
	RateBps    uint64
	QueueBytes int
	// WindowClamp is the most any segment may advertise (default 16384).
	WindowClamp int
	// SACKOffset and SACKLength place the forged block at
	// [ack+SACKOffset, ack+SACKOffset+SACKLength) (default 4 × the clamp
	// and 10 segments): past anything the sender can have sent.
	SACKOffset, SACKLength uint32
	// TamperUDPPct is the percentage of UDP datagrams the device also
	// rewrites (wanem.Config.TamperUDPPct). 0 plays the field device, which
	// rewrote only TCP; above 0 shows what the tunnel does with tampering.
	TamperUDPPct float64
	// PlainBytes and WanoptBytes are the measured transfers (iperf -n, one
	// stream, -R); default 8 MiB and 64 MiB. WarmBytes warms the fresh
	// tunnel first (default 4 MiB).
	PlainBytes, WanoptBytes, WarmBytes int64
	// Profile and CC are the end hosts' (default Modern and cubic).
	Profile harness.Profile
	CC      string
	// Seed seeds the link: Seed one way, Seed+1 the other (default 1).
	Seed int64
	// CaptureDir receives the plain run's capture at the server
	// (plain.pcap) and its analysis (plain-analysis.txt); default a
	// temporary folder, removed after.
	CaptureDir string
	// Wanopt is the wanopt binary; LinkCommand starts the link helper.
	Wanopt      string
	LinkCommand []string
	Logger      *slog.Logger
	// Progress, if set, is told what starts.
	Progress func(what string)
}

// MiddleboxDevice counts what the device rewrote during one run, both ways.
type MiddleboxDevice struct {
	SACKForged     uint64 `json:"sack_forged"`
	WindowsClamped uint64 `json:"windows_clamped"`
	UDPTampered    uint64 `json:"udp_tampered"`
}

// MiddleboxAnalysis is what 'wanopt analyze' says of the plain run's transfer.
type MiddleboxAnalysis struct {
	Flow string `json:"flow"` // sender→receiver of the data
	// Verdict and VerdictSummary are the analyser's; WindowBytes the
	// receiver's time-weighted window, WindowBoundMbps it over the RTT.
	Verdict         string  `json:"verdict"`
	VerdictSummary  string  `json:"verdict_summary"`
	WindowBytes     int64   `json:"window_bytes"`
	WindowBoundMbps float64 `json:"window_bound_mbps"`
	AchievedMbps    float64 `json:"achieved_mbps"`
	RTTms           float64 `json:"rtt_ms"`
	// SACKUnsent is how many ACKs the analyser flagged as
	// sack-unsent-data, and SACKUnsentDetail its description.
	SACKUnsent       int               `json:"sack_unsent_data"`
	SACKUnsentDetail string            `json:"sack_unsent_data_detail"`
	Anomalies        []analyze.Anomaly `json:"anomalies"`
}

// MiddleboxPlain is plain TCP through the device.
type MiddleboxPlain struct {
	Run      harness.IperfResult `json:"run"`
	Device   MiddleboxDevice     `json:"device"`
	Analysis MiddleboxAnalysis   `json:"analysis"`
	// SenderSACKDiscards is the SACK blocks the server's kernel (the
	// sender) discarded as invalid during the run (TcpExt TCPSACKDiscard).
	SenderSACKDiscards uint64 `json:"sender_sack_discards"`
	// Link is the link's counters for the run (A is the client's side).
	Link lab.LinkStats `json:"link"`
}

// MiddleboxWanopt is wanopt through the device.
type MiddleboxWanopt struct {
	Run    harness.IperfResult `json:"run"`
	Device MiddleboxDevice     `json:"device"`
	Link   lab.LinkStats       `json:"link"`
	// Each edge's tunnel counters over the whole run, warming included:
	// datagrams that failed authentication, and handshakes with a bad MAC.
	NearDroppedUnauthenticated uint64 `json:"near_dropped_unauthenticated"`
	FarDroppedUnauthenticated  uint64 `json:"far_dropped_unauthenticated"`
	NearHandshakesBadMAC       uint64 `json:"near_handshakes_bad_mac"`
	FarHandshakesBadMAC        uint64 `json:"far_handshakes_bad_mac"`
	// TamperedDropped is the four counters above added up.
	TamperedDropped uint64 `json:"tampered_dropped"`
	// FarPacketsLost is what the far edge's tunnel (the sender) declared
	// lost; a refused datagram counts as lost.
	FarPacketsLost uint64 `json:"far_packets_lost"`
}

// MiddleboxResult is the whole experiment.
type MiddleboxResult struct {
	RTTms        float64 `json:"rtt_ms"`
	RateMbps     float64 `json:"rate_mbps"`
	QueueBytes   int     `json:"queue_bytes"`
	WindowClamp  int     `json:"window_clamp"`
	SACKOffset   uint32  `json:"sack_offset"`
	SACKLength   uint32  `json:"sack_length"`
	TamperUDPPct float64 `json:"tamper_udp_pct"`
	Profile      string  `json:"profile"`
	CC           string  `json:"cc"`
	PlainBytes   int64   `json:"plain_bytes"`
	WanoptBytes  int64   `json:"wanopt_bytes"`
	Seed         int64   `json:"seed"`
	// ClampBoundMbps is WindowClamp per RTT: plain TCP's ceiling.
	ClampBoundMbps float64         `json:"clamp_bound_mbps"`
	Plain          MiddleboxPlain  `json:"plain"`
	Wanopt         MiddleboxWanopt `json:"wanopt"`
	// Capture and AnalysisText are the plain run's capture and its
	// analysis (empty when the folder was temporary).
	Capture      string `json:"capture,omitempty"`
	AnalysisText string `json:"analysis_text,omitempty"`
}

func (o *MiddleboxOptions) defaults() {
	if o.RTT == 0 {
		o.RTT = 40 * time.Millisecond
	}
	if o.RateBps == 0 {
		o.RateBps = 100_000_000
	}
	if o.QueueBytes == 0 {
		o.QueueBytes = max(int(float64(o.RateBps)/8*o.RTT.Seconds()), wanem.MinQueueBytes)
	}
	if o.WindowClamp == 0 {
		o.WindowClamp = 16384
	}
	if o.SACKOffset == 0 {
		o.SACKOffset = 4 * uint32(o.WindowClamp)
	}
	if o.SACKLength == 0 {
		o.SACKLength = 10 * 1448
	}
	if o.PlainBytes == 0 {
		o.PlainBytes = 8 << 20
	}
	if o.WanoptBytes == 0 {
		o.WanoptBytes = 64 << 20
	}
	if o.WarmBytes == 0 {
		o.WarmBytes = 4 << 20
	}
	if o.Profile.Name == "" {
		o.Profile = harness.Modern
	}
	if o.CC == "" {
		o.CC = "cubic"
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// linkConfig is the device on the link, the same both ways.
func (o MiddleboxOptions) linkConfig() (ab, ba wanem.Config) {
	ab = wanem.Config{Delay: o.RTT / 2, RateBps: o.RateBps, QueueBytes: o.QueueBytes, Seed: o.Seed,
		ForgeSACK:   &wanem.ForgedSACK{Offset: o.SACKOffset, Length: o.SACKLength},
		WindowClamp: o.WindowClamp, TamperUDPPct: o.TamperUDPPct}
	ba = ab
	ba.Seed = o.Seed + 1
	return ab, ba
}

// deviceCounters adds up the device's counters of both directions.
func deviceCounters(st lab.LinkStats) MiddleboxDevice {
	return MiddleboxDevice{
		SACKForged:     st.AB.SACKForged + st.BA.SACKForged,
		WindowsClamped: st.AB.WindowsClamped + st.BA.WindowsClamped,
		UDPTampered:    st.AB.UDPTampered + st.BA.UDPTampered,
	}
}

// Middlebox plays the bypass device on the edges lab's link and measures plain
// TCP (captured at the server and analysed), then wanopt, each on a fresh
// link so that the device counters are its own.
func Middlebox(ctx context.Context, o MiddleboxOptions) (MiddleboxResult, error) {
	o.defaults()
	res := MiddleboxResult{RTTms: ms(o.RTT), RateMbps: float64(o.RateBps) / 1e6, QueueBytes: o.QueueBytes, WindowClamp: o.WindowClamp,
		SACKOffset: o.SACKOffset, SACKLength: o.SACKLength, TamperUDPPct: o.TamperUDPPct, Profile: o.Profile.Name, CC: o.CC,
		PlainBytes: o.PlainBytes, WanoptBytes: o.WanoptBytes, Seed: o.Seed,
		ClampBoundMbps: float64(o.WindowClamp) * 8 / o.RTT.Seconds() / 1e6}
	if o.Wanopt == "" {
		return res, errors.New("no wanopt binary given (MiddleboxOptions.Wanopt)")
	}
	ab, ba := o.linkConfig()
	if err := ab.Validate(); err != nil {
		return res, fmt.Errorf("the device's link: %w", err)
	}
	if uint64(o.SACKOffset) <= uint64(o.WindowClamp) {
		// A forged block could then cover data a receiver really holds.
		return res, fmt.Errorf("SACK offset %d is not beyond the window clamp %d: the forged block could cover data the sender has sent; use an offset above the clamp",
			o.SACKOffset, o.WindowClamp)
	}
	progress := func(what string) {
		if o.Progress != nil {
			o.Progress(what)
		}
	}
	capDir := o.CaptureDir
	if capDir == "" {
		d, err := os.MkdirTemp("", "wanbench-sack-")
		if err != nil {
			return res, fmt.Errorf("folder for the capture: %w", err)
		}
		defer os.RemoveAll(d)
		capDir = d
	}
	l, srv, closeLab, err := harness.IperfEdgesLab(ctx, o.CC, lab.Options{Kind: lab.Edges, LinkCommand: o.LinkCommand, Realtime: true, Logger: o.Logger})
	if err != nil {
		return res, err
	}
	defer closeLab()

	// Plain TCP: the device rewrites the client's ACKs.
	progress("plain TCP")
	if err := l.StartLink(ctx, ab, ba); err != nil {
		return res, err
	}
	if err := harness.ApplyTCP(ctx, l, o.CC, o.Profile); err != nil {
		return res, err
	}
	discards0, err := harness.TCPExtCounter(ctx, l, l.Server, "TCPSACKDiscard")
	if err != nil {
		return res, err
	}
	pcap := filepath.Join(capDir, "plain.pcap")
	c, err := harness.StartCapture(ctx, l, l.Server, "lan0", pcap)
	if err != nil {
		return res, err
	}
	// At the clamp's bound, with slack for a slower run.
	expected := time.Duration(float64(o.PlainBytes) * 8 / (res.ClampBoundMbps * 1e6) * float64(time.Second))
	run, err := harness.RunIperf(ctx, l, l.Client, srv, harness.IperfRun{BytesPerStream: o.PlainBytes, Streams: 1, Timeout: time.Minute + 3*expected})
	// tcpdump gets the kernel's buffer in blocks up to a second late;
	// stopped at once it would lose the transfer's end.
	time.Sleep(1500 * time.Millisecond)
	if cerr := c.Stop(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return res, fmt.Errorf("plain TCP through the device: %w", err)
	}
	res.Plain.Run = run
	discards, err := harness.TCPExtCounter(ctx, l, l.Server, "TCPSACKDiscard")
	if err != nil {
		return res, err
	}
	res.Plain.SenderSACKDiscards = discards - discards0
	res.Plain.Link = l.StopLink()
	res.Plain.Device = deviceCounters(res.Plain.Link)
	text, an, err := analyzeMiddleboxCapture(pcap)
	if err != nil {
		return res, err
	}
	res.Plain.Analysis = an
	if o.CaptureDir != "" {
		res.Capture = pcap
		res.AnalysisText = filepath.Join(capDir, "plain-analysis.txt")
		if err := os.WriteFile(res.AnalysisText, []byte(text), 0o644); err != nil {
			return res, fmt.Errorf("write the analysis: %w", err)
		}
	}

	// wanopt: the same device on a fresh link.
	progress("wanopt")
	if err := l.StartLink(ctx, ab, ba); err != nil {
		return res, err
	}
	if err := harness.ApplyTCP(ctx, l, o.CC, o.Profile); err != nil {
		return res, err
	}
	if err := middleboxWanopt(ctx, l, srv, o, &res.Wanopt); err != nil {
		return res, fmt.Errorf("wanopt through the device: %w", err)
	}
	return res, nil
}

// middleboxWanopt measures wanopt through the device, then stops the link.
func middleboxWanopt(ctx context.Context, l *lab.Lab, srv *harness.IperfServer, o MiddleboxOptions, w *MiddleboxWanopt) error {
	edges, err := harness.StartEdges(ctx, l, harness.EdgeOptions{Wanopt: o.Wanopt, Allow: []string{l.Server.Addr.String() + "/32:5001"}})
	if err != nil {
		return err
	}
	defer edges.Stop()
	if _, err := harness.RunIperf(ctx, l, l.Client, srv, harness.IperfRun{BytesPerStream: o.WarmBytes, Streams: 1, Timeout: harness.RunTimeout(o.WarmBytes, float64(o.RateBps))}); err != nil {
		return fmt.Errorf("warming transfer: %w", err)
	}
	if w.Run, err = harness.RunIperf(ctx, l, l.Client, srv, harness.IperfRun{BytesPerStream: o.WanoptBytes, Streams: 1, Timeout: harness.RunTimeout(o.WanoptBytes, float64(o.RateBps))}); err != nil {
		return err
	}
	// Let the tunnel fall quiet before the link stops, so the device's
	// count and the edges' cover the same datagrams.
	if err := edges.WaitNoFlows(5 * time.Second); err != nil {
		return err
	}
	time.Sleep(o.RTT + 200*time.Millisecond)
	w.Link = l.StopLink()
	w.Device = deviceCounters(w.Link)
	// Datagrams released just before may still be in the edges' sockets.
	time.Sleep(200 * time.Millisecond)
	near, err := edges.Tunnel("near")
	if err != nil {
		return err
	}
	far, err := edges.Tunnel("far")
	if err != nil {
		return err
	}
	w.NearDroppedUnauthenticated, w.FarDroppedUnauthenticated = near.DroppedUnauthenticated, far.DroppedUnauthenticated
	w.NearHandshakesBadMAC, w.FarHandshakesBadMAC = near.HandshakesBadMAC, far.HandshakesBadMAC
	w.TamperedDropped = near.DroppedUnauthenticated + far.DroppedUnauthenticated + near.HandshakesBadMAC + far.HandshakesBadMAC
	w.FarPacketsLost = far.PacketsLost
	return edges.Stop()
}

// analyzeMiddleboxCapture runs the capture analyser on the plain run's capture
// and returns its text report and the figures of the largest flow.
func analyzeMiddleboxCapture(path string) (string, MiddleboxAnalysis, error) {
	rep, err := analyze.AnalyzeFile(path, analyze.Options{})
	if err != nil {
		return "", MiddleboxAnalysis{}, fmt.Errorf("analyse the plain run's capture: %w", err)
	}
	var b strings.Builder
	if err := analyze.WriteText(&b, rep); err != nil {
		return "", MiddleboxAnalysis{}, err
	}
	var f *analyze.FlowReport
	for i := range rep.Flows {
		g := &rep.Flows[i]
		if f == nil || g.Dirs[0].Bytes+g.Dirs[1].Bytes > f.Dirs[0].Bytes+f.Dirs[1].Bytes {
			f = g
		}
	}
	if f == nil {
		return b.String(), MiddleboxAnalysis{}, fmt.Errorf("the plain run's capture %s holds no TCP flow", path)
	}
	v := f.Verdict
	d := f.Dirs[v.Direction]
	a := MiddleboxAnalysis{Flow: d.From + "→" + d.To, Verdict: v.Name, VerdictSummary: v.Summary, WindowBytes: v.WindowBytes,
		WindowBoundMbps: v.WindowBound, AchievedMbps: v.AchievedMbps, RTTms: v.RTTms, Anomalies: f.Anomalies}
	for _, an := range f.Anomalies {
		if an.Name == "sack-unsent-data" {
			a.SACKUnsent, a.SACKUnsentDetail = an.Count, an.Detail
		}
	}
	return b.String(), a, nil
}

// Markdown is the side-by-side report.
func (r MiddleboxResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "A WAN device left in bypass, on a %.0f Mbit/s link, RTT %.0f ms, %d B drop-tail queue: it clamps every advertised TCP window to %d B "+
		"(at most %.2f Mbit/s per connection at this RTT), adds the SACK block [ack+%d, ack+%d) to every pure ACK", r.RateMbps, r.RTTms, r.QueueBytes,
		r.WindowClamp, r.ClampBoundMbps, r.SACKOffset, uint64(r.SACKOffset)+uint64(r.SACKLength))
	if r.TamperUDPPct > 0 {
		fmt.Fprintf(&b, ", and (beyond the field device, which rewrote only TCP) inverts the last byte of %g %% of UDP datagrams, fixing their checksums", r.TamperUDPPct)
	}
	fmt.Fprintf(&b, ". One iperf stream each (-R), end hosts %s with %s.\n\n", r.Profile, r.CC)
	t := report.NewTable(report.Text("path"), report.Num("Mbit/s"), report.Num("transfer"), report.Text("the device rewrote"), report.Text("outcome"))
	p, w := r.Plain, r.Wanopt
	t.Addf("plain TCP | %.2f | %d MiB in %.1f s | %d ACKs given a forged SACK, %d windows clamped | %s: %.2f Mbit/s bound (window %d B / RTT %.1f ms); sack-unsent-data ×%d; the sender's kernel discarded %d SACK blocks as invalid",
		p.Run.Mbps, r.PlainBytes>>20, p.Run.Seconds, p.Device.SACKForged, p.Device.WindowsClamped,
		p.Analysis.Verdict, p.Analysis.WindowBoundMbps, p.Analysis.WindowBytes, p.Analysis.RTTms, p.Analysis.SACKUnsent, p.SenderSACKDiscards)
	t.Addf("wanopt | %.2f | %d MiB in %.1f s | %d ACKs, %d windows (the WAN carries no TCP); %d UDP datagrams tampered with | %d refused by the edges as unauthenticated (near %d, far %d, bad handshake MACs %d); far tunnel declared %d packets lost",
		w.Run.Mbps, r.WanoptBytes>>20, w.Run.Seconds, w.Device.SACKForged, w.Device.WindowsClamped, w.Device.UDPTampered,
		w.TamperedDropped, w.NearDroppedUnauthenticated, w.FarDroppedUnauthenticated, w.NearHandshakesBadMAC+w.FarHandshakesBadMAC, w.FarPacketsLost)
	t.WriteTo(&b)
	b.WriteString("\n")
	fmt.Fprintf(&b, "`wanopt analyze` of the plain run, captured at the server (the sender), flow %s:\n\n", p.Analysis.Flow)
	fmt.Fprintf(&b, "- verdict: %s %s\n", p.Analysis.Verdict, p.Analysis.VerdictSummary)
	for _, a := range p.Analysis.Anomalies {
		fmt.Fprintf(&b, "- anomaly: %s ×%d: %s\n", a.Name, a.Count, a.Detail)
	}
	if len(p.Analysis.Anomalies) == 0 {
		b.WriteString("- no anomaly reported\n")
	}
	if r.Capture != "" {
		fmt.Fprintf(&b, "\nCapture: %s; the analyser's full report: %s.\n", r.Capture, r.AnalysisText)
	}
	return b.String()
}

// Line is the last line wanbench sack prints.
func (r MiddleboxResult) Line() string {
	return fmt.Sprintf("plain_mbps=%.2f wanopt_mbps=%.1f tampered_dropped=%d", r.Plain.Run.Mbps, r.Wanopt.Run.Mbps, r.Wanopt.TamperedDropped)
}

// WriteFiles writes sack.json and sack.md into dir.
func (r MiddleboxResult) WriteFiles(dir string) error {
	return report.Write(dir, "sack", r, r.Markdown(), nil)
}
