package analyze

import "sort"

// FlowReport is everything the analyser found about one TCP connection.
type FlowReport struct {
	ID        int          `json:"id"`
	Client    string       `json:"client"` // sent the SYN (or the first packet seen)
	Server    string       `json:"server"`
	Start     float64      `json:"start_s"` // since the capture's first TCP packet
	Duration  float64      `json:"duration_s"`
	Packets   int          `json:"packets"`
	Handshake Handshake    `json:"handshake"`
	Dirs      [2]DirReport `json:"directions"` // [0]: client→server, [1]: server→client
	Verdict   Verdict      `json:"verdict"`
	Anomalies []Anomaly    `json:"anomalies"` // middlebox and protocol anomalies
	Events    []Anomaly    `json:"events"`    // notable events with packet numbers (zero windows, spurious retransmissions)
	Notes     []string     `json:"notes,omitempty"`
}

// Handshake describes the connection setup as captured.
type Handshake struct {
	SYNSeen    bool    `json:"syn_seen"`
	SYNACKSeen bool    `json:"synack_seen"`
	RTTms      float64 `json:"rtt_ms"` // SYN to the ACK of the SYN-ACK; 0 if not captured
	// TSRTTms is the end-to-end minimum RTT from timestamp echoes: the
	// least capture→server→capture and capture→client→capture times added
	// (0: no timestamps). Medians would include the time an idle
	// application takes to send the echo. It works without the handshake.
	TSRTTms float64    `json:"ts_rtt_ms"`
	Client  SideOption `json:"client"`
	Server  SideOption `json:"server"`
	SACK    string     `json:"sack"` // negotiated, not negotiated, unknown
	// CaptureNear is "client" or "server" when the handshake timing shows
	// which end the capture point was near (empty: unknown).
	CaptureNear string `json:"capture_near,omitempty"`
}

// SideOption lists the options one side put in its SYN.
type SideOption struct {
	MSS        int  `json:"mss"`        // 0: not offered
	WScale     int  `json:"wscale"`     // -1: not offered
	SACKPerm   bool `json:"sack_perm"`  // SACK-permitted
	Timestamps bool `json:"timestamps"` // RFC 7323 timestamps
}

// DirReport is the data flowing one way in a connection.
type DirReport struct {
	From             string  `json:"from"`
	To               string  `json:"to"`
	Segments         int     `json:"segments"`
	DataSegments     int     `json:"data_segments"`
	Bytes            int64   `json:"bytes"`        // payload bytes on the wire, retransmissions included
	UniqueBytes      int64   `json:"unique_bytes"` // distinct sequence space carried
	Retransmissions  int     `json:"retransmissions"`
	RetransBytes     int64   `json:"retrans_bytes"`
	FastRetransmits  int     `json:"fast_retransmits"` // retransmissions after two or more duplicate ACKs
	Spurious         int     `json:"spurious_retransmissions"`
	OutOfOrder       int     `json:"out_of_order"`
	Lost             int     `json:"lost_segments"` // gaps: data missing before the capture point
	LostBytes        int64   `json:"lost_bytes"`
	DupAcks          int     `json:"dup_acks"`
	DSACKs           int     `json:"dsacks"`
	AckedUnseen      int     `json:"acked_unseen"` // ACKs beyond any data seen
	Keepalives       int     `json:"keepalives"`
	ZeroWindows      int     `json:"zero_window_events"`
	ZeroWindowMs     float64 `json:"zero_window_ms"`
	ZeroWindowProbes int     `json:"zero_window_probes"`
	WindowFull       int     `json:"window_full"` // segments that filled the advertised window
	WindowUpdates    int     `json:"window_updates"`
	WindowMin        int64   `json:"window_min"`
	WindowAvg        int64   `json:"window_avg"` // time-weighted while data was in flight
	WindowMax        int64   `json:"window_max"`
	WindowScaled     bool    `json:"window_scale_known"`
	InFlightAvg      int64   `json:"in_flight_avg"`
	RTTSamples       int     `json:"rtt_samples"`
	RTTMinMs         float64 `json:"rtt_min_ms"`
	RTTMedianMs      float64 `json:"rtt_median_ms"`
	RTTMaxMs         float64 `json:"rtt_max_ms"`
	TransferS        float64 `json:"transfer_s"` // first data to last acknowledged data
	GoodputMbps      float64 `json:"goodput_mbps"`
	BusyS            float64 `json:"busy_s"`    // time with data in flight
	BlockedS         float64 `json:"blocked_s"` // time the window had no room for another segment
	IdleS            float64 `json:"idle_s"`    // time the sender had everything acknowledged and sent nothing
	IdleGaps         int     `json:"idle_gaps"`
	IdleLongS        float64 `json:"idle_long_s"` // the part of IdleS in gaps longer than the handshake RTT
	MSS              int64   `json:"mss"`         // largest payload seen
	// Gaps of at least max(1 ms, RTT/8) in sending new data while data was
	// in flight and the window had room: how many, how many ended right
	// after an ACK (ACK-clocked: the sender waited for room, a send buffer
	// or a congestion window), and how long the others paused after room
	// opened (the application had nothing to send).
	SendGaps  int     `json:"send_gaps"`
	AckedGaps int     `json:"ack_clocked_gaps"`
	PauseS    float64 `json:"pause_s"`
	Series    []Point `json:"series,omitempty"`
}

// middlebox lists the anomaly names reported as "anomaly:" lines; other
// flagged names are events.
var middlebox = map[string]bool{
	"sack-unsent-data":    true,
	"sack-not-negotiated": true,
	"sack-reneging":       true,
	"sack-malformed":      true,
	"malformed-options":   true,
}

func (tr *tracker) report(opts Options) *Report {
	rep := &Report{Stats: tr.stats, Duration: float64(tr.tEnd-tr.t0) / 1e9}
	for _, c := range tr.order {
		if c.ignored {
			continue
		}
		rep.Flows = append(rep.Flows, c.report(tr))
	}
	if opts.MaxFlows > 0 && len(rep.Flows) > opts.MaxFlows {
		sort.SliceStable(rep.Flows, func(i, j int) bool {
			return rep.Flows[i].Dirs[0].Bytes+rep.Flows[i].Dirs[1].Bytes > rep.Flows[j].Dirs[0].Bytes+rep.Flows[j].Dirs[1].Bytes
		})
		rep.Flows = rep.Flows[:opts.MaxFlows]
		sort.SliceStable(rep.Flows, func(i, j int) bool { return rep.Flows[i].ID < rep.Flows[j].ID })
	}
	return rep
}

func (c *conn) report(tr *tracker) FlowReport {
	f := FlowReport{
		ID:       c.id,
		Client:   c.ep[0].String(),
		Server:   c.ep[1].String(),
		Start:    float64(c.first-tr.t0) / 1e9,
		Duration: float64(c.last-c.first) / 1e9,
		Packets:  c.packets,
		Handshake: Handshake{
			SYNSeen:    c.syn[0].seen,
			SYNACKSeen: c.syn[1].seen,
			RTTms:      ms(c.hsRTT),
			Client:     sideOpt(c.syn[0]),
			Server:     sideOpt(c.syn[1]),
			SACK:       c.sackState(),
		},
		Anomalies: []Anomaly{},
		Events:    []Anomaly{},
	}
	for i := range c.dir {
		f.Dirs[i] = c.dir[i].report(c, i, tr.tEnd)
	}
	if c.ts[0].rtt.n > 0 && c.ts[1].rtt.n > 0 {
		f.Handshake.TSRTTms = ms(c.ts[0].rtt.min + c.ts[1].rtt.min)
	}
	for i := range c.dir {
		ref := c.hsRTT
		if ref == 0 {
			ref = max(c.dir[i].rtt.min, c.ts[0].rtt.min+c.ts[1].rtt.min)
		}
		f.Dirs[i].sendGaps(&c.dir[i].gaps, max(1e6, ref/8))
	}
	if c.hsRTT > 0 && c.synAck >= c.synT {
		// Near the client the SYN-ACK takes the whole RTT to come back;
		// near the server it leaves at once and the ACK takes the RTT.
		f.Handshake.CaptureNear = "server"
		if c.synAck-c.synT > c.hsRTT/2 {
			f.Handshake.CaptureNear = "client"
		}
	}
	for _, a := range c.anomalies {
		if middlebox[a.Name] {
			f.Anomalies = append(f.Anomalies, *a)
		} else {
			f.Events = append(f.Events, *a)
		}
	}
	if !c.syn[0].seen || !c.syn[1].seen {
		f.Notes = append(f.Notes, "handshake not fully captured: window scale and SACK negotiation unknown, windows shown unscaled")
	}
	f.Verdict = verdictFor(&f)
	return f
}

// sendGaps fills in the gaps of at least minGap ns (to the octave).
func (r *DirReport) sendGaps(g *sendGaps, minGap int64) {
	for k := range g.n {
		if gapBinFloor(k+1) <= minGap { // every gap in bin k is shorter
			continue
		}
		r.SendGaps += g.n[k]
		r.AckedGaps += g.ackd[k]
		r.PauseS += float64(g.pauseNs[k]) / 1e9
	}
}

func sideOpt(h hsOpts) SideOption {
	if !h.seen {
		return SideOption{WScale: -1}
	}
	return SideOption{MSS: h.mss, WScale: h.wscale, SACKPerm: h.sackPerm, Timestamps: h.ts}
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

func (d *dirState) report(c *conn, i int, tEnd int64) DirReport {
	r := DirReport{
		From:             c.ep[i].String(),
		To:               c.ep[1-i].String(),
		Segments:         d.segs,
		DataSegments:     d.dataSegs,
		Bytes:            d.bytes,
		UniqueBytes:      d.unique,
		Retransmissions:  d.retrans,
		RetransBytes:     d.retransBytes,
		FastRetransmits:  d.fastRetrans,
		Spurious:         d.spurious,
		OutOfOrder:       d.ooo,
		Lost:             d.lost,
		LostBytes:        d.lostBytes,
		DupAcks:          d.dupAcks,
		DSACKs:           d.dsacks,
		AckedUnseen:      d.ackedUnseen,
		Keepalives:       d.keepalives,
		ZeroWindows:      d.zwEvents,
		ZeroWindowProbes: d.zwProbes,
		WindowFull:       d.winFull,
		WindowUpdates:    d.winUpdates,
		WindowMin:        d.minWin,
		WindowMax:        d.maxWin,
		WindowScaled:     d.winScaled,
		RTTSamples:       d.rtt.n,
		RTTMinMs:         ms(d.rtt.min),
		RTTMedianMs:      ms(d.rtt.median()),
		RTTMaxMs:         ms(d.rtt.max),
		BusyS:            float64(d.activeNs) / 1e9,
		BlockedS:         float64(d.blockedNs) / 1e9,
		IdleS:            float64(d.idleNs) / 1e9,
		IdleGaps:         d.idleGaps,
		IdleLongS:        float64(d.idleLongNs) / 1e9,
		MSS:              d.mss,
	}
	zw := d.zwNs
	if d.inZW {
		zw += max(tEnd-d.zwStart, 0)
	}
	r.ZeroWindowMs = ms(zw)
	if d.activeNs > 0 {
		r.WindowAvg = int64(d.winNs / float64(d.activeNs))
		r.InFlightAvg = int64(d.inflightNs / float64(d.activeNs))
	}
	if d.started {
		end := max(d.lastProgress, d.lastData)
		r.TransferS = float64(end-d.firstData) / 1e9
		if r.TransferS > 0 {
			r.GoodputMbps = float64(d.unique) * 8 / r.TransferS / 1e6
		}
		r.Series = d.ser.points()
	}
	return r
}
