package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/wanopt/wanopt/bench/exp"
	"github.com/wanopt/wanopt/bench/harness"
)

// publishedFlags are the flags 'baseline' and 'cisco' share: the published
// test's settings, a quick variant, the output folder and replotting.
type publishedFlags struct {
	fs       *pflag.FlagSet
	quick    *bool
	runs     *int
	bytes    *string
	rtts     *[]time.Duration
	rate     *string
	out      *string
	replot   *string
	profiles *[]string
}

func addPublishedFlags(fs *pflag.FlagSet, name string, profiles []string) *publishedFlags {
	return &publishedFlags{
		fs:       fs,
		quick:    fs.Bool("quick", false, "3 runs of -n 25MB per point (a smoke test: short transfers weigh the first byte's trip more)"),
		runs:     fs.Int("runs", 5, "iperf runs per point (highest and lowest dropped)"),
		bytes:    fs.String("bytes", "100MB", "iperf -n, per stream"),
		rtts:     fs.DurationSlice("rtt", nil, "RTTs to test (default 0,50,100,150,200,250ms)"),
		rate:     fs.String("rate", "250mbit", "link rate"),
		profiles: fs.StringSlice("profile", profiles, "endpoint TCP profiles: modern (Linux defaults), legacy (windows capped at 512 KB)"),
		out:      fs.String("out", "out/"+name, "folder for "+name+".json, .md and .png"),
		replot:   fs.String("replot", "", "redraw the table and chart from a "+name+".json into --out, without measuring"),
	}
}

// settings turns the parsed flags into the experiments' shared settings
// and profiles; --quick changes runs and bytes unless they were given.
func (f *publishedFlags) settings(log *slog.Logger) (exp.Published, []harness.Profile, error) {
	p := exp.Published{RTTs: *f.rtts, Runs: *f.runs, Logger: log}
	var err error
	if p.BytesPerStream, err = parseBytes(*f.bytes); err != nil {
		return p, nil, err
	}
	if *f.quick {
		if !f.fs.Changed("runs") {
			p.Runs = 3
		}
		if !f.fs.Changed("bytes") {
			p.BytesPerStream = 25 << 20
		}
	}
	if p.Runs < 1 {
		return p, nil, fmt.Errorf("--runs %d: want at least 1", p.Runs)
	}
	if p.RateBps, err = parseRate(*f.rate); err != nil {
		return p, nil, err
	}
	if p.RateBps == 0 {
		return p, nil, fmt.Errorf("--rate %q: the experiment needs a capped link", *f.rate)
	}
	var profiles []harness.Profile
	for _, name := range *f.profiles {
		pr, err := harness.ProfileByName(name)
		if err != nil {
			return p, nil, err
		}
		profiles = append(profiles, pr)
	}
	if p.LinkCommand, err = selfLinkCommand(); err != nil {
		return p, nil, err
	}
	return p, profiles, nil
}

// parsePublished parses the args of an experiment on the published
// settings into those settings and the endpoint profiles. done says the
// command has nothing more to do: --help was answered, or --replot redrew
// a saved R.
func parsePublished[R result](fs *pflag.FlagSet, pf *publishedFlags, args []string, log *slog.Logger) (pub exp.Published, profiles []harness.Profile, done bool, err error) {
	if help, err := parse(fs, args); help || err != nil {
		return pub, nil, true, err
	}
	if *pf.replot != "" {
		return pub, nil, true, replot[R](*pf.replot, *pf.out)
	}
	pub, profiles, err = pf.settings(log)
	return pub, profiles, err != nil, err
}

// result is what an experiment's result can do with itself.
type result interface {
	WriteFiles(dir string) error
	Markdown() string
	Line() string
}

// replot redraws a result saved as JSON (--replot) into out.
func replot[R result](path, out string) error {
	js, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var res R
	if err := json.Unmarshal(js, &res); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := res.WriteFiles(out); err != nil {
		return err
	}
	fmt.Print(res.Markdown())
	fmt.Println(res.Line())
	return nil
}
