package exp

import (
	"context"
	"fmt"
	"image/color"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wanopt/wanopt/bench/cpuplace"
	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/report"
	"github.com/wanopt/wanopt/bench/wanem"
)

// Published figures of the router's TCP optimisation in the reproduced
// test (125-131 Mbit/s drawn at the middle).
var publishedOptimised = []report.XY{{X: 0, Y: 121}, {X: 50, Y: 128}, {X: 100, Y: 128}, {X: 150, Y: 128}, {X: 200, Y: 128}, {X: 250, Y: 128}}

// RTTSweepOptions configure RTTSweep; zero values are the published test's.
type RTTSweepOptions struct {
	Published                   // Runs counts per point and path
	Profiles  []harness.Profile // default Modern and Legacy
	CC        string            // the end hosts' congestion control; default cubic
	// WarmBytes is iperf -n of the warming transfer; default 2 MiB.
	WarmBytes int64
	Wanopt    string // the wanopt binary (see FindWanopt)
	// Transparent runs the far edge with transparent egress.
	Transparent bool
	// LinkImpairments are added to both directions of the link; an
	// outage hits every measured transfer.
	LinkImpairments
	// QueueDelay, if set, sizes the queue as time at the link rate.
	QueueDelay time.Duration
	// Seed seeds the link's impairments: Seed one way, Seed+1 the other.
	Seed int64
	// WANRateHint tells both edges the link's rate (--wan-rate).
	WANRateHint bool
	// EdgeCPU, if positive, caps each wanopt edge at that many CPUs (see
	// EdgeOptions.EdgeCPU); nothing else in the lab is capped.
	EdgeCPU float64
	// EdgeWeight, if positive, gives each wanopt edge a cgroup of that
	// CPU weight (see EdgeOptions.EdgeWeight); 0: the default weight.
	EdgeWeight int
	// EdgeProcs, if positive, runs each wanopt edge with --procs EdgeProcs
	// (GOMAXPROCS). 0: 1 when EdgeCPU is one CPU or less, else Go's default.
	EdgeProcs int
	// LinkOffload opens the link's ends with UDP segmentation offload
	// (lab.Options.LinkOffload).
	LinkOffload bool
	// EdgesApart runs both wanopt edges on the last CPU and the rest of the
	// lab on the others (bench/cpuplace), so the lab does not preempt the
	// edges. The plain runs see the same placement.
	EdgesApart bool
	edgeCPUs   unix.CPUSet // where EdgesApart put the edges
	// Upload sends from the client to the server (iperf without -R).
	Upload bool
	// PlainRuns is the number of plain-TCP runs per point (default Runs):
	// on a lossy link one plain run can take minutes.
	PlainRuns int
	// Progress, if set, is called after every run; what is "plain",
	// "wanopt", "cold" or "plain-ref" (the 0 ms reference when 0 ms is
	// not among RTTs).
	Progress func(done, total int, p Point, what string, run harness.IperfResult)
}

// RTTSweepRow is one RTT and profile: plain TCP through edges that only
// forward, and through a pair of wanopt edges.
type RTTSweepRow struct {
	RTTms   float64 `json:"rtt_ms"`
	Profile string  `json:"profile"`
	// PlainMbps and WanoptMbps are the published reduction of the runs.
	PlainMbps  float64 `json:"plain_mbps"`
	WanoptMbps float64 `json:"wanopt_mbps"`
	// Ratio is WanoptMbps over plain TCP's 0 ms figure for this profile
	// (the bar: at least 0.95).
	Ratio float64 `json:"ratio_to_plain_0ms"`
	// ColdMbps is the first run on a fresh pair of edges, before warming.
	ColdMbps   float64               `json:"cold_mbps"`
	PlainRuns  []harness.IperfResult `json:"plain_runs"`
	WanoptRuns []harness.IperfResult `json:"wanopt_runs"`
	Cold       harness.IperfResult   `json:"cold"`
	// NearCPUPct and FarCPUPct are each edge's CPU use during the
	// measured runs: 100 × (user + system) / wall seconds.
	NearCPUPct float64 `json:"near_cpu_pct"`
	FarCPUPct  float64 `json:"far_cpu_pct"`
	// The same CPU seconds in user and in system mode.
	NearUserS float64 `json:"near_user_s"`
	NearSysS  float64 `json:"near_sys_s"`
	FarUserS  float64 `json:"far_user_s"`
	FarSysS   float64 `json:"far_sys_s"`
	// EdgeCost is the edges' cost over the measured runs.
	EdgeCost
	// The sending edge's tunnel during the measured runs (the near edge's
	// with Upload, under the same JSON names): ProbeRTT episodes, packets
	// lost, and retransmitted stream bytes as a share of bytes sent.
	FarProbeRTTs   int     `json:"far_probe_rtts"`
	FarPacketsLost uint64  `json:"far_packets_lost"`
	FarRetransPct  float64 `json:"far_retrans_pct"`
	// With an outage: the runs that failed (in no mean), and the mean
	// recovery time (see outageSummary).
	PlainFailed     int     `json:"plain_failed,omitempty"`
	WanoptFailed    int     `json:"wanopt_failed,omitempty"`
	PlainRecoveryS  float64 `json:"plain_recovery_s,omitempty"`
	WanoptRecoveryS float64 `json:"wanopt_recovery_s,omitempty"`
	ColdRecoveryS   float64 `json:"cold_recovery_s,omitempty"`
}

// RTTSweepResult is the whole experiment.
type RTTSweepResult struct {
	RateMbps       float64 `json:"rate_mbps"`
	QueueBytes     int     `json:"queue_bytes"`
	BytesPerStream int64   `json:"bytes_per_stream"`
	Streams        int     `json:"streams"`
	Runs           int     `json:"runs"`
	CC             string  `json:"cc"`
	// Upload: the client sent and the server measured (RTTSweepOptions.Upload).
	Upload bool `json:"upload,omitempty"`
	// Egress is the far edge's egress mode: kernel or transparent.
	Egress string `json:"egress,omitempty"`
	// WANRateHint: the edges were told the link's rate (--wan-rate).
	WANRateHint bool `json:"wan_rate_hint,omitempty"`
	// EdgeCPU is the CPUs each wanopt edge was held to; 0: no cap.
	EdgeCPU float64 `json:"edge_cpu_cores"`
	// EdgeWeight is the CPU weight of each wanopt edge's cgroup; 0: none.
	EdgeWeight int `json:"edge_cpu_weight,omitempty"`
	// EdgeProcs is the edges' --procs; 0: the edge's own choice.
	EdgeProcs int `json:"edge_procs,omitempty"`
	// LinkOffload: the link took UDP GSO batches whole (--link-offload).
	LinkOffload bool `json:"link_offload,omitempty"`
	// EdgeCPUs and LabCPUs are where the edges and the lab ran with
	// EdgesApart; empty: anywhere.
	EdgeCPUs string `json:"edge_cpus,omitempty"`
	LabCPUs  string `json:"lab_cpus,omitempty"`
	// QueueDelayMs is the queue as given in time, if it was.
	QueueDelayMs float64 `json:"queue_delay_ms,omitempty"`
	// Impairments are the link's other impairments; Seed the A→B seed.
	Impairments LinkImpairments `json:"impairments"`
	Seed        int64           `json:"seed"`
	// RecoveryBarMbps is RecoveryBar of GoodputLimitMbps.
	RecoveryBarMbps float64 `json:"recovery_bar_mbps,omitempty"`
	// Plain0ms is plain TCP's 0 ms figure per profile, every ratio's
	// reference.
	Plain0ms map[string]float64 `json:"plain_0ms_mbps"`
	Rows     []RTTSweepRow      `json:"rows"`
}

func (o *RTTSweepOptions) defaults() {
	o.Published.defaults()
	if o.EdgeProcs == 0 && o.EdgeCPU > 0 && o.EdgeCPU <= 1 {
		// The edge would choose one thread itself (internal/cpulimit),
		// but 'ip netns exec' hides its cgroup from it.
		o.EdgeProcs = 1
	}
	if len(o.Profiles) == 0 {
		o.Profiles = []harness.Profile{harness.Modern, harness.Legacy}
	}
	if o.CC == "" {
		o.CC = "cubic"
	}
	if o.WarmBytes == 0 {
		o.WarmBytes = 2 << 20
	}
}

// linkConfig returns the two directions of the link at rtt.
func (o RTTSweepOptions) linkConfig(rtt time.Duration) (ab, ba wanem.Config) {
	ab = wanem.Config{Delay: rtt / 2, RateBps: o.RateBps, QueueBytes: o.QueueBytes, Seed: o.Seed}
	if o.QueueDelay > 0 {
		ab.QueueBytes, ab.QueueDelay = 0, o.QueueDelay
	}
	o.LinkImpairments.apply(&ab)
	ba = ab
	ba.Seed = o.Seed + 1 // the same losses both ways would be a coincidence no link has
	return ab, ba
}

// RTTSweep runs the published experiment on the edges lab: per RTT and
// profile, Runs 'iperf -c SERVER -n N -P 4 -R' through edges that only
// forward, then a cold run, a warming transfer and Runs transfers through a
// fresh pair of wanopt edges. A run that fails in an outage is not retried.
func RTTSweep(ctx context.Context, o RTTSweepOptions) (RTTSweepResult, error) {
	o.defaults()
	res := RTTSweepResult{RateMbps: float64(o.RateBps) / 1e6, QueueBytes: o.QueueBytes, BytesPerStream: o.BytesPerStream,
		Streams: o.Streams, Runs: o.Runs, CC: o.CC, Egress: "kernel", Plain0ms: map[string]float64{}}
	if o.Transparent {
		res.Egress = "transparent"
	}
	res.WANRateHint = o.WANRateHint
	res.Upload = o.Upload
	if o.Upload && o.HasOutage() {
		return res, harness.ErrUploadOutage
	}
	res.EdgeCPU = o.EdgeCPU
	res.EdgeWeight = o.EdgeWeight
	res.EdgeProcs = o.EdgeProcs
	res.LinkOffload = o.LinkOffload
	if o.Wanopt == "" {
		return res, fmt.Errorf("no wanopt binary given (RTTSweepOptions.Wanopt)")
	}
	if err := harness.CheckEdgeCPU(o.EdgeCPU, o.EdgeWeight); err != nil {
		return res, err
	}
	// The link helper runs at real-time priority, but never confined to
	// one CPU: its SCHED_FIFO threads would starve each other there.
	realtime := true
	if o.EdgesApart {
		rest, last, err := cpuplace.Split()
		if err != nil {
			return res, err
		}
		old, err := cpuplace.PinProcess(rest)
		if err != nil {
			return res, err
		}
		defer func() {
			if _, err := cpuplace.PinProcess(old); err != nil && o.Logger != nil {
				o.Logger.Warn("could not put this process's CPU affinity back", "err", err)
			}
		}()
		o.edgeCPUs = last
		realtime = rest.Count() > 1
		res.EdgeCPUs, res.LabCPUs = cpuplace.Format(last), cpuplace.Format(rest)
	}
	if err := o.LinkImpairments.Validate(); err != nil {
		return res, fmt.Errorf("link impairments: %w", err)
	}
	res.Impairments, res.Seed = o.LinkImpairments, o.Seed
	if o.HasOutage() {
		res.RecoveryBarMbps = harness.RecoveryBar * harness.GoodputLimitMbps(float64(o.RateBps))
	}
	for _, rtt := range append([]time.Duration{0}, o.RTTs...) {
		// Check every link before building the lab.
		cfg, _ := o.linkConfig(rtt)
		p, err := wanem.NewPipe(cfg)
		if err != nil {
			return res, fmt.Errorf("link at RTT %v: %w", rtt, err)
		}
		res.QueueBytes = int(p.QueueLimitBytes())
	}
	if o.QueueDelay > 0 {
		res.QueueDelayMs = ms(o.QueueDelay)
	}
	l, srv, closeLab, err := harness.IperfEdgesLab(ctx, o.CC, lab.Options{Kind: lab.Edges, LinkCommand: o.LinkCommand, Realtime: realtime, Logger: o.Logger, LinkOffload: o.LinkOffload})
	if err != nil {
		return res, err
	}
	defer closeLab()
	haveZero := false
	for _, rtt := range o.RTTs {
		haveZero = haveZero || rtt == 0
	}
	plainRuns := o.Runs
	if o.PlainRuns > 0 {
		plainRuns = o.PlainRuns
	}
	total := len(o.RTTs) * len(o.Profiles) * (plainRuns + o.Runs + 1)
	if !haveZero {
		total += len(o.Profiles) * plainRuns
	}
	done := 0
	measure := func(pt Point, what string, n int) ([]harness.IperfResult, error) {
		rtt := time.Duration(pt.RTTms * float64(time.Millisecond))
		imp := o.LinkImpairments
		if what == "plain-ref" {
			imp = LinkImpairments{} // the reference runs on the clean link
		}
		// Plain TCP crawls on a lossy link, and waits out the outage.
		timeout := harness.LossyRunTimeout(o.BytesPerStream*int64(o.Streams), float64(o.RateBps), o.Streams, rtt, imp.LossPct+imp.BurstLossPct) + imp.OutageFor
		var runs []harness.IperfResult
		for i := 0; i < n; i++ {
			if err := harness.ApplyTCP(ctx, l, o.CC, profileOf(o.Profiles, pt.Profile)); err != nil {
				return nil, err
			}
			run := harness.IperfRun{BytesPerStream: o.BytesPerStream, Streams: o.Streams, Timeout: timeout,
				OutageAt: imp.OutageAt, OutageFor: imp.OutageFor, LinkBps: float64(o.RateBps), Interval: harness.ReportInterval(rtt), Upload: o.Upload}
			r, err := harness.RunIperf(ctx, l, l.Client, srv, run)
			if err != nil {
				return nil, fmt.Errorf("rtt %gms profile %s, %s run %d: %w", pt.RTTms, pt.Profile, what, i+1, err)
			}
			runs = append(runs, r)
			done++
			if o.Progress != nil {
				o.Progress(done, total, pt, what, r)
			}
		}
		return runs, nil
	}
	startLink := func(rtt time.Duration) error {
		ab, ba := o.linkConfig(rtt)
		return l.StartLink(ctx, ab, ba)
	}

	if !haveZero {
		// The bar is relative to plain TCP at 0 ms on the clean link,
		// whatever impairments the rows have.
		clean := o
		clean.LinkImpairments = LinkImpairments{}
		ab, ba := clean.linkConfig(0)
		if err := l.StartLink(ctx, ab, ba); err != nil {
			return res, err
		}
		for _, prof := range o.Profiles {
			runs, err := measure(Point{RTTms: 0, CC: o.CC, Profile: prof.Name}, "plain-ref", plainRuns)
			if err != nil {
				return res, err
			}
			res.Plain0ms[prof.Name] = measuredMean(runs)
		}
	}
	for _, rtt := range o.RTTs {
		if err := startLink(rtt); err != nil {
			return res, err
		}
		rows := make([]RTTSweepRow, len(o.Profiles))
		for i, prof := range o.Profiles {
			pt := Point{RTTms: ms(rtt), CC: o.CC, Profile: prof.Name}
			rows[i] = RTTSweepRow{RTTms: pt.RTTms, Profile: prof.Name}
			if rows[i].PlainRuns, err = measure(pt, "plain", plainRuns); err != nil {
				return res, err
			}
			rows[i].PlainMbps = measuredMean(rows[i].PlainRuns)
			rows[i].PlainFailed, rows[i].PlainRecoveryS = outageSummary(rows[i].PlainRuns)
			if rtt == 0 {
				res.Plain0ms[prof.Name] = rows[i].PlainMbps
			}
		}
		for i, prof := range o.Profiles {
			pt := Point{RTTms: ms(rtt), CC: o.CC, Profile: prof.Name}
			if err := sweepWanopt(ctx, l, srv, o, &rows[i], func(what string, n int) ([]harness.IperfResult, error) { return measure(pt, what, n) }); err != nil {
				return res, fmt.Errorf("rtt %v profile %s through wanopt: %w", rtt, prof.Name, err)
			}
		}
		res.Rows = append(res.Rows, rows...)
		st := l.StopLink()
		o.Logger.Debug("link counters", "rtt", rtt, "ab", st.AB, "ba", st.BA)
	}
	res.FillRatios()
	return res, nil
}

// measuredMean is the published reduction (trimmedMean) of the runs that
// did not fail; 0 if all failed.
func measuredMean(runs []harness.IperfResult) float64 {
	ok := slices.DeleteFunc(slices.Clone(runs), func(r harness.IperfResult) bool { return r.Failed })
	if len(ok) == 0 {
		return 0
	}
	m, _ := trimmedMean(ok)
	return m
}

// outageSummary counts the failed runs and returns the mean recovery time:
// NotRecovered if none the outage hit recovered, 0 if it hit none.
func outageSummary(runs []harness.IperfResult) (failed int, recoveryS float64) {
	var hit, recovered int
	for _, r := range runs {
		switch {
		case r.Failed:
			failed++
		case r.RecoveryS > 0:
			recovered++
			recoveryS += r.RecoveryS
			hit++
		case r.RecoveryS == harness.NotRecovered:
			hit++
		}
	}
	switch {
	case recovered > 0:
		return failed, recoveryS / float64(recovered)
	case hit > 0:
		return failed, harness.NotRecovered
	}
	return failed, 0
}

// FillRatios sets each row's ratio once the rows are measured: 0 ms need
// not come first in RTTs. Rows whose profile has no 0 ms figure keep 0.
func (r *RTTSweepResult) FillRatios() {
	for i := range r.Rows {
		if ref := r.Plain0ms[r.Rows[i].Profile]; ref > 0 {
			r.Rows[i].Ratio = r.Rows[i].WanoptMbps / ref
		}
	}
}

// sweepWanopt measures one row through a fresh pair of wanopt edges: the
// cold run, a warming transfer, then the runs.
func sweepWanopt(ctx context.Context, l *lab.Lab, srv *harness.IperfServer, o RTTSweepOptions, row *RTTSweepRow, measure func(what string, n int) ([]harness.IperfResult, error)) error {
	edges, err := harness.StartEdges(ctx, l, o.edgeOptions(l))
	if err != nil {
		return err
	}
	defer edges.Stop()
	cold, err := measure("cold", 1)
	if err != nil {
		return err
	}
	row.Cold, row.ColdMbps = cold[0], cold[0].Mbps
	_, row.ColdRecoveryS = outageSummary(cold)
	if cold[0].Failed {
		waitAfterFailure(o, edges)
	}
	if _, err := harness.RunIperf(ctx, l, l.Client, srv, harness.IperfRun{BytesPerStream: o.WarmBytes, Streams: o.Streams, Timeout: 60 * time.Second, Upload: o.Upload}); err != nil {
		return fmt.Errorf("warming transfer: %w", err)
	}
	if err := edges.WaitNoFlows(10 * time.Second); err != nil {
		return err
	}
	near0, far0, err := edges.CPUTimes()
	if err != nil {
		return err
	}
	sender := "far"
	if o.Upload {
		sender = "near"
	}
	tun0, err := edges.Tunnel(sender)
	if err != nil {
		return err
	}
	start := time.Now()
	for range o.Runs {
		runs, err := measure("wanopt", 1)
		if err != nil {
			return err
		}
		row.WanoptRuns = append(row.WanoptRuns, runs...)
		if runs[0].Failed {
			waitAfterFailure(o, edges)
			continue
		}
		if err := edges.WaitNoFlows(10 * time.Second); err != nil {
			return err
		}
	}
	wall := time.Since(start)
	near1, far1, err := edges.CPUTimes()
	if err != nil {
		return err
	}
	near, far := near1.Sub(near0), far1.Sub(far0)
	row.NearCPUPct = 100 * near.Total().Seconds() / wall.Seconds()
	row.FarCPUPct = 100 * far.Total().Seconds() / wall.Seconds()
	row.NearUserS, row.NearSysS = near.User.Seconds(), near.System.Seconds()
	row.FarUserS, row.FarSysS = far.User.Seconds(), far.System.Seconds()
	row.EdgeCost = edgeCost(near, far, o.BytesPerStream, o.Streams, len(row.WanoptRuns))
	tun1, err := edges.Tunnel(sender)
	if err != nil {
		return err
	}
	row.FarProbeRTTs = tun1.ProbeRTTs - tun0.ProbeRTTs
	row.FarPacketsLost = tun1.PacketsLost - tun0.PacketsLost
	row.FarRetransPct = 100 * float64(tun1.Retransmitted-tun0.Retransmitted) / float64(max(1, tun1.BytesSent-tun0.BytesSent))
	o.Logger.Debug("edges' CPU", "rtt_ms", row.RTTms, "profile", row.Profile, "wall", wall, "near_cpu", near, "far_cpu", far)
	row.WanoptMbps = measuredMean(row.WanoptRuns)
	row.WanoptFailed, row.WanoptRecoveryS = outageSummary(row.WanoptRuns)
	return edges.Stop()
}

// edgeOptions are the wanopt edges of o's experiment on lab l.
func (o RTTSweepOptions) edgeOptions(l *lab.Lab) harness.EdgeOptions {
	eo := harness.EdgeOptions{Wanopt: o.Wanopt, Allow: []string{l.Server.Addr.String() + "/32:5001"}, Transparent: o.Transparent, EdgeCPU: o.EdgeCPU, EdgeWeight: o.EdgeWeight, CPUs: o.edgeCPUs}
	if o.WANRateHint {
		eo.Args = append(eo.Args, "--wan-rate", fmt.Sprintf("%dbit", o.RateBps))
	}
	if o.EdgeProcs > 0 {
		eo.Args = append(eo.Args, "--procs", fmt.Sprint(o.EdgeProcs))
	}
	return eo
}

// cpuSecondsPerGB is an edge's CPU seconds per GB (1e9 bytes) of iperf
// payload over runs transfers. A failed run counts as a whole transfer, so
// with outages the figure is a lower bound. 0 if nothing was moved.
func cpuSecondsPerGB(cpu harness.CPUTime, bytesPerStream int64, streams, runs int) float64 {
	gb := payloadMB(bytesPerStream, streams, runs) / 1e3
	if gb <= 0 {
		return 0
	}
	return cpu.Total().Seconds() / gb
}

// payloadMB is the iperf payload of runs transfers of streams ×
// bytesPerStream each, in MB (1e6 bytes).
func payloadMB(bytesPerStream int64, streams, runs int) float64 {
	return float64(bytesPerStream) * float64(streams) * float64(runs) / 1e6
}

// perMB is n per MB of mb; 0 if nothing was moved.
func perMB(n uint64, mb float64) float64 {
	if mb <= 0 {
		return 0
	}
	return float64(n) / mb
}

// waitAfterFailure gives the edges time to drop the flows of a run that
// failed during an outage. Flows still listed are logged, not fatal.
func waitAfterFailure(o RTTSweepOptions, edges *harness.Edges) {
	if err := edges.WaitNoFlows(30 * time.Second); err != nil {
		o.Logger.Warn("after a failed run", "err", err)
	}
}

func maxRef(m map[string]float64) float64 {
	v := 0.0
	for _, x := range m {
		v = max(v, x)
	}
	return v
}

func profileOf(ps []harness.Profile, name string) harness.Profile {
	for _, p := range ps {
		if p.Name == name {
			return p
		}
	}
	return harness.Modern
}

// Markdown renders the experiment as a markdown table. With an outage it
// adds each path's recovery time (see recoveryCell) and the failed runs.
func (r RTTSweepResult) Markdown() string {
	outage := r.Impairments.HasOutage()
	cols := []report.Column{report.Num("RTT ms"), report.Text("profile"), report.Num("plain TCP Mbit/s"), report.Num("wanopt Mbit/s"), report.Num("wanopt / plain 0 ms"),
		report.Num("cold tunnel Mbit/s"), report.Num("near edge CPU %"), report.Num("far edge CPU %"), report.Num("near CPU-s/GB"), report.Num("far CPU-s/GB"),
		report.Num("near / far wake-ups per MB (preemptions)"), report.Num("ProbeRTTs"), report.Num("plain runs min–max (n)"), report.Num("wanopt runs min–max (n)")}
	if outage {
		cols = append(cols, report.Num("plain TCP recovery s"), report.Num("wanopt recovery s"), report.Num("cold recovery s"), report.Num("failed runs plain/wanopt/cold"))
	}
	t := report.NewTable(cols...)
	for _, row := range r.Rows {
		cells := []string{fmt.Sprintf("%.0f", row.RTTms), row.Profile, fmt.Sprintf("%.1f", row.PlainMbps), fmt.Sprintf("%.1f", row.WanoptMbps),
			fmt.Sprintf("%.2f", row.Ratio), fmt.Sprintf("%.1f", row.ColdMbps), fmt.Sprintf("%.0f", row.NearCPUPct), fmt.Sprintf("%.0f", row.FarCPUPct),
			perGBCell(row.NearCPUsPerGB), perGBCell(row.FarCPUsPerGB), switchesCell(row), fmt.Sprint(row.FarProbeRTTs),
			spreadCell(row.PlainRuns), spreadCell(row.WanoptRuns)}
		if outage {
			coldFailed := 0
			if row.Cold.Failed {
				coldFailed = 1
			}
			cells = append(cells, recoveryCell(row.PlainRuns), recoveryCell(row.WanoptRuns), recoveryCell([]harness.IperfResult{row.Cold}),
				fmt.Sprintf("%d/%d/%d", row.PlainFailed, row.WanoptFailed, coldFailed))
		}
		t.Add(cells...)
	}
	return t.Markdown()
}

// spreadCell shows the lowest and highest of the runs that did not fail,
// and how many there were ("–": none).
func spreadCell(runs []harness.IperfResult) string {
	lo, hi, n := 0.0, 0.0, 0
	for _, r := range runs {
		if r.Failed {
			continue
		}
		if n == 0 || r.Mbps < lo {
			lo = r.Mbps
		}
		hi = max(hi, r.Mbps)
		n++
	}
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f–%.1f (%d)", lo, hi, n)
}

// perGBCell shows CPU-seconds per GB; "–" where none was recorded.
func perGBCell(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", v)
}

// switchesCell shows each edge's wake-ups per MB with its preemptions in
// parentheses; "–" where none were recorded.
func switchesCell(row RTTSweepRow) string {
	if row.NearWakeupsPerMB == 0 && row.FarWakeupsPerMB == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f (%.0f) / %.0f (%.0f)", row.NearWakeupsPerMB, row.NearPreemptionsPerMB, row.FarWakeupsPerMB, row.FarPreemptionsPerMB)
}

// recoveryCell shows the mean recovery time of runs with an outage, with
// how many never recovered; "never" if none did, "–" if none was hit.
func recoveryCell(runs []harness.IperfResult) string {
	_, mean := outageSummary(runs)
	never := 0
	for _, r := range runs {
		if !r.Failed && r.RecoveryS == harness.NotRecovered {
			never++
		}
	}
	switch {
	case mean == 0:
		return "–"
	case mean == harness.NotRecovered:
		return "never"
	case never > 0:
		return fmt.Sprintf("%.1f (%d never)", mean, never)
	}
	return fmt.Sprintf("%.1f", mean)
}

// Line is the closing key=value summary for the last row (the last RTT).
func (r RTTSweepResult) Line() string {
	if len(r.Rows) == 0 {
		return "rtt_ms=0 profile= direct_mbps=0 wanopt_mbps=0 link_ratio=0"
	}
	row := r.Rows[len(r.Rows)-1]
	ratio := 0.0
	if r.RateMbps > 0 {
		ratio = row.WanoptMbps / r.RateMbps
	}
	return fmt.Sprintf("rtt_ms=%.0f profile=%s direct_mbps=%.1f wanopt_mbps=%.1f link_ratio=%.3f", row.RTTms, row.Profile, row.PlainMbps, row.WanoptMbps, ratio)
}

// direction names the transfer's direction in the chart's title.
func (r RTTSweepResult) direction() string {
	if r.Upload {
		return "(upload)"
	}
	return "-R"
}

// WriteFiles writes cisco.json, cisco.md and cisco.png into dir.
func (r RTTSweepResult) WriteFiles(dir string) error {
	return report.Write(dir, "cisco", r, r.Markdown(), r.Chart())
}

// Chart draws throughput against RTT, wanopt and plain TCP per profile,
// with the 95 % bar and, for downloads, the published figures.
func (r RTTSweepResult) Chart() *report.Chart {
	p := report.Panel{
		Title:  fmt.Sprintf("wanopt against plain TCP over a %.0f Mbit/s link: iperf -P %d %s, %d MiB per stream", r.RateMbps, r.Streams, r.direction(), r.BytesPerStream>>20),
		XLabel: "RTT (ms)", YLabel: "throughput (Mbit/s)",
		XMin: -10, XMax: 260, YMin: 0, YMax: r.RateMbps * 1.08, XStep: 50, YStep: 50, LegendLeft: true,
	}
	for _, row := range r.Rows {
		p.XMax = max(p.XMax, row.RTTms+10)
	}
	var order []string
	plain, wan := map[string][]report.XY{}, map[string][]report.XY{}
	for _, row := range r.Rows {
		if _, ok := plain[row.Profile]; !ok {
			order = append(order, row.Profile)
		}
		plain[row.Profile] = append(plain[row.Profile], report.XY{X: row.RTTms, Y: row.PlainMbps})
		wan[row.Profile] = append(wan[row.Profile], report.XY{X: row.RTTms, Y: row.WanoptMbps})
	}
	for i, prof := range order {
		c, ok := profileColors[prof]
		if !ok {
			c = color.RGBA{R: uint8(40 * i), G: 160, B: 44, A: 255}
		}
		p.Series = append(p.Series,
			report.Series{Name: fmt.Sprintf("wanopt (%s endpoints)", prof), Points: wan[prof], Color: c},
			report.Series{Name: fmt.Sprintf("plain TCP (%s endpoints)", prof), Points: plain[prof], Color: c, Dashes: []float64{6, 3}, Glyph: report.Box})
	}
	if ref := maxRef(r.Plain0ms); ref > 0 {
		p.Series = append(p.Series, report.Series{Name: "bar: 95 % of plain TCP at 0 ms", Kind: report.Line,
			Points: []report.XY{{X: p.XMin, Y: 0.95 * ref}, {X: p.XMax, Y: 0.95 * ref}}, Color: color.Gray{Y: 110}, Dashes: []float64{2, 3}})
	}
	if !r.Upload { // the published figures are downloads
		p.Series = append(p.Series, publishedSeries("published plain TCP", publishedPlainTCP, report.Cross),
			publishedSeries("published router optimisation", publishedOptimised, report.Plus))
	}
	return &report.Chart{Panels: []report.Panel{p}, Width: 9, Height: 5.5}
}
