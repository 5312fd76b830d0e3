// Package analyze explains why TCP flows in a packet capture are slow.
//
// It reads pcap and pcapng files (plain or gzipped; raw IP, Ethernet, Linux
// cooked v1/v2 and loopback link types), follows every TCP connection in
// both directions, and reports per flow the handshake options, RTT, window,
// in-flight bytes and throughput over time, retransmissions, zero windows,
// SACK anomalies (blocks for data never sent, SACK without negotiation,
// reneging) and a verdict naming the limit, after T-RAT's classes:
// opportunity-limited, zero-window, window-limited, loss-limited,
// sender-limited, path-limited (only with queueing or loss as evidence),
// send-buffer-limited, transport-limited, or unclear with the figures.
//
// Bad input never panics: frames that cannot be decoded are counted in
// Stats, and a file that ends or breaks mid-way yields the flows read so far
// with Stats.ReadError set.
package analyze

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Options control an analysis.
type Options struct {
	// Filter selects flows; nil analyses all.
	Filter *Filter
	// MaxFlows, if positive, limits the flows in the report to the largest
	// ones by bytes (the rest are still counted in Stats).
	MaxFlows int
}

// Stats counts what the reader saw, including everything it skipped.
type Stats struct {
	Format          string `json:"format"`
	Packets         int    `json:"packets"`
	Bytes           int64  `json:"bytes"`
	TCPPackets      int    `json:"tcp_packets"`
	NotIP           int    `json:"not_ip"`
	NotTCP          int    `json:"not_tcp"`
	Fragments       int    `json:"fragments"`
	Truncated       int    `json:"truncated"`
	Malformed       int    `json:"malformed"`
	UnsupportedLink int    `json:"unsupported_link"`
	FlowsDropped    int    `json:"flows_dropped,omitempty"`
	ReadError       string `json:"read_error,omitempty"`
}

// Report is the result of analysing one capture.
type Report struct {
	File     string       `json:"file"`
	Stats    Stats        `json:"stats"`
	Duration float64      `json:"duration_s"`
	Flows    []FlowReport `json:"flows"`
	Elapsed  float64      `json:"-"` // wall time of the analysis, seconds
}

// AnalyzeFile analyses the capture file at path.
func AnalyzeFile(path string, opts Options) (*Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open capture: %w", err)
	}
	defer f.Close()
	rep, err := Analyze(f, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	rep.File = path
	return rep, nil
}

// Analyze reads a whole capture from r and analyses it. It returns an error
// only when r is not a capture at all; damage later in the file is reported
// in Stats.ReadError together with the flows read before it.
func Analyze(r io.Reader, opts Options) (*Report, error) {
	start := time.Now()
	src, format, err := openSource(r)
	if err != nil {
		return nil, err
	}
	tr := newTracker(opts.Filter)
	tr.stats.Format = format
	var seg segment
	for {
		frame, link, ts, _, err := src.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				tr.stats.ReadError = fmt.Sprintf("after packet %d: %v (the capture is truncated or corrupt; flows are reported up to that point)",
					tr.stats.Packets, err)
			}
			break
		}
		tr.stats.Packets++
		tr.stats.Bytes += int64(len(frame))
		switch decode(link, frame, &seg) {
		case decOK:
			tr.packet(&seg, ts, tr.stats.Packets)
		case decNotIP:
			tr.stats.NotIP++
		case decNotTCP:
			tr.stats.NotTCP++
		case decFragment:
			tr.stats.Fragments++
		case decTruncated:
			tr.stats.Truncated++
		case decMalformed:
			tr.stats.Malformed++
		case decUnsupportedLink:
			tr.stats.UnsupportedLink++
		}
	}
	rep := tr.report(opts)
	rep.Elapsed = time.Since(start).Seconds()
	return rep, nil
}
