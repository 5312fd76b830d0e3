package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	"github.com/wanopt/wanopt/bench/exp"
)

// runHub is 'wanbench hub': how one hub shares a link among its branches.
func runHub(ctx context.Context, log *slog.Logger, args []string) error {
	fs := pflag.NewFlagSet("hub", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `Usage: wanbench hub [flags]

Several branches, each with its own near edge and tunnel, download at once
from one server through one wanopt hub (wanopt run --branch) across the
same emulated link. After a warm-up, each branch's goodput is counted over
the same interval; the table gives each branch's share of the fair share
(the total over the branches) and the total against the link's goodput
limit. The hub is told the link's rate (--hub-rate), as its operator
would; --no-hub-rate leaves it out. Needs root and a wanopt binary (--wanopt, next to wanbench, or on
PATH). Last line: branches=N rtt_ms=R total_mbps=X min_share=Y max_share=Z.

Flags:
`)
		fs.PrintDefaults()
	}
	branches := fs.Int("branches", 3, "branches downloading at once (2 to 26)")
	rtt := fs.Duration("rtt", 100*time.Millisecond, "the link's round-trip time")
	rateS := fs.String("rate", "250mbit", "the link's rate")
	queueS := fs.String("queue", "", "drop-tail queue in bytes (default the published 2,000,000)")
	measure := fs.Duration("measure", 20*time.Second, "how long each branch's goodput is counted")
	warmup := fs.Duration("warmup", 8*time.Second, "how long the downloads run before counting")
	noHubRate := fs.Bool("no-hub-rate", false, "do not tell the hub the link's rate (wanopt run --hub-rate): measure the tunnels' controllers alone")
	wanopt := fs.String("wanopt", "", "the wanopt binary (default: next to wanbench, else on PATH)")
	out := fs.String("out", "out/hub", "folder for hub.json and hub.md")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *branches < 2 || *branches > 26 {
		return fmt.Errorf("--branches %d: want 2 to 26", *branches)
	}
	rate, err := parseRate(*rateS)
	if err != nil {
		return fmt.Errorf("--rate: %w", err)
	}
	o := exp.HubBenchOptions{Branches: *branches, RTT: *rtt, RateBps: rate, Warmup: *warmup, Measure: *measure, NoHubRate: *noHubRate, Logger: log}
	if *queueS != "" {
		q, d, err := parseQueue(*queueS)
		if err != nil || d != 0 {
			return fmt.Errorf("--queue %q: want bytes, e.g. 2MB", *queueS)
		}
		o.QueueBytes = q
	}
	if o.Wanopt, err = exp.FindWanopt(*wanopt); err != nil {
		return err
	}
	if o.LinkCommand, err = selfLinkCommand(); err != nil {
		return err
	}
	res, err := exp.HubBench(ctx, o)
	if err != nil {
		return err
	}
	fmt.Print("\n" + res.Markdown() + "\n")
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	js, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(filepath.Join(*out, "hub.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "hub.md"), []byte(res.Markdown()), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s/hub.{json,md}\n%s\n", *out, res.Line())
	return nil
}
