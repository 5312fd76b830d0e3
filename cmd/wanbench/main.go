// Command wanbench is wanopt's lab: a userspace WAN link emulator between
// network namespaces, and the experiments that measure plain TCP and
// wanopt over it. Run 'wanbench help' for the commands.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

const usage = `wanbench — wanopt's lab (needs root: it creates network namespaces)

Commands:
  check      build the direct lab, measure its RTT and rate against the setting
  baseline   the published experiment with plain kernel TCP (iperf 2)
  cisco      the published experiment, plain TCP against wanopt side by side
  f5         the F5 file-mix lab: many files over keep-alive HTTP, plain against wanopt
  hub        how one wanopt hub shares a link among several branches
  link       run the WAN link emulator between two TUN devices
  sack       the bypass device that injected SACKs: plain TCP against wanopt through it
  sim        the tunnel against plain TCP in the deterministic simulator
  help       this text

Run 'wanbench COMMAND --help' for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "check":
		err = runCheck(ctx, log, args)
	case "baseline":
		err = runBaseline(ctx, log, args)
	case "cisco":
		err = runCisco(ctx, log, args)
	case "f5":
		err = runF5(ctx, log, args)
	case "hub":
		err = runHub(ctx, log, args)
	case "link":
		err = runLink(ctx, args)
	case "sack":
		err = runSack(ctx, log, args)
	case "sim":
		err = runSim(ctx, args)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "wanbench: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "wanbench %s: %v\n", os.Args[1], err)
		if e, ok := err.(exitError); ok {
			os.Exit(e.code)
		}
		os.Exit(1)
	}
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
