package exp

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/harness/labtest"
)

func TestABOrderAlternates(t *testing.T) {
	var seq []string
	for p := range 4 {
		o := abOrder(p)
		seq = append(seq, o[0], o[1])
	}
	if got := strings.Join(seq, ""); got != "abbaabba" {
		t.Errorf("order over four pairs = %s, want abbaabba", got)
	}
}

func TestMeanCI95(t *testing.T) {
	// Differences 1, 2, 3: mean 2, sd 1, t(2) = 4.303, half-width 4.303/√3.
	mean, half := meanCI95([]float64{1, 2, 3})
	if mean != 2 || math.Abs(half-4.303/math.Sqrt(3)) > 1e-9 {
		t.Errorf("meanCI95(1,2,3) = %v ± %v, want 2 ± %v", mean, half, 4.303/math.Sqrt(3))
	}
	if m, h := meanCI95([]float64{5}); m != 5 || h != 0 {
		t.Errorf("one value: %v ± %v, want 5 ± 0", m, h)
	}
	if m, h := meanCI95(nil); m != 0 || h != 0 {
		t.Errorf("no value: %v ± %v, want 0 ± 0", m, h)
	}
	if tCrit95(100) != 1.96 || tCrit95(1) != 12.706 || tCrit95(30) != 2.042 {
		t.Errorf("tCrit95: 1 → %v, 30 → %v, 100 → %v", tCrit95(1), tCrit95(30), tCrit95(100))
	}
}

// TestABMetricsPairs: each pair's B figure minus its A figure, whichever
// ran first, and a pair missing a leg counts in no figure.
func TestABMetricsPairs(t *testing.T) {
	leg := func(bin string, pair int, mbps, near, far float64) ABLeg {
		return ABLeg{Binary: bin, Pair: pair, Run: harness.IperfResult{Mbps: mbps}, EdgeCost: EdgeCost{NearCPUsPerGB: near, FarCPUsPerGB: far}}
	}
	legs := []ABLeg{
		leg("a", 1, 230, 4.0, 4.0), leg("b", 1, 231, 3.6, 4.1),
		leg("b", 2, 232, 3.9, 3.9), leg("a", 2, 229, 4.4, 3.8),
		leg("a", 3, 228, 4.1, 4.2), leg("b", 3, 233, 3.8, 4.0),
		leg("a", 4, 230, 9.9, 9.9), // its B leg failed
	}
	ms := abMetrics(legs)
	byName := map[string]ABMetric{}
	for _, m := range ms {
		byName[m.Name] = m
	}
	near := byName["near CPU-s/GB"]
	if near.Pairs != 3 || near.BLower != 3 || math.Abs(near.MeanA-(4.0+4.4+4.1)/3) > 1e-9 || math.Abs(near.Diff-(-0.4-0.5-0.3)/3) > 1e-9 {
		t.Errorf("near: %+v; want 3 pairs, B lower in 3, mean A 4.17, diff -0.4", near)
	}
	far := byName["far CPU-s/GB"]
	if far.BLower != 1 || math.Abs(far.Diff-(0.1+0.1-0.2)/3) > 1e-9 {
		t.Errorf("far: %+v; want B lower in 1 pair, diff 0", far)
	}
	if mb := byName["wanopt Mbit/s"]; math.Abs(mb.Diff-(1+3+5)/3.0) > 1e-9 || mb.CI95 <= 0 {
		t.Errorf("Mbit/s: %+v; want diff 3 with an interval", mb)
	}
	md := ABResult{Legs: legs, Metrics: ms}.Markdown()
	if !strings.Contains(md, "| near CPU-s/GB | 4.17 | 3.77 | -0.40 ± ") || !strings.Contains(md, "3 of 3") {
		t.Errorf("markdown lacks the near edge's comparison:\n%s", md)
	}
}

// TestBinaryABRefusesBeforeTheLab: settings an A/B cannot measure are
// refused with a reason before anything starts (no root needed).
func TestBinaryABRefusesBeforeTheLab(t *testing.T) {
	one := Published{RTTs: []time.Duration{0}, Runs: 1}
	for _, c := range []struct {
		name string
		o    ABOptions
		want string
	}{
		{"two RTTs", ABOptions{RTTSweepOptions: RTTSweepOptions{Published: Published{RTTs: []time.Duration{0, 50 * time.Millisecond}}, Profiles: []harness.Profile{harness.Modern}, Wanopt: "x"}, WanoptB: "y"}, "one RTT and one profile"},
		{"two profiles", ABOptions{RTTSweepOptions: RTTSweepOptions{Published: one, Wanopt: "x"}, WanoptB: "y"}, "one RTT and one profile"},
		{"one pair", ABOptions{RTTSweepOptions: RTTSweepOptions{Published: one, Profiles: []harness.Profile{harness.Modern}, Wanopt: "x"}, WanoptB: "y", Pairs: 1}, "at least 2"},
		{"outage", ABOptions{RTTSweepOptions: RTTSweepOptions{Published: one, Profiles: []harness.Profile{harness.Modern}, Wanopt: "x", LinkImpairments: LinkImpairments{OutageAt: time.Second, OutageFor: time.Second}}, WanoptB: "y"}, "no outage"},
		{"transparent", ABOptions{RTTSweepOptions: RTTSweepOptions{Published: one, Profiles: []harness.Profile{harness.Modern}, Wanopt: "x", Transparent: true}, WanoptB: "y"}, "kernel egress"},
		{"missing binary", ABOptions{RTTSweepOptions: RTTSweepOptions{Published: one, Profiles: []harness.Profile{harness.Modern}, Wanopt: "/nonexistent/wanopt"}, WanoptB: "y"}, "wanopt binary"},
	} {
		_, err := BinaryAB(context.Background(), c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want one that says %q", c.name, err, c.want)
		}
	}
}

// TestBinaryABInLab runs a short comparison on the lab (one binary as A and
// B, two pairs): legs in abOrder, each with a throughput and edge costs.
func TestBinaryABInLab(t *testing.T) {
	labtest.NeedLab(t, "iperf iproute2", "iperf", "ip")
	wanopt := filepath.Join(labtest.BuildCommands(t, "wanopt"), "wanopt")
	t.Setenv(labtest.LinkEnv, "1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := ABOptions{RTTSweepOptions: RTTSweepOptions{Published: Published{RTTs: []time.Duration{0}, BytesPerStream: 4 << 20,
		LinkCommand: []string{os.Args[0]}}, Profiles: []harness.Profile{harness.Modern}, Wanopt: wanopt}, WanoptB: wanopt, Pairs: 2}
	res, err := BinaryAB(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, l := range res.Legs {
		order = append(order, l.Binary)
		if l.Run.Mbps <= 0 || l.NearCPUsPerGB <= 0 || l.FarCPUsPerGB <= 0 {
			t.Errorf("pair %d, binary %s: %.1f Mbit/s, near %.2f and far %.2f CPU-s/GB; want all above 0", l.Pair, l.Binary, l.Run.Mbps, l.NearCPUsPerGB, l.FarCPUsPerGB)
		}
	}
	if got := strings.Join(order, ""); got != "abba" {
		t.Errorf("legs in the order %s, want abba", got)
	}
	if res.PlainMbps <= 0 || len(res.Metrics) == 0 || res.Metrics[0].Pairs != 2 {
		t.Errorf("plain %.1f Mbit/s, metrics %+v; want a plain figure and two pairs compared", res.PlainMbps, res.Metrics)
	}
	t.Logf("plain %.1f Mbit/s; %s", res.PlainMbps, res.Markdown())
}
