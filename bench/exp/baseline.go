package exp

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/wanem"
)

// BaselineOptions configure Baseline; zero values are the published ones.
type BaselineOptions struct {
	Published
	CCs      []string          // kernel congestion controls; default cubic, bbr
	Profiles []harness.Profile // default Modern
	// CaptureDir, if set, receives a header capture of the first run of
	// every point on both sides of the link, for 'wanopt analyze'.
	CaptureDir string
	// Progress, if set, is called after every run.
	Progress func(done, total int, p Point, run harness.IperfResult)
}

// Point names one setting of the experiment.
type Point struct {
	RTTms   float64 `json:"rtt_ms"`
	CC      string  `json:"cc"`
	Profile string  `json:"profile"`
}

// Row is one setting's result: the published reduction (drop the highest
// and the lowest run, average the rest) and the runs behind it.
type Row struct {
	Point
	Mbps    float64               `json:"mbps"`
	Seconds float64               `json:"seconds"`
	Runs    []harness.IperfResult `json:"runs"`
}

// BaselineResult is the whole experiment.
type BaselineResult struct {
	RateMbps       float64 `json:"rate_mbps"`
	QueueBytes     int     `json:"queue_bytes"`
	BytesPerStream int64   `json:"bytes_per_stream"`
	Streams        int     `json:"streams"`
	Rows           []Row   `json:"rows"`
}

func (o *BaselineOptions) defaults() {
	o.Published.defaults()
	if len(o.CCs) == 0 {
		o.CCs = []string{"cubic", "bbr"}
	}
	if len(o.Profiles) == 0 {
		o.Profiles = []harness.Profile{harness.Modern}
	}
}

// Baseline runs the published experiment with plain kernel TCP on the direct
// lab: Runs 'iperf -c SERVER -n N -P 4 -R' per RTT, congestion control and
// profile.
func Baseline(ctx context.Context, o BaselineOptions) (BaselineResult, error) {
	o.defaults()
	res := BaselineResult{RateMbps: float64(o.RateBps) / 1e6, QueueBytes: o.QueueBytes, BytesPerStream: o.BytesPerStream, Streams: o.Streams}
	restore, err := harness.AllowCongestionControl(o.CCs...)
	if err != nil {
		return res, err
	}
	defer restore()
	l, err := lab.Build(ctx, lab.Options{Kind: lab.Direct, LinkCommand: o.LinkCommand, Realtime: true, Logger: o.Logger})
	if err != nil {
		return res, err
	}
	defer l.Close()
	srv, err := harness.StartIperfServer(ctx, l, l.Server)
	if err != nil {
		return res, err
	}
	total := len(o.RTTs) * len(o.CCs) * len(o.Profiles) * o.Runs
	done := 0
	for _, rtt := range o.RTTs {
		cfg := wanem.Config{Delay: rtt / 2, RateBps: o.RateBps, QueueBytes: o.QueueBytes}
		if err := l.StartLink(ctx, cfg, cfg); err != nil {
			return res, err
		}
		for _, prof := range o.Profiles {
			for _, cc := range o.CCs {
				row := Row{Point: Point{RTTms: ms(rtt), CC: cc, Profile: prof.Name}}
				for run := 0; run < o.Runs; run++ {
					if err := harness.ApplyTCP(ctx, l, cc, prof); err != nil {
						return res, err
					}
					var caps []*harness.Capture
					if o.CaptureDir != "" && run == 0 {
						for _, h := range []*lab.Host{l.Client, l.Server} {
							name := fmt.Sprintf("rtt%.0fms-%s-%s-%s.pcap", ms(rtt), cc, prof.Name, h.Role)
							c, err := harness.StartCapture(ctx, l, h, "wan0", filepath.Join(o.CaptureDir, name))
							if err != nil {
								return res, err
							}
							caps = append(caps, c)
						}
					}
					timeout := harness.RunTimeout(o.BytesPerStream*int64(o.Streams), float64(o.RateBps))
					r, err := harness.RunIperf(ctx, l, l.Client, srv, harness.IperfRun{BytesPerStream: o.BytesPerStream, Streams: o.Streams, Timeout: timeout})
					for _, c := range caps {
						if cerr := c.Stop(); cerr != nil && err == nil {
							err = cerr
						}
					}
					if err != nil {
						return res, fmt.Errorf("rtt %v cc %s profile %s run %d: %w", rtt, cc, prof.Name, run+1, err)
					}
					row.Runs = append(row.Runs, r)
					done++
					if o.Progress != nil {
						o.Progress(done, total, row.Point, r)
					}
				}
				row.Mbps, row.Seconds = trimmedMean(row.Runs)
				res.Rows = append(res.Rows, row)
			}
		}
		st := l.StopLink()
		o.Logger.Debug("link counters", "rtt", rtt, "ab", st.AB, "ba", st.BA)
	}
	return res, nil
}

// trimmedMean drops the fastest and the slowest run (when there are at
// least three) and averages the rest, as the published test did.
func trimmedMean(runs []harness.IperfResult) (mbps, seconds float64) {
	s := slices.Clone(runs)
	slices.SortFunc(s, func(a, b harness.IperfResult) int {
		switch {
		case a.Mbps < b.Mbps:
			return -1
		case a.Mbps > b.Mbps:
			return 1
		}
		return 0
	})
	if len(s) >= 3 {
		s = s[1 : len(s)-1]
	}
	for _, r := range s {
		mbps += r.Mbps
		seconds += r.Seconds
	}
	n := float64(len(s))
	return mbps / n, seconds / n
}
