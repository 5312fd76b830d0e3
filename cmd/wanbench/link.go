package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/wanem"
)

// runLink runs the emulator. With --a and --b it takes its settings from
// flags (the same impairments both ways); without them it reads a JSON
// lab.LinkSpec on standard input, which is how the lab starts it. Either
// way, "down" and "up" lines on standard input then take the link down and
// up (see lab.RunLinkSpec).
func runLink(ctx context.Context, args []string) error {
	fs := flags("link", "")
	a := fs.String("a", "", "one end: NETNS:TUNDEV (an existing TUN device)")
	b := fs.String("b", "", "other end: NETNS:TUNDEV")
	delay := fs.Duration("delay", 0, "one-way propagation delay (RTT is twice this)")
	jitter := fs.Duration("jitter", 0, "extra random delay, without reordering")
	rateS := fs.String("rate", "0", "rate limit of IP bytes each way (0: none), e.g. 250mbit")
	queueS := fs.String("queue", "", "drop-tail queue: bytes (2MB) or time at the link rate (50ms)")
	lossS := fs.String("loss", "0", "random loss each way, e.g. 1%")
	reorderS := fs.String("reorder", "0", "share of packets held back so later ones overtake them")
	dupS := fs.String("dup", "0", "share of packets duplicated")
	seed := fs.Int64("seed", 1, "random seed")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if *a == "" && *b == "" {
		return lab.RunLink(ctx, os.Stdin, os.Stdout)
	}
	ea, err := parseEnd(*a)
	if err != nil {
		return err
	}
	eb, err := parseEnd(*b)
	if err != nil {
		return err
	}
	cfg := wanem.Config{Delay: *delay, Jitter: *jitter, Seed: *seed}
	if cfg.RateBps, err = parseRate(*rateS); err != nil {
		return err
	}
	if q := *queueS; q != "" {
		if cfg.QueueBytes, cfg.QueueDelay, err = parseQueue(q); err != nil {
			return fmt.Errorf("--queue: %w", err)
		}
	}
	if cfg.LossPct, err = parsePercent(*lossS); err != nil {
		return err
	}
	if cfg.ReorderPct, err = parsePercent(*reorderS); err != nil {
		return err
	}
	if cfg.DupPct, err = parsePercent(*dupS); err != nil {
		return err
	}
	ba := cfg
	ba.Seed++
	spec := lab.LinkSpec{A: ea, B: eb, AB: cfg, BA: ba}
	// Commands on standard input ("down", "up") work here too, by hand.
	return lab.RunLinkSpec(ctx, spec, os.Stdin, os.Stdout)
}

func parseEnd(s string) (lab.LinkEnd, error) {
	ns, dev, ok := strings.Cut(s, ":")
	if !ok || ns == "" || dev == "" {
		return lab.LinkEnd{}, fmt.Errorf("link end %q: want NETNS:TUNDEV", s)
	}
	return lab.LinkEnd{NS: ns, Dev: dev}, nil
}
