package exp

import (
	"log/slog"
	"time"
)

// Published holds the settings the lab experiments share with the
// published test; the zero value of each field means the published value.
type Published struct {
	RTTs           []time.Duration // default 0, 50, 100, 150, 200, 250 ms
	Runs           int             // per point; default 5 (highest and lowest dropped)
	BytesPerStream int64           // iperf -n; default 100 MiB
	Streams        int             // iperf -P; default 4
	RateBps        uint64          // link rate; default 250 Mbit/s
	QueueBytes     int             // drop-tail queue; default 2 MB
	LinkCommand    []string        // starts the lab's link helper
	Logger         *slog.Logger
}

func (p *Published) defaults() {
	if len(p.RTTs) == 0 {
		for _, ms := range []int{0, 50, 100, 150, 200, 250} {
			p.RTTs = append(p.RTTs, time.Duration(ms)*time.Millisecond)
		}
	}
	if p.Runs == 0 {
		p.Runs = 5
	}
	if p.BytesPerStream == 0 {
		p.BytesPerStream = 100 << 20
	}
	if p.Streams == 0 {
		p.Streams = 4
	}
	if p.RateBps == 0 {
		p.RateBps = 250e6
	}
	if p.QueueBytes == 0 {
		p.QueueBytes = 2_000_000
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
}
