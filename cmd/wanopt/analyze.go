package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/wanopt/wanopt/analyze"
	"github.com/wanopt/wanopt/analyze/plot"
)

const analyzeUsage = `usage: wanopt analyze FILE [--flow FILTER] [--json] [--plot DIR [--plot-format png|svg]]

Reads a pcap or pcapng capture (optionally gzipped; raw IP/TUN, Ethernet,
Linux cooked v1/v2) and reports per TCP flow: handshake options, RTT,
window, in-flight bytes, retransmissions, zero windows, SACK anomalies and a
verdict: opportunity-limited, zero-window, window-limited, loss-limited,
sender-limited, path-limited, send-buffer-limited, transport-limited or
unclear.

FILTER is a comma-separated list, every term must match: a flow number (7),
an address (198.18.0.2), ADDR:PORT, [V6ADDR]:PORT, or :PORT.

Flags:
`

func runAnalyze(args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("analyze", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	flow := fs.String("flow", "", "analyse only the flows matching `FILTER`")
	asJSON := fs.Bool("json", false, "print the report as JSON instead of text")
	plotDir := fs.String("plot", "", "write a chart per flow (window, in-flight, throughput) into `DIR`")
	plotFormat := fs.String("plot-format", "png", "chart format: png or svg")
	maxFlows := fs.Int("max-flows", 0, "report only the N largest flows (0: all)")
	series := fs.Bool("series", false, "include the per-flow time series in --json output")
	fs.Usage = func() {
		fmt.Fprint(stderr, analyzeUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v (see wanopt analyze --help)", errUsage, err)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("%w: need exactly one capture FILE, got %d arguments", errUsage, fs.NArg())
	}
	if *plotFormat != "png" && *plotFormat != "svg" {
		return fmt.Errorf("%w: --plot-format %q: use png or svg", errUsage, *plotFormat)
	}
	opts := analyze.Options{MaxFlows: *maxFlows}
	if *flow != "" {
		f, err := analyze.ParseFilter(*flow)
		if err != nil {
			return fmt.Errorf("%w: --flow: %v", errUsage, err)
		}
		opts.Filter = f
	}
	rep, err := analyze.AnalyzeFile(fs.Arg(0), opts)
	if err != nil {
		return err
	}
	if *plotDir != "" {
		for i := range rep.Flows {
			f := &rep.Flows[i]
			if f.Verdict.Name == analyze.VerdictNone {
				continue
			}
			path, err := plot.FlowFile(*plotDir, *plotFormat, f)
			if err != nil {
				return fmt.Errorf("plot flow %d: %w", f.ID, err)
			}
			fmt.Fprintf(stderr, "wrote %s\n", path)
		}
	}
	if *asJSON {
		if !*series {
			for i := range rep.Flows {
				rep.Flows[i].Dirs[0].Series, rep.Flows[i].Dirs[1].Series = nil, nil
			}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fmt.Errorf("write JSON report: %w", err)
		}
		return nil
	}
	if err := analyze.WriteText(stdout, rep); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
