// Command wanbench is wanopt's lab: a userspace WAN link emulator between
// network namespaces, and the experiments that measure plain TCP and
// wanopt over it. Run 'wanbench help' for the commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/wanopt/wanopt/bench/harness"
)

// command is one subcommand: its name, the older names it still answers
// to (README.md and docs/results cite them), and what it does.
type command struct {
	name    string
	aliases []string
	summary string
	run     func(ctx context.Context, log *slog.Logger, args []string) error
}

// commands in the order 'wanbench help' lists them.
var commands = []command{
	{"check", nil, "build the direct lab, measure its RTT and rate against the setting", runCheck},
	{"baseline", nil, "the published experiment with plain kernel TCP (iperf 2)", runBaseline},
	{"rtt-sweep", []string{"cisco"}, "the published RTT sweep, plain TCP against wanopt side by side", runRTTSweep},
	{"file-mix", []string{"f5"}, "many files over keep-alive HTTP, plain against wanopt", runFileMix},
	{"hub-shares", []string{"hub"}, "how one wanopt hub shares a link among several branches", runHubShares},
	{"link", nil, "run the WAN link emulator between two TUN devices", func(ctx context.Context, _ *slog.Logger, args []string) error { return runLink(ctx, args) }},
	{"middlebox", []string{"sack"}, "the bypass device that injected SACKs: plain TCP against wanopt through it", runMiddlebox},
	{"sim", nil, "the tunnel against plain TCP in the deterministic simulator", func(ctx context.Context, _ *slog.Logger, args []string) error { return runSim(ctx, args) }},
}

// lookup finds the command called name, by its name or an alias.
func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
		for _, a := range c.aliases {
			if a == name {
				return c, true
			}
		}
	}
	return command{}, false
}

func usage() string {
	var b strings.Builder
	b.WriteString("wanbench — wanopt's lab (needs root: it creates network namespaces)\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-12s%s\n", c.name, c.summary)
		if len(c.aliases) > 0 {
			fmt.Fprintf(&b, "  %-12s(also: %s)\n", "", strings.Join(c.aliases, ", "))
		}
	}
	b.WriteString("  help        this text\n\nRun 'wanbench COMMAND --help' for a command's flags. The older names\n(cisco, f5, hub, sack) run the same commands with the same flags.\n")
	return b.String()
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	name, args := os.Args[1], os.Args[2:]
	switch name {
	case "help", "-h", "--help":
		fmt.Print(usage())
		return
	}
	cmd, ok := lookup(name)
	if !ok {
		fmt.Fprintf(os.Stderr, "wanbench: unknown command %q\n\n%s", name, usage())
		os.Exit(2)
	}
	if err := cmd.run(ctx, log.With("command", cmd.name), args); err != nil {
		fmt.Fprintf(os.Stderr, "wanbench %s: %v\n", name, err)
		if e, ok := err.(exitError); ok {
			os.Exit(e.code)
		}
		os.Exit(1)
	}
}

// flags is a subcommand's flag set. about, if not empty, heads its --help
// text between the usage line and the flags.
func flags(name, about string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	if about != "" {
		fs.Usage = func() {
			fmt.Fprintf(os.Stderr, "Usage: wanbench %s [flags]\n\n%s\nFlags:\n", name, about)
			fs.PrintDefaults()
		}
	}
	return fs
}

// parse parses a subcommand's args; help reports that --help was asked
// for (and answered), so the command returns at once with no error.
// Arguments that are not flags are an error.
func parse(fs *pflag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return true, nil
		}
		return false, err
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return false, nil
}

// exitError carries a specific exit status (e.g. a check out of tolerance).
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

// selfLinkCommand is the argv with which the lab starts the link helper:
// this very executable, 'link'.
func selfLinkCommand() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable for the link helper: %w", err)
	}
	return []string{exe, "link"}, nil
}

// edgeLab finds what an experiment with wanopt edges runs: the wanopt
// binary (explicit, if not empty) and the link emulator's command line.
func edgeLab(wanopt string) (bin string, link []string, err error) {
	if bin, err = findWanopt(wanopt); err != nil {
		return "", nil, err
	}
	link, err = selfLinkCommand()
	return bin, link, err
}

// findWanopt is harness.FindWanopt, its error naming the flag.
func findWanopt(explicit string) (string, error) {
	bin, err := harness.FindWanopt(explicit)
	if err != nil {
		return "", fmt.Errorf("%w (--wanopt PATH)", err)
	}
	return bin, nil
}
