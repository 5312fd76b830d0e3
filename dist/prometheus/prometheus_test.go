// Package prometheus_test checks what dist/prometheus ships: the alert
// rules pass promtool's checks and their unit tests, and every metric the
// rules, their tests and the Grafana dashboard name is one an edge
// exports, so that renaming a metric fails here rather than silently
// leaving an alert that never fires or a panel that stays empty.
package prometheus_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/edge/metrics"
)

// The files checked, and the metric names each must name at least.
var shipped = []struct {
	file string
	must []string
}{
	{"wanopt.rules.yml", []string{"wanopt_peer_up", "wanopt_handshakes_refused_total", "wanopt_flows_refused_total", "wanopt_peer_pmtu_black_holes_total", "process_start_time_seconds"}},
	{"wanopt.rules.test.yml", nil},
	{"grafana-dashboard.json", []string{"wanopt_peer_up", "wanopt_build_info"}},
}

// TestPromtool runs promtool on the rules: their syntax, then their unit
// tests. CI installs promtool (Debian's prometheus package).
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus): the rules are not checked here")
	}
	for _, args := range [][]string{{"check", "rules", "wanopt.rules.yml"}, {"test", "rules", "wanopt.rules.test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// metricName is a name in the namespaces an edge exports: its own and the
// Go client's runtime and process collectors.
var metricName = regexp.MustCompile(`\b(?:wanopt|process|go)_[a-z0-9_]*[a-z0-9]\b`)

// exported is every metric name an edge may export.
func exported(t *testing.T) []string {
	t.Helper()
	names := metrics.Names()
	mfs, err := metrics.Registry(func() control.Status { return control.Status{} }).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	return names
}

// TestMetricNames: every metric the shipped files name exists.
func TestMetricNames(t *testing.T) {
	have := exported(t)
	for _, f := range shipped {
		raw, err := os.ReadFile(f.file)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f.file, ".json") && !json.Valid(raw) {
			t.Errorf("%s is not valid JSON", f.file)
		}
		used := metricName.FindAllString(string(raw), -1)
		for _, n := range used {
			if !slices.Contains(have, n) {
				t.Errorf("%s names %s, which no edge exports", f.file, n)
			}
		}
		for _, n := range f.must {
			if !slices.Contains(used, n) {
				t.Errorf("%s does not name %s", f.file, n)
			}
		}
	}
}

// TestDashboardQueries: every panel of the dashboard has a query, and
// every query names a metric.
func TestDashboardQueries(t *testing.T) {
	raw, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Panels) == 0 {
		t.Fatal("no panels")
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if !metricName.MatchString(q.Expr) {
				t.Errorf("panel %q: query %q names no metric", p.Title, q.Expr)
			}
		}
	}
}
