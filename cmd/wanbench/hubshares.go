package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/wanopt/wanopt/bench/exp"
)

// runHubShares is 'wanbench hub-shares' (also 'hub'): how one hub shares a link among its branches.
func runHubShares(ctx context.Context, log *slog.Logger, args []string) error {
	fs := flags("hub-shares", `Several branches, each with its own near edge and tunnel, download at once
from one server through one wanopt hub (wanopt run --branch) across the
same emulated link. After a warm-up, each branch's goodput is counted over
the same interval; the table gives each branch's share of the fair share
(the total over the branches) and the total against the link's goodput
limit. The hub is told the link's rate (--hub-rate), as its operator
would; --no-hub-rate leaves it out. Needs root and a wanopt binary (--wanopt, next to wanbench, or on
PATH). Last line: branches=N rtt_ms=R total_mbps=X min_share=Y max_share=Z.
`)
	branches := fs.Int("branches", 3, "branches downloading at once (2 to 26)")
	rtt := fs.Duration("rtt", 100*time.Millisecond, "the link's round-trip time")
	rateS := fs.String("rate", "250mbit", "the link's rate")
	queueS := fs.String("queue", "", "drop-tail queue in bytes (default the published 2,000,000)")
	measure := fs.Duration("measure", 20*time.Second, "how long each branch's goodput is counted")
	warmup := fs.Duration("warmup", 8*time.Second, "how long the downloads run before counting")
	noHubRate := fs.Bool("no-hub-rate", false, "do not tell the hub the link's rate (wanopt run --hub-rate): measure the tunnels' controllers alone")
	wanopt := fs.String("wanopt", "", "the wanopt binary (default: next to wanbench, else on PATH)")
	out := fs.String("out", "out/hub", "folder for hub.json and hub.md")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if *branches < 2 || *branches > 26 {
		return fmt.Errorf("--branches %d: want 2 to 26", *branches)
	}
	rate, err := parseRate(*rateS)
	if err != nil {
		return fmt.Errorf("--rate: %w", err)
	}
	o := exp.HubSharesOptions{Branches: *branches, RTT: *rtt, RateBps: rate, Warmup: *warmup, Measure: *measure, NoHubRate: *noHubRate, Logger: log}
	if *queueS != "" {
		q, d, err := parseQueue(*queueS)
		if err != nil || d != 0 {
			return fmt.Errorf("--queue %q: want bytes, e.g. 2MB", *queueS)
		}
		o.QueueBytes = q
	}
	if o.Wanopt, o.LinkCommand, err = edgeLab(*wanopt); err != nil {
		return err
	}
	res, err := exp.HubShares(ctx, o)
	if err != nil {
		return err
	}
	fmt.Print("\n" + res.Markdown() + "\n")
	if err := res.WriteFiles(*out); err != nil {
		return err
	}
	fmt.Printf("wrote %s/hub.{json,md}\n%s\n", *out, res.Line())
	return nil
}
