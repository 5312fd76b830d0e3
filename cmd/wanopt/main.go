// Command wanopt is the wanopt edge and its operator tools: run is the
// edge; status, flows and reload ask a running one; keygen and pubkey make
// the tunnel's keys; analyze explains from a packet capture why a TCP flow
// is slow. Run 'wanopt help' for the commands, 'wanopt man' for the manual.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// command is one subcommand: it gets its arguments (after the command name)
// and the standard output and error streams.
type command func(args []string, stdout, stderr io.Writer) error

// cmdInfo describes a subcommand for the dispatcher, the top-level help,
// the manual page and the shell completions.
type cmdInfo struct {
	name    string
	summary string // one line, lower case, no full stop
	run     command
	// args is what completes after the flags: "file", "commands", or a
	// list of words ("bash zsh"); empty: nothing.
	args string
	// hidden commands are not listed (they serve the build).
	hidden bool
}

// commandList is every subcommand, in the order help lists them. It is
// filled in init, as help refers to it.
var commandList []cmdInfo

func init() {
	commandList = []cmdInfo{
		{name: "run", summary: "run an edge", run: runRunHelped},
		{name: "status", summary: "show a running edge's tunnels and counters", run: runStatus},
		{name: "flows", summary: "list the flows through a running edge", run: runFlows},
		{name: "reload", summary: "make a running edge read its configuration again", run: runReload},
		{name: "keygen", summary: "make a private key and show its public key", run: runKeygen},
		{name: "pubkey", summary: "print the public key of a private key", run: runPubkey},
		{name: "analyze", summary: "explain why the TCP flows of a capture are slow", run: runAnalyze, args: "file"},
		{name: "completion", summary: "print a bash or zsh completion script", run: runCompletion, args: "bash zsh"},
		{name: "version", summary: "print the version, commit and Go release", run: runVersion},
		{name: "help", summary: "print a command's help", run: runHelp, args: "commands"},
		{name: "man", summary: "print the manual page wanopt(8) in roff", run: runMan, hidden: true},
	}
}

// lookupCommand finds a subcommand by name.
func lookupCommand(name string) (cmdInfo, bool) {
	for _, c := range commandList {
		if c.name == name {
			return c, true
		}
	}
	return cmdInfo{}, false
}

// wanoptSummary is the paragraph of the top-level help and of the manual
// page's description.
const wanoptSummary = `wanopt is a split-TCP WAN accelerator: an edge terminates the TCP routed
into a TUN device and carries it over one encrypted UDP tunnel to its peer
edge, which connects the servers. 'wanopt run' is the edge; the other
commands ask a running edge, make keys and read captures.`

// topUsage is the top-level help.
func topUsage() string {
	var b strings.Builder
	b.WriteString("Usage: wanopt COMMAND [flags] [ARGS]\n\n" + wanoptSummary + "\n\nCommands:\n")
	for _, c := range commandList {
		if !c.hidden {
			fmt.Fprintf(&b, "  %-11s %s\n", c.name, c.summary)
		}
	}
	b.WriteString(`
Flags:
  -h, --help      print this help
      --version   print the version (as 'wanopt version')

Run 'wanopt help COMMAND' for a command's flags. The manual is wanopt(8);
the configuration reference is docs/guide/configuration.md.
`)
	return b.String()
}

// errUsage marks an error caused by a bad command line (exit status 2).
var errUsage = errors.New("bad command line")

// usageError is a bad command line, worded for the operator; it is
// errUsage.
type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == errUsage }

// usagef makes a usage error.
func usagef(format string, a ...any) error {
	return usageError{fmt.Sprintf(format, a...)}
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// dispatch runs the command named by args[0] and returns the exit status:
// 0 done, 1 failed, 2 a bad command line; a command may choose another
// (status: 3 when a tunnel is down) by returning an error with an
// ExitCode method.
func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 {
		fmt.Fprint(stderr, topUsage())
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "--help":
		fmt.Fprint(stdout, topUsage())
		return 0
	case "--version":
		name, args = "version", append([]string{"version"}, args[1:]...)
	}
	c, ok := lookupCommand(name)
	if !ok {
		what := fmt.Sprintf("unknown command %q", name)
		if strings.HasPrefix(name, "-") {
			what = fmt.Sprintf("unknown flag %s: flags follow the command, e.g. wanopt run --help", name)
		}
		fmt.Fprintf(stderr, "wanopt: %s\nRun 'wanopt help' for usage.\n", what)
		return 2
	}
	err := c.run(args[1:], stdout, stderr)
	if err == nil {
		return 0
	}
	code := 1
	if errors.Is(err, errUsage) {
		code = 2
	}
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		code = ec.ExitCode()
	}
	if msg := errorText(err); msg != "" {
		fmt.Fprintf(stderr, "wanopt %s: %s\n", name, msg)
	}
	if code == 2 {
		fmt.Fprintf(stderr, "Run 'wanopt help %s' for usage.\n", name)
	}
	return code
}

// errorText is err's message without the marker errUsage adds when a
// command wraps it ("bad command line: ").
func errorText(err error) string {
	return strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
}

const helpSummary = `Print the help of COMMAND, as 'wanopt COMMAND --help' does, on standard
output; without COMMAND, the list of commands.`

// runHelp is 'wanopt help [COMMAND]': the top-level help, or the command's
// own (it is run with --help), on standard output.
func runHelp(args []string, stdout, stderr io.Writer) error {
	switch {
	case len(args) == 0:
		fmt.Fprint(stdout, topUsage())
		return nil
	case len(args) == 1 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help"):
		fmt.Fprint(stdout, helpText("wanopt help [COMMAND]", helpSummary, nil, nil))
		return nil
	case len(args) > 1:
		return usagef("help takes one COMMAND, got %d arguments", len(args))
	}
	c, ok := lookupCommand(args[0])
	if !ok {
		return usagef("unknown command %q; 'wanopt help' lists them", args[0])
	}
	return c.run([]string{"--help"}, stdout, stderr)
}
