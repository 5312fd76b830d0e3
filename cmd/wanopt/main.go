// Command wanopt is the wanopt edge and its operator tools: analyze explains
// from a packet capture why a TCP flow is slow; keygen and pubkey make the
// tunnel's keys. Run 'wanopt help' for the commands.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

const usage = `wanopt — userspace split-TCP WAN accelerator

Commands:
  analyze    explain why TCP flows in a pcap/pcapng capture are slow
  keygen     make a private key (--out FILE, mode 0600; its public key goes to standard error)
  pubkey     print the public key of the private key on standard input
  run        run an edge: intercept TCP on a TUN and/or connect the peer's flows
  status     show a running edge's tunnel and counters (over its --control socket)
  flows      list the flows through a running edge (over its --control socket)
  reload     make a running edge read its configuration again (as SIGHUP does)
  help       this text

Run 'wanopt COMMAND --help' for a command's flags.
`

// command is one subcommand: it gets its arguments (after the command name)
// and the standard output and error streams.
type command func(args []string, stdout, stderr io.Writer) error

// commands maps names to subcommands.
var commands = map[string]command{
	"analyze": runAnalyze,
	"keygen":  runKeygen,
	"pubkey":  runPubkey,
	"run":     runRun,
	"status":  runStatus,
	"flows":   runFlows,
	"reload":  runReload,
}

// errUsage marks an error caused by a bad command line (exit status 2).
var errUsage = errors.New("bad command line")

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// dispatch runs the command named by args[0] and returns the exit status.
func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "wanopt: unknown command %q\n\n%s", name, usage)
		return 2
	}
	if err := cmd(args[1:], stdout, stderr); err != nil {
		if errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "wanopt %s: %v\n", name, err)
			return 2
		}
		fmt.Fprintf(stderr, "wanopt %s: %v\n", name, err)
		return 1
	}
	return 0
}
