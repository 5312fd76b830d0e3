package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/wanopt/wanopt/bench/exp"
	"github.com/wanopt/wanopt/bench/harness"
)

// runRTTSweep is 'wanbench rtt-sweep' (also 'cisco'): the published experiment with plain TCP
// and through a pair of wanopt edges, side by side on the edges lab.
func runRTTSweep(ctx context.Context, log *slog.Logger, args []string) error {
	fs := flags("rtt-sweep", `The published test (link capped at 250 Mbit/s, 2 MB queue, iperf 2
'iperf -c SERVER -n 100MB -P 4 -R', 5 runs, highest and lowest dropped)
on the edges lab: plain TCP through edges that only forward, then through a
pair of wanopt edges (the first run on a cold tunnel reported apart). Needs
root, iperf (version 2) and a wanopt binary (--wanopt, next to wanbench, or
on PATH; 'make build' puts both in bin/).

The impairment flags (--loss, --jitter, --reorder, --dup, --burst-loss,
--queue) apply to both directions, for plain TCP and wanopt alike. With
--outage-for, the link goes down --outage-at into every measured transfer;
the table then shows how long each path took, after the link came back, to
get back to 80 % of the link's goodput limit (rate x 1448/1500).

With --upload the client sends (iperf without -R), as a backup does, and
every figure is the iperf server's: the client's own counts the bytes its
socket took, which through the edges run megabytes ahead of the link.
`)
	pf := addPublishedFlags(fs, "cisco", []string{"modern", "legacy"})
	cc := fs.String("cc", "cubic", "the end hosts' kernel congestion control")
	wanopt := fs.String("wanopt", "", "the wanopt binary (default: next to wanbench, else on PATH)")
	egressMode := fs.String("egress", "kernel", "the far edge's egress: kernel (its own socket) or transparent (from the client's address, through its own TUN)")
	imp := addImpairmentFlags(fs)
	queueS := fs.String("queue", "", "drop-tail queue: bytes (2MB is 2 MiB) or time at the link rate (50ms); default the published 2,000,000 bytes")
	streams := fs.Int("streams", 4, "parallel streams (iperf -P)")
	seed := fs.Int64("seed", 1, "random seed of the link's impairments (one way; the other uses seed+1)")
	edgeProcs := fs.Int("edge-procs", 0, "run each wanopt edge with --procs N (GOMAXPROCS); 0: 1 with an --edge-cpu of 1 or less (as an edge in such a cgroup chooses itself), else the edge's own choice (one thread while it uses well under a core)")
	wanRateHint := fs.Bool("wan-rate-hint", false, "tell the edges the link's rate (wanopt run --wan-rate), so a new tunnel starts at it instead of probing (the cold column)")
	edgesApart := fs.Bool("edges-apart", false, "run both wanopt edges on the last CPU and the rest of the lab (the link emulator, iperf) on the others, so that the lab's processes do not preempt the edges: their own cost, as on an appliance of their own (needs two CPUs)")
	edgeCPU := fs.Float64("edge-cpu", 0, "hold each wanopt edge (near and far apart) to this many CPUs with a CPU-bandwidth cgroup, e.g. 0.5; 0: no cap")
	edgeWeight := fs.Int("edge-weight", 0, "give each wanopt edge a cgroup of this CPU weight (1-10000, cgroup v2's scale: 100 is any process's), as the systemd units' slice for the edges (system-wanopt.slice, CPUWeight=1000) does, so that the edges get their share first while other work contends for the CPUs; 0: none")
	linkOffload := fs.Bool("link-offload", false, "open the link's TUN devices with UDP segmentation offload: a sender's UDP GSO batch reaches the emulator whole, as a NIC with that offload takes it, instead of being segmented by the sender's kernel (Linux 6.2+)")
	upload := fs.Bool("upload", false, "send from the client to the server (iperf without -R), as a backup does, instead of the published download; each run's figure is then the iperf server's, since the client's counts bytes the near edge took, not bytes delivered")
	plainRuns := fs.Int("plain-runs", 0, "plain-TCP runs per point (default --runs): on a lossy link one plain run can take minutes")
	wanoptB := fs.String("wanopt-b", "", "compare the wanopt binary `B` with --wanopt (A) instead: at one --rtt and one --profile, one plain run (--plain-runs), then --pairs runs of each binary alternated A B B A …, each on a fresh pair of edges; the table gives each pair's figures and the mean difference with its 95 % interval (--runs is not used)")
	pairs := fs.Int("pairs", 6, "with --wanopt-b: runs of each binary")
	pub, profiles, done, err := parsePublished[exp.RTTSweepResult](fs, pf, args, log)
	if done {
		return err
	}
	if *streams < 1 {
		return fmt.Errorf("--streams %d: want at least 1", *streams)
	}
	pub.Streams = *streams
	var queueDelay time.Duration
	if *queueS != "" {
		// Given as time, the queue is RTTSweepOptions.QueueDelay.
		if pub.QueueBytes, queueDelay, err = parseQueue(*queueS); err != nil {
			return fmt.Errorf("--queue: %w", err)
		}
	}
	if *plainRuns < 0 {
		return fmt.Errorf("--plain-runs %d: want 1 or more (0: as --runs)", *plainRuns)
	}
	o := exp.RTTSweepOptions{Published: pub, Profiles: profiles, CC: *cc, Seed: *seed, QueueDelay: queueDelay, PlainRuns: *plainRuns, WANRateHint: *wanRateHint, EdgeCPU: *edgeCPU, EdgeWeight: *edgeWeight, EdgeProcs: *edgeProcs, LinkOffload: *linkOffload, EdgesApart: *edgesApart, Upload: *upload}
	if o.LinkImpairments, err = imp.impairments(); err != nil {
		return err
	}
	switch *egressMode {
	case "kernel":
	case "transparent":
		o.Transparent = true
	default:
		return fmt.Errorf("--egress %q: want kernel or transparent", *egressMode)
	}
	if o.Wanopt, err = findWanopt(*wanopt); err != nil {
		return err
	}
	if *wanoptB != "" {
		return runBinaryAB(ctx, exp.ABOptions{RTTSweepOptions: o, WanoptB: *wanoptB, Pairs: *pairs}, *pf.out)
	}
	start := time.Now()
	o.Progress = func(done, total int, p exp.Point, what string, r harness.IperfResult) {
		head := fmt.Sprintf("[%3d/%d %4.0fs] rtt=%gms profile=%s %-9s", done, total, time.Since(start).Seconds(), p.RTTms, p.Profile, what+":")
		var outage string
		switch {
		case !o.HasOutage():
		case r.OutageEndS == 0:
			outage = "; ended before the outage"
		case r.RecoveryS == harness.NotRecovered:
			outage = fmt.Sprintf("; outage %.1f-%.1f s, not back at 80%% of the link before the end", r.OutageStartS, r.OutageEndS)
		case r.RecoveryS > 0:
			outage = fmt.Sprintf("; outage %.1f-%.1f s, recovered in %.1f s", r.OutageStartS, r.OutageEndS, r.RecoveryS)
		}
		if r.Failed {
			fmt.Fprintf(os.Stderr, "%s FAILED (%s)%s\n", head, r.Error, outage)
			return
		}
		fmt.Fprintf(os.Stderr, "%s %6.1f Mbit/s in %.2f s%s\n", head, r.Mbps, r.Seconds, outage)
	}
	res, err := exp.RTTSweep(ctx, o)
	if err != nil {
		if len(res.Rows) == 0 {
			return err
		}
		// Keep the rows measured before the failure.
		res.FillRatios()
		if werr := res.WriteFiles(*pf.out); werr == nil {
			fmt.Fprintf(os.Stderr, "wrote the %d rows measured before the failure to %s\n", len(res.Rows), *pf.out)
		}
		fmt.Print(res.Markdown())
		return err
	}
	if err := res.WriteFiles(*pf.out); err != nil {
		return err
	}
	direction := "-R (download)"
	if res.Upload {
		direction = "(upload, measured at the server)"
	}
	fmt.Printf("\nPlain TCP and wanopt, link %.0f Mbit/s, %.1f MB drop-tail queue, impairments: %s (seed %d), iperf -n %dMB -P %d %s, %d runs per point, %s end hosts, %s egress, %s (%.0f s):\n\n",
		res.RateMbps, float64(res.QueueBytes)/1e6, res.Impairments, res.Seed, res.BytesPerStream>>20, res.Streams, direction, res.Runs, res.CC, res.Egress, edgeCPUText(res.EdgeCPU, res.EdgeWeight, res.EdgeProcs), time.Since(start).Seconds())
	if res.LinkOffload {
		fmt.Println("The link's TUN devices took UDP GSO batches whole (--link-offload).")
	}
	if res.EdgeCPUs != "" {
		fmt.Printf("The edges ran on CPU %s, the rest of the lab on CPU %s (--edges-apart).\n", res.EdgeCPUs, res.LabCPUs)
	}
	fmt.Print(res.Markdown())
	fmt.Printf("\nwanopt / plain 0 ms: against plain TCP's own 0 ms figure in this run (%s). Cold tunnel: the first run on a fresh pair of edges. CPU-s/GB: each edge's user + system CPU seconds over the measured runs per GB (1e9 bytes) of iperf payload they moved. Wake-ups per MB: each edge's voluntary context switches (a thread waited and was woken) per MB of that payload; in parentheses its preemptions (involuntary switches: another program took its CPU, or its --edge-cpu quota ran out).\n", fmtRefs(res.Plain0ms))
	if res.Impairments.HasOutage() {
		fmt.Printf("Recovery: seconds from the link's return until a report interval reached %.1f Mbit/s (80 %% of the link's goodput limit); never: not before the transfer ended; –: the outage hit no run that completed. Failed runs count in no mean.\n", res.RecoveryBarMbps)
	}
	fmt.Printf("wrote %s/cisco.{json,md,png}\n", *pf.out)
	fmt.Println(res.Line())
	return nil
}

func edgeCPUText(cores float64, weight, procs int) string {
	s := "edges' CPU not capped"
	if cores > 0 {
		s = fmt.Sprintf("each edge capped at %g CPUs", cores)
	}
	if weight > 0 {
		s += fmt.Sprintf(", edges' CPU weight %d (--edge-weight; any process's is 100)", weight)
	}
	if procs > 0 {
		s += fmt.Sprintf(", edges on %d threads (--procs)", procs)
	}
	return s
}

func fmtRefs(m map[string]float64) string {
	s := ""
	for _, k := range []string{"modern", "legacy"} {
		if v, ok := m[k]; ok {
			if s != "" {
				s += ", "
			}
			s += fmt.Sprintf("%s %.1f Mbit/s", k, v)
		}
	}
	return s
}

// runBinaryAB is 'wanbench cisco --wanopt-b': binaries A and B alternated
// at one point (exp.BinaryAB).
func runBinaryAB(ctx context.Context, o exp.ABOptions, out string) error {
	start := time.Now()
	o.Progress = func(_, _ int, p exp.Point, what string, r harness.IperfResult) {
		fmt.Fprintf(os.Stderr, "[%4.0fs] rtt=%gms profile=%s %-9s %6.1f Mbit/s in %.2f s\n", time.Since(start).Seconds(), p.RTTms, p.Profile, what+":", r.Mbps, r.Seconds)
	}
	res, err := exp.BinaryAB(ctx, o)
	if errors.Is(err, exp.ErrABOnePoint) {
		err = fmt.Errorf("%w: one --rtt and one --profile", err)
	}
	if err != nil {
		if len(res.Legs) > 0 {
			fmt.Print(res.Markdown())
		}
		return err
	}
	if err := res.WriteFiles(out); err != nil {
		return err
	}
	fmt.Printf("\nA: %s\nB: %s\nLink %.0f Mbit/s, %.1f MB drop-tail queue, RTT %g ms, profile %s, iperf -n %dMB -P %d, %s; plain TCP %.1f Mbit/s (%d min):\n\n",
		res.BinaryA, res.BinaryB, res.RateMbps, float64(res.QueueBytes)/1e6, res.RTTms, res.Profile, res.BytesPerStream>>20, res.Streams,
		edgeCPUText(res.EdgeCPU, res.EdgeWeight, o.EdgeProcs), res.PlainMbps, int(time.Since(start).Minutes()))
	fmt.Print(res.Markdown())
	fmt.Printf("\nEach pair is one run of each binary, a few seconds apart, on its own fresh pair of edges warmed first; b − a is the mean over the pairs of their difference, ± the half-width of its 95 %% interval (Student's t): an interval that holds 0 does not tell the binaries apart.\nwrote %s/ab.{json,md}\n", out)
	return nil
}
