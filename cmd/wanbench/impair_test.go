package main

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/wanopt/wanopt/bench/exp"
)

func parseImpairments(args ...string) (exp.LinkImpairments, error) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	f := addImpairmentFlags(fs)
	if err := fs.Parse(args); err != nil {
		return exp.LinkImpairments{}, err
	}
	return f.impairments()
}

func TestImpairmentFlags(t *testing.T) {
	m, err := parseImpairments("--loss", "1%", "--jitter", "10ms", "--reorder", "1%", "--dup", "0.1%",
		"--burst-loss", "2%", "--burst-len", "4", "--outage-at", "10s", "--outage-for", "60s")
	if err != nil {
		t.Fatal(err)
	}
	want := exp.LinkImpairments{LossPct: 1, Jitter: 10 * time.Millisecond, ReorderPct: 1, ReorderDelay: 2 * time.Millisecond, DupPct: 0.1,
		BurstLossPct: 2, BurstLen: 4, OutageAt: 10 * time.Second, OutageFor: time.Minute}
	if m != want {
		t.Errorf("got %+v\nwant %+v", m, want)
	}
	// Unset, the dependent settings stay out of the result (and the JSON).
	if m, err := parseImpairments(); err != nil || m != (exp.LinkImpairments{}) {
		t.Errorf("no flags: %+v, %v; want nothing", m, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--burst-loss", "2%", "--burst-len", "0.5"}, "at least 1 packet"},
		{[]string{"--burst-loss", "100%"}, "below 100%"},
		{[]string{"--outage-at", "10s"}, "outage"},
		{[]string{"--loss", "lots"}, "percentage"},
	} {
		if _, err := parseImpairments(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want one saying %q", c.args, err, c.want)
		}
	}
}
