package exp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/report"
	"github.com/wanopt/wanopt/bench/wanem"
)

// HubSharesOptions configure HubShares.
type HubSharesOptions struct {
	// Branches download at once through one hub (default 3).
	Branches int
	// RTT and RateBps are the shared link's (default 100 ms, 250 Mbit/s);
	// QueueBytes its drop-tail queue (default the published 2,000,000).
	RTT        time.Duration
	RateBps    uint64
	QueueBytes int
	// Warmup and Measure time the run (default 8 s and 20 s).
	Warmup, Measure time.Duration
	// NoHubRate leaves out the hub's --hub-rate: tunnels that start apart
	// then keep unequal shares (see package tunnel/share).
	NoHubRate bool
	// Wanopt is the wanopt binary; LinkCommand starts the link helper.
	Wanopt      string
	LinkCommand []string
	Logger      *slog.Logger
}

// HubSharesResult is one run of HubShares.
type HubSharesResult struct {
	Branches   int     `json:"branches"`
	RTTms      float64 `json:"rtt_ms"`
	RateMbps   float64 `json:"rate_mbps"`
	QueueBytes int     `json:"queue_bytes"`
	MeasureS   float64 `json:"measure_s"`
	// HubRateMbps is the hub's --hub-rate, 0 if it had none.
	HubRateMbps float64 `json:"hub_rate_mbps"`
	// BranchMbps is each branch's goodput over the measurement; Shares
	// each one's fraction of the fair share (TotalMbps / Branches).
	BranchMbps []float64 `json:"branch_mbps"`
	Shares     []float64 `json:"shares"`
	TotalMbps  float64   `json:"total_mbps"`
	// LinkRatio is TotalMbps over GoodputLimitMbps.
	LinkRatio float64 `json:"link_ratio"`
	MinShare  float64 `json:"min_share"`
	MaxShare  float64 `json:"max_share"`
}

// hubSharesPort is the source server's port in the server namespace.
const hubSharesPort = 7100

// HubShares measures how one hub shares a link: all branches download at
// once through their own tunnels, each one's goodput over the same interval.
func HubShares(ctx context.Context, o HubSharesOptions) (HubSharesResult, error) {
	if o.Branches == 0 {
		o.Branches = 3
	}
	if o.RTT == 0 {
		o.RTT = 100 * time.Millisecond
	}
	if o.RateBps == 0 {
		o.RateBps = 250_000_000
	}
	if o.QueueBytes == 0 {
		o.QueueBytes = 2_000_000
	}
	if o.Warmup == 0 {
		o.Warmup = 8 * time.Second
	}
	if o.Measure == 0 {
		o.Measure = 20 * time.Second
	}
	res := HubSharesResult{Branches: o.Branches, RTTms: ms(o.RTT), RateMbps: float64(o.RateBps) / 1e6, QueueBytes: o.QueueBytes, MeasureS: o.Measure.Seconds()}
	if o.Wanopt == "" {
		return res, errors.New("no wanopt binary given (HubSharesOptions.Wanopt)")
	}
	l, err := lab.Build(ctx, lab.Options{Kind: lab.Edges, LinkCommand: o.LinkCommand, Realtime: true, Logger: o.Logger})
	if err != nil {
		return res, err
	}
	defer l.Close()
	link := wanem.Config{Delay: o.RTT / 2, RateBps: o.RateBps, QueueBytes: o.QueueBytes, Seed: 1}
	back := link
	back.Seed = 2
	if err := l.StartLink(ctx, link, back); err != nil {
		return res, err
	}
	var ln net.Listener
	if err := lab.InNetns(l.Server.NS, func() error {
		var err error
		ln, err = net.Listen("tcp4", fmt.Sprintf("198.18.2.2:%d", hubSharesPort))
		return err
	}); err != nil {
		return res, fmt.Errorf("source server: %w", err)
	}
	defer ln.Close()
	go serveZeros(ln)

	lines := []string{fmt.Sprintf("allow = 198.18.2.2/32:%d", hubSharesPort)}
	if !o.NoHubRate {
		// The operator's setting: the data centre's link rate.
		lines = append(lines, fmt.Sprintf("hub-rate = %dbit", o.RateBps))
		res.HubRateMbps = res.RateMbps
	}
	h, err := harness.StartHub(ctx, l, harness.HubOptions{Wanopt: o.Wanopt, Branches: o.Branches, Lines: lines})
	if err != nil {
		return res, err
	}
	defer h.Stop()

	counts := make([]atomic.Int64, o.Branches)
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, o.Branches)
	for i := range o.Branches {
		var c net.Conn
		if err := lab.InNetns(h.ClientNS(i), func() error {
			var err error
			c, err = (&net.Dialer{Timeout: 10 * time.Second}).DialContext(dctx, "tcp4", fmt.Sprintf("198.18.2.2:%d", hubSharesPort))
			return err
		}); err != nil {
			return res, fmt.Errorf("branch %s: connect through the hub: %w", harness.BranchName(i), err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			stop := context.AfterFunc(dctx, func() { c.Close() })
			defer stop()
			buf := make([]byte, 256<<10)
			for {
				n, err := c.Read(buf)
				counts[i].Add(int64(n))
				if err != nil {
					if dctx.Err() == nil {
						errs <- fmt.Errorf("branch %s: download ended early: %w", harness.BranchName(i), err)
					}
					return
				}
			}
		}()
	}
	sleep := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case err := <-errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := sleep(o.Warmup); err != nil {
		return res, err
	}
	start := make([]int64, o.Branches)
	for i := range counts {
		start[i] = counts[i].Load()
	}
	t0 := time.Now()
	if err := sleep(o.Measure); err != nil {
		return res, err
	}
	el := time.Since(t0).Seconds()
	for i := range counts {
		mbps := float64(counts[i].Load()-start[i]) * 8 / el / 1e6
		res.BranchMbps = append(res.BranchMbps, mbps)
		res.TotalMbps += mbps
	}
	cancel()
	wg.Wait()
	res.fillShares()
	res.LinkRatio = res.TotalMbps / harness.GoodputLimitMbps(float64(o.RateBps))
	return res, nil
}

// fillShares sets each branch's fraction of the fair share, and the
// smallest and largest.
func (r *HubSharesResult) fillShares() {
	fair := r.TotalMbps / float64(len(r.BranchMbps))
	r.Shares = nil
	for i, m := range r.BranchMbps {
		s := 0.0
		if fair > 0 {
			s = m / fair
		}
		r.Shares = append(r.Shares, s)
		if i == 0 || s < r.MinShare {
			r.MinShare = s
		}
		if i == 0 || s > r.MaxShare {
			r.MaxShare = s
		}
	}
}

// serveZeros sends zeros to every connection until it closes.
func serveZeros(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			io.Copy(c, zeroReader{})
		}()
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// Markdown is the result as a table.
func (r HubSharesResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d branches downloading at once through one hub, link %.0f Mbit/s, RTT %.0f ms, %d B drop-tail queue, measured over %.0f s:\n\n",
		r.Branches, r.RateMbps, r.RTTms, r.QueueBytes, r.MeasureS)
	if r.HubRateMbps > 0 {
		fmt.Fprintf(&b, "The hub divides %.0f Mbit/s among the branches (--hub-rate).\n\n", r.HubRateMbps)
	} else {
		b.WriteString("The hub has no --hub-rate: each tunnel's controller alone.\n\n")
	}
	t := report.NewTable(report.Text("branch"), report.Num("Mbit/s"), report.Num("share of the fair share"))
	for i, m := range r.BranchMbps {
		t.Addf("%s | %.1f | %.2f", harness.BranchName(i), m, r.Shares[i])
	}
	t.Addf("total | %.1f | %.2f of the link's goodput limit", r.TotalMbps, r.LinkRatio)
	t.WriteTo(&b)
	return b.String()
}

// WriteFiles writes hub.json and hub.md into dir.
func (r HubSharesResult) WriteFiles(dir string) error {
	return report.Write(dir, "hub", r, r.Markdown(), nil)
}

// Line is the last line wanbench hub prints.
func (r HubSharesResult) Line() string {
	return fmt.Sprintf("branches=%d rtt_ms=%.0f total_mbps=%.1f min_share=%.2f max_share=%.2f", r.Branches, r.RTTms, r.TotalMbps, r.MinShare, r.MaxShare)
}
