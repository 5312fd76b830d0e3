package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/wanopt/wanopt/analyze"
	"github.com/wanopt/wanopt/analyze/plot"
)

const analyzeSummary = `Read a pcap or pcapng capture FILE (gzipped or not; raw IP or TUN,
Ethernet, Linux cooked v1 or v2) and report for each TCP flow its handshake
options, RTT, window, bytes in flight, retransmissions, zero windows and SACK
anomalies, and a verdict: opportunity-limited, zero-window, window-limited,
loss-limited, sender-limited, path-limited, send-buffer-limited,
transport-limited or unclear. FILTER is a comma-separated list whose terms
must all match: a flow number (7), an address (198.18.0.2), ADDR:PORT,
[V6ADDR]:PORT or :PORT.`

// analyzeOptions are the flags of 'wanopt analyze'.
type analyzeOptions struct {
	flow, plotDir, plotFormat string
	asJSON, series            bool
	maxFlows                  int
}

func analyzeFlags(o *analyzeOptions) *pflag.FlagSet {
	fs := pflag.NewFlagSet("analyze", pflag.ContinueOnError)
	fs.StringVar(&o.flow, "flow", "", "analyse only the flows matching `FILTER`")
	fs.BoolVar(&o.asJSON, "json", false, "print the report as JSON instead of text")
	fs.StringVar(&o.plotDir, "plot", "", "write a chart per flow (window, in flight, throughput) into `DIR`")
	fs.StringVar(&o.plotFormat, "plot-format", "png", "the charts' `FORMAT`: png or svg")
	fs.IntVar(&o.maxFlows, "max-flows", 0, "report only the `N` largest flows (0: all)")
	fs.BoolVar(&o.series, "series", false, "with --json: include each flow's time series")
	fs.SetAnnotation("plot-format", valuesAnnotation, []string{"png", "svg"})
	return fs
}

func runAnalyze(args []string, stdout, stderr io.Writer) error {
	var o analyzeOptions
	fs := analyzeFlags(&o)
	if done, err := parseCommand(fs, "wanopt analyze [flags] FILE", analyzeSummary, args, stdout); done || err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("need exactly one capture FILE, got %d arguments", fs.NArg())
	}
	if o.plotFormat != "png" && o.plotFormat != "svg" {
		return usagef("--plot-format %s: want png or svg", o.plotFormat)
	}
	opts := analyze.Options{MaxFlows: o.maxFlows}
	if o.flow != "" {
		f, err := analyze.ParseFilter(o.flow)
		if err != nil {
			return usagef("--flow %s: %v", o.flow, err)
		}
		opts.Filter = f
	}
	rep, err := analyze.AnalyzeFile(fs.Arg(0), opts)
	if err != nil {
		return err
	}
	if o.plotDir != "" {
		for i := range rep.Flows {
			f := &rep.Flows[i]
			if f.Verdict.Name == analyze.VerdictNone {
				continue
			}
			path, err := plot.FlowFile(o.plotDir, o.plotFormat, f)
			if err != nil {
				return fmt.Errorf("plot flow %d: %w", f.ID, err)
			}
			fmt.Fprintf(stderr, "wrote %s\n", path)
		}
	}
	if o.asJSON {
		if !o.series {
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
