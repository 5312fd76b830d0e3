package exp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/report"
)

// An A/B compares two wanopt binaries at one point of the published test, a
// fresh pair of edges per run. The edges' CPU per byte drifts between
// minutes by more than most changes move it, so the binaries' runs are
// seconds apart (A B B A A B …), and each pair's difference is reported.

// ABOptions configure BinaryAB: RTTSweepOptions at one RTT and one profile
// (Wanopt is binary A), and the binary to compare it with.
type ABOptions struct {
	RTTSweepOptions
	// WanoptB is binary B.
	WanoptB string
	// Pairs is how many runs of each binary (default 6).
	Pairs int
	// WarmShare is the share of a measured run's bytes a warming transfer
	// moves on each fresh pair of edges first (default 0.1): enough for the
	// tunnel to leave its startup.
	WarmShare float64
}

// ABLeg is one measured run of one binary on a fresh pair of edges.
type ABLeg struct {
	// Binary is "a" or "b"; Pair counts from 1.
	Binary string              `json:"binary"`
	Pair   int                 `json:"pair"`
	Run    harness.IperfResult `json:"run"`
	// EdgeCost is what each edge spent on the run.
	EdgeCost
	// The sending edge's tunnel during the run (see RTTSweepRow).
	ProbeRTTs   int    `json:"probe_rtts"`
	PacketsLost uint64 `json:"packets_lost"`
}

// EdgeCost is what each edge spent on some runs.
type EdgeCost struct {
	// Each edge's CPU seconds per GB of payload (see cpuSecondsPerGB).
	NearCPUsPerGB float64 `json:"near_cpu_s_per_gb"`
	FarCPUsPerGB  float64 `json:"far_cpu_s_per_gb"`
	// Each edge's wake-ups and preemptions (see CPUTime) per MB (1e6
	// bytes) of iperf payload: the wake-ups follow the edge's design, the
	// preemptions the machine around it.
	NearWakeupsPerMB     float64 `json:"near_wakeups_per_mb"`
	FarWakeupsPerMB      float64 `json:"far_wakeups_per_mb"`
	NearPreemptionsPerMB float64 `json:"near_preemptions_per_mb"`
	FarPreemptionsPerMB  float64 `json:"far_preemptions_per_mb"`
}

// edgeCost is EdgeCost for the edges' CPU over runs transfers.
func edgeCost(near, far harness.CPUTime, bytesPerStream int64, streams, runs int) EdgeCost {
	mb := payloadMB(bytesPerStream, streams, runs)
	return EdgeCost{
		NearCPUsPerGB:        cpuSecondsPerGB(near, bytesPerStream, streams, runs),
		FarCPUsPerGB:         cpuSecondsPerGB(far, bytesPerStream, streams, runs),
		NearWakeupsPerMB:     perMB(near.Wakeups, mb),
		FarWakeupsPerMB:      perMB(far.Wakeups, mb),
		NearPreemptionsPerMB: perMB(near.Preemptions, mb),
		FarPreemptionsPerMB:  perMB(far.Preemptions, mb),
	}
}

// ABMetric compares one figure of the two binaries over the pairs.
type ABMetric struct {
	Name  string  `json:"name"`
	MeanA float64 `json:"mean_a"`
	MeanB float64 `json:"mean_b"`
	// Diff is the mean over the pairs of B's figure minus A's, and CI95
	// the half-width of its 95 % confidence interval (Student's t): an
	// interval holding 0 is not told from the spread.
	Diff float64 `json:"diff_b_minus_a"`
	CI95 float64 `json:"ci95"`
	// BLower is in how many pairs B's figure was the lower.
	BLower int `json:"pairs_b_lower"`
	Pairs  int `json:"pairs"`
}

// ErrABOnePoint refuses an A/B at more than one RTT or profile.
var ErrABOnePoint = errors.New("an A/B compares at one point: give one RTT and one profile (Published.RTTs, RTTSweepOptions.Profiles)")

// ABResult is the whole comparison.
type ABResult struct {
	BinaryA        string  `json:"binary_a"`
	BinaryB        string  `json:"binary_b"`
	RTTms          float64 `json:"rtt_ms"`
	Profile        string  `json:"profile"`
	RateMbps       float64 `json:"rate_mbps"`
	QueueBytes     int     `json:"queue_bytes"`
	BytesPerStream int64   `json:"bytes_per_stream"`
	Streams        int     `json:"streams"`
	Upload         bool    `json:"upload,omitempty"`
	EdgeCPU        float64 `json:"edge_cpu_cores,omitempty"`
	EdgeWeight     int     `json:"edge_cpu_weight,omitempty"`
	LinkOffload    bool    `json:"link_offload,omitempty"`
	// PlainMbps is plain TCP at this point, measured first (PlainRuns).
	PlainMbps float64               `json:"plain_mbps"`
	PlainRuns []harness.IperfResult `json:"plain_runs"`
	Legs      []ABLeg               `json:"legs"`
	Metrics   []ABMetric            `json:"metrics"`
	Started   time.Time             `json:"started"`
	Took      time.Duration         `json:"took_ns"`
	Impair    LinkImpairments       `json:"impairments"`
}

// abOrder is the order of the binaries in pair p (from 0): A B, B A, …
func abOrder(p int) [2]string {
	if p%2 == 0 {
		return [2]string{"a", "b"}
	}
	return [2]string{"b", "a"}
}

// BinaryAB alternates binaries A and B at one point of the published test on
// one lab: plain TCP first (PlainRuns, default 1), then Pairs pairs of
// wanopt runs in abOrder on fresh, warmed edges. A failed run ends it.
func BinaryAB(ctx context.Context, o ABOptions) (ABResult, error) {
	o.defaults()
	if o.Pairs == 0 {
		o.Pairs = 6
	}
	if o.WarmShare == 0 {
		o.WarmShare = 0.1
	}
	res := ABResult{BinaryA: o.Wanopt, BinaryB: o.WanoptB, RateMbps: float64(o.RateBps) / 1e6, QueueBytes: o.QueueBytes,
		BytesPerStream: o.BytesPerStream, Streams: o.Streams, Upload: o.Upload, EdgeCPU: o.EdgeCPU, EdgeWeight: o.EdgeWeight,
		LinkOffload: o.LinkOffload, Started: time.Now(), Impair: o.LinkImpairments}
	switch {
	case len(o.RTTs) != 1 || len(o.Profiles) != 1:
		return res, ErrABOnePoint
	case o.Pairs < 2:
		return res, fmt.Errorf("%d pairs: want at least 2 (a confidence interval needs two differences)", o.Pairs)
	case o.WarmShare < 0 || o.WarmShare > 1:
		return res, fmt.Errorf("warming share %g: want 0 to 1", o.WarmShare)
	case o.EdgesApart:
		return res, errors.New("an A/B does not place the edges apart (EdgesApart)")
	case o.Transparent:
		return res, errors.New("an A/B runs the kernel egress only (not Transparent)")
	case o.HasOutage():
		return res, errors.New("an A/B measures cost, not recovery: no outage")
	}
	for _, bin := range []string{o.Wanopt, o.WanoptB} {
		if _, err := os.Stat(bin); err != nil {
			return res, fmt.Errorf("wanopt binary: %w", err)
		}
	}
	if err := harness.CheckEdgeCPU(o.EdgeCPU, o.EdgeWeight); err != nil {
		return res, err
	}
	if err := o.LinkImpairments.Validate(); err != nil {
		return res, fmt.Errorf("link impairments: %w", err)
	}
	rtt, prof := o.RTTs[0], o.Profiles[0]
	res.RTTms, res.Profile = ms(rtt), prof.Name
	l, srv, closeLab, err := harness.IperfEdgesLab(ctx, o.CC, lab.Options{Kind: lab.Edges, LinkCommand: o.LinkCommand, Realtime: true, Logger: o.Logger, LinkOffload: o.LinkOffload})
	if err != nil {
		return res, err
	}
	defer closeLab()
	ab, ba := o.linkConfig(rtt)
	if err := l.StartLink(ctx, ab, ba); err != nil {
		return res, err
	}
	timeout := harness.LossyRunTimeout(o.BytesPerStream*int64(o.Streams), float64(o.RateBps), o.Streams, rtt, o.LossPct+o.BurstLossPct)
	run := func(what string, bytesPerStream int64) (harness.IperfResult, error) {
		if err := harness.ApplyTCP(ctx, l, o.CC, prof); err != nil {
			return harness.IperfResult{}, err
		}
		r, err := harness.RunIperf(ctx, l, l.Client, srv, harness.IperfRun{BytesPerStream: bytesPerStream, Streams: o.Streams, Timeout: timeout, Upload: o.Upload})
		if err != nil {
			return r, fmt.Errorf("%s run: %w", what, err)
		}
		if o.Progress != nil && !strings.HasPrefix(what, "warming") {
			o.Progress(0, 0, Point{RTTms: res.RTTms, CC: o.CC, Profile: prof.Name}, what, r)
		}
		return r, nil
	}
	plainRuns := max(o.PlainRuns, 1)
	for range plainRuns {
		r, err := run("plain", o.BytesPerStream)
		if err != nil {
			return res, err
		}
		res.PlainRuns = append(res.PlainRuns, r)
	}
	res.PlainMbps = measuredMean(res.PlainRuns)
	warm := max(int64(float64(o.BytesPerStream)*o.WarmShare), o.WarmBytes)
	for p := range o.Pairs {
		for _, which := range abOrder(p) {
			bin := o.Wanopt
			if which == "b" {
				bin = o.WanoptB
			}
			leg, err := abLeg(ctx, l, o.RTTSweepOptions, bin, warm, func(what string, bytes int64) (harness.IperfResult, error) {
				return run(what+" "+which, bytes)
			})
			if err != nil {
				return res, fmt.Errorf("pair %d, binary %s (%s): %w", p+1, which, bin, err)
			}
			leg.Binary, leg.Pair = which, p+1
			res.Legs = append(res.Legs, leg)
		}
	}
	res.Metrics = abMetrics(res.Legs)
	res.Took = time.Since(res.Started)
	return res, nil
}

// abLeg starts a fresh pair of edges of binary bin, warms its tunnel with
// a transfer of warmBytes per stream, and measures one run through it.
func abLeg(ctx context.Context, l *lab.Lab, o RTTSweepOptions, bin string, warmBytes int64, run func(what string, bytesPerStream int64) (harness.IperfResult, error)) (ABLeg, error) {
	eo := o.edgeOptions(l)
	eo.Wanopt = bin
	edges, err := harness.StartEdges(ctx, l, eo)
	if err != nil {
		return ABLeg{}, err
	}
	defer edges.Stop()
	if _, err := run("warming", warmBytes); err != nil {
		return ABLeg{}, err
	}
	if err := edges.WaitNoFlows(10 * time.Second); err != nil {
		return ABLeg{}, err
	}
	sender := "far"
	if o.Upload {
		sender = "near"
	}
	tun0, err := edges.Tunnel(sender)
	if err != nil {
		return ABLeg{}, err
	}
	near0, far0, err := edges.CPUTimes()
	if err != nil {
		return ABLeg{}, err
	}
	r, err := run("wanopt", o.BytesPerStream)
	if err != nil {
		return ABLeg{}, err
	}
	if err := edges.WaitNoFlows(10 * time.Second); err != nil {
		return ABLeg{}, err
	}
	near1, far1, err := edges.CPUTimes()
	if err != nil {
		return ABLeg{}, err
	}
	tun1, err := edges.Tunnel(sender)
	if err != nil {
		return ABLeg{}, err
	}
	leg := ABLeg{Run: r, EdgeCost: edgeCost(near1.Sub(near0), far1.Sub(far0), o.BytesPerStream, o.Streams, 1),
		ProbeRTTs: tun1.ProbeRTTs - tun0.ProbeRTTs, PacketsLost: tun1.PacketsLost - tun0.PacketsLost}
	return leg, edges.Stop()
}

// abMetrics compares the legs' figures pair by pair.
func abMetrics(legs []ABLeg) []ABMetric {
	figures := []struct {
		name string
		of   func(ABLeg) float64
	}{
		{"wanopt Mbit/s", func(l ABLeg) float64 { return l.Run.Mbps }},
		{"near CPU-s/GB", func(l ABLeg) float64 { return l.NearCPUsPerGB }},
		{"far CPU-s/GB", func(l ABLeg) float64 { return l.FarCPUsPerGB }},
		{"near wake-ups/MB", func(l ABLeg) float64 { return l.NearWakeupsPerMB }},
		{"far wake-ups/MB", func(l ABLeg) float64 { return l.FarWakeupsPerMB }},
		{"near preemptions/MB", func(l ABLeg) float64 { return l.NearPreemptionsPerMB }},
		{"far preemptions/MB", func(l ABLeg) float64 { return l.FarPreemptionsPerMB }},
		{"sender's ProbeRTTs", func(l ABLeg) float64 { return float64(l.ProbeRTTs) }},
		{"sender's packets lost", func(l ABLeg) float64 { return float64(l.PacketsLost) }},
	}
	pairs := map[int][2]*ABLeg{}
	var order []int
	for i := range legs {
		l := &legs[i]
		pr, seen := pairs[l.Pair]
		if !seen {
			order = append(order, l.Pair)
		}
		if l.Binary == "a" {
			pr[0] = l
		} else {
			pr[1] = l
		}
		pairs[l.Pair] = pr
	}
	var ms []ABMetric
	for _, f := range figures {
		m := ABMetric{Name: f.name}
		var diffs []float64
		for _, p := range order {
			pr := pairs[p]
			if pr[0] == nil || pr[1] == nil {
				continue
			}
			a, b := f.of(*pr[0]), f.of(*pr[1])
			m.MeanA += a
			m.MeanB += b
			diffs = append(diffs, b-a)
			if b < a {
				m.BLower++
			}
		}
		m.Pairs = len(diffs)
		if m.Pairs > 0 {
			m.MeanA /= float64(m.Pairs)
			m.MeanB /= float64(m.Pairs)
		}
		m.Diff, m.CI95 = meanCI95(diffs)
		ms = append(ms, m)
	}
	return ms
}

// meanCI95 returns the mean of xs and the half-width of its 95 %
// confidence interval by Student's t (0 with fewer than two values).
func meanCI95(xs []float64) (mean, half float64) {
	n := len(xs)
	if n == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(n)
	if n < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(ss / float64(n-1))
	return mean, tCrit95(n-1) * sd / math.Sqrt(float64(n))
}

// tCrit95 is Student's t for a two-sided 95 % interval with dof degrees of
// freedom (the normal's 1.96 beyond 30).
func tCrit95(dof int) float64 {
	table := [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if dof >= 1 && dof <= len(table) {
		return table[dof-1]
	}
	return 1.96
}

// Markdown is the legs, then the comparison.
func (r ABResult) Markdown() string {
	legs := report.NewTable(report.Num("pair"), report.Text("binary"), report.Num("wanopt Mbit/s"), report.Num("near CPU-s/GB"), report.Num("far CPU-s/GB"),
		report.Num("near / far wake-ups per MB (preemptions)"), report.Num("sender's ProbeRTTs, packets lost"))
	for _, l := range r.Legs {
		legs.Addf("%d | %s | %.1f | %.2f | %.2f | %.0f (%.0f) / %.0f (%.0f) | %d, %d", l.Pair, l.Binary, l.Run.Mbps,
			l.NearCPUsPerGB, l.FarCPUsPerGB, l.NearWakeupsPerMB, l.NearPreemptionsPerMB, l.FarWakeupsPerMB, l.FarPreemptionsPerMB, l.ProbeRTTs, l.PacketsLost)
	}
	cmp := report.NewTable(report.Text("figure"), report.Num("a (mean)"), report.Num("b (mean)"), report.Num("b − a, mean of the pairs ± 95 %"),
		report.Num("b − a / a"), report.Num("pairs where b is lower"))
	for _, m := range r.Metrics {
		rel := "–"
		if m.MeanA != 0 {
			rel = fmt.Sprintf("%+.1f %%", 100*m.Diff/m.MeanA)
		}
		cmp.Addf("%s | %.2f | %.2f | %+.2f ± %.2f | %s | %d of %d", m.Name, m.MeanA, m.MeanB, m.Diff, m.CI95, rel, m.BLower, m.Pairs)
	}
	return legs.Markdown() + "\n" + cmp.Markdown()
}

// WriteFiles writes ab.json and ab.md into dir.
func (r ABResult) WriteFiles(dir string) error {
	return report.Write(dir, "ab", r, r.Markdown(), nil)
}
