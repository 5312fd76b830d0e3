package main

import (
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestHelpConvention: every command's help is on standard output, exit 0,
// the same for 'wanopt help CMD', 'CMD --help' and 'CMD -h', and starts
// with its usage line.
func TestHelpConvention(t *testing.T) {
	for _, c := range commandList {
		t.Run(c.name, func(t *testing.T) {
			var first string
			for _, args := range [][]string{{"help", c.name}, {c.name, "--help"}, {c.name, "-h"}} {
				if c.name == "help" && args[0] == "help" {
					args = []string{"help", "--help"}
				}
				code, out, errs := run(args...)
				if code != 0 || errs != "" {
					t.Errorf("%q: exit %d, stderr %q; want 0 and nothing on stderr", args, code, errs)
				}
				if !strings.HasPrefix(out, "Usage: wanopt "+c.name) {
					t.Errorf("%q: stdout starts %.60q; want \"Usage: wanopt %s\"", args, out, c.name)
				}
				if first == "" {
					first = out
				} else if out != first {
					t.Errorf("%q prints other help than 'wanopt help %s'", args, c.name)
				}
			}
			// Usage line, blank line, paragraph, blank line.
			if blocks := strings.Split(first, "\n\n"); len(blocks) < 2 || strings.Contains(blocks[0], "\n") {
				t.Errorf("help of %s: want a one-line usage, a blank line and a paragraph: %q", c.name, first)
			}
		})
	}
}

// TestUsageErrors: a bad command line says what is wrong and where the
// help is, on standard error, and exits 2; nothing goes to standard
// output.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--bogus"}, "wanopt run: unknown flag --bogus\nRun 'wanopt help run' for usage.\n"},
		{[]string{"run", "--mtu"}, "wanopt run: --mtu needs a value: --mtu BYTES\nRun 'wanopt help run' for usage.\n"},
		{[]string{"run", "--mtu", "big"}, "wanopt run: --mtu big: not a whole number\nRun 'wanopt help run' for usage.\n"},
		{[]string{"keygen", "extra"}, "wanopt keygen: unexpected arguments"},
		{[]string{"keygen", "-x"}, "wanopt keygen: unknown flag -x\n"},
		{[]string{"pubkey", "extra"}, "wanopt pubkey: pubkey takes no arguments"},
		{[]string{"analyze"}, "wanopt analyze: need exactly one capture FILE"},
		{[]string{"analyze", "--plot-format", "gif", testCapture}, "wanopt analyze: --plot-format gif: want png or svg"},
		{[]string{"version", "now"}, "wanopt version: unexpected arguments"},
		{[]string{"completion"}, "wanopt completion: name one shell"},
		{[]string{"completion", "fish"}, `wanopt completion: unknown shell "fish"`},
		{[]string{"help", "frob"}, `wanopt help: unknown command "frob"`},
		{[]string{"man", "extra"}, "wanopt man: unexpected arguments"},
		{[]string{"status", "--bogus"}, "wanopt status: unknown flag --bogus\nRun 'wanopt help status' for usage.\n"},
		{[]string{"frob"}, "wanopt: unknown command \"frob\"\nRun 'wanopt help' for usage.\n"},
		{[]string{"--frob"}, "wanopt: unknown flag --frob"},
	} {
		code, out, errs := run(tc.args...)
		if code != 2 || out != "" || !strings.HasPrefix(errs, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2, nothing, and stderr starting %q", tc.args, code, out, errs, tc.want)
		}
		if !strings.Contains(errs, "for usage.\n") {
			t.Errorf("%q: stderr %q does not point to the help", tc.args, errs)
		}
		if strings.Contains(errs, "bad command line") || strings.Contains(errs, "pflag") {
			t.Errorf("%q: stderr %q shows the parser's words", tc.args, errs)
		}
	}
}

func TestTopLevelHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		code, out, errs := run(args...)
		if code != 0 || errs != "" || !strings.HasPrefix(out, "Usage: wanopt COMMAND") {
			t.Errorf("%q: exit %d, stdout %.40q, stderr %q", args, code, out, errs)
		}
		for _, c := range commandList {
			listed := regexp.MustCompile(`(?m)^  ` + c.name + ` +\S`).MatchString(out)
			if listed == c.hidden {
				t.Errorf("%q: command %s listed %v, want %v", args, c.name, listed, !c.hidden)
			}
		}
	}
	// No command: the list, on standard error, as a usage error.
	if code, out, errs := run(); code != 2 || out != "" || !strings.HasPrefix(errs, "Usage: wanopt COMMAND") {
		t.Errorf("no command: exit %d, stdout %q, stderr %.40q", code, out, errs)
	}
}

// TestRunFlagGroups: every flag of run is in exactly one group of its help
// (and manual page), each help line is short, and every value has a
// placeholder in capitals.
func TestRunFlagGroups(t *testing.T) {
	var f runFlags
	fs := newRunFlagSet(&f, io.Discard)
	in := map[string]string{}
	for _, g := range runFlagGroups {
		for _, n := range g.names {
			if fs.Lookup(n) == nil {
				t.Errorf("group %q names --%s, which run does not have", g.title, n)
			}
			if prev, dup := in[n]; dup {
				t.Errorf("--%s is in groups %q and %q", n, prev, g.title)
			}
			in[n] = g.title
		}
	}
	upper := regexp.MustCompile(`^[A-Z][A-Za-z0-9:\[\]@._]*$`)
	fs.VisitAll(func(fl *pflag.Flag) {
		if _, ok := in[fl.Name]; !ok {
			t.Errorf("--%s is in no group of runFlagGroups (its help shows it under Other)", fl.Name)
		}
		v, _ := pflag.UnquoteUsage(fl)
		if fl.Value.Type() != "bool" && !upper.MatchString(v) {
			t.Errorf("--%s shows its value as %q; want a placeholder such as FILE or CIDR[:PORTS] (in backquotes in its usage)", fl.Name, v)
		}
		if strings.Contains(fl.Usage, "\n") {
			t.Errorf("--%s: its usage has several lines; keep one and move the detail to configuration.md", fl.Name)
		}
	})
	help := runHelpText()
	for _, l := range strings.Split(help, "\n") {
		if len(l) > helpWidth {
			t.Errorf("run --help: a line of %d characters (at most %d): %q", len(l), helpWidth, l)
		}
		if strings.HasPrefix(l, "                ") {
			t.Errorf("run --help: a usage wraps (shorten it): %q", l)
		}
	}
	for _, p := range []string{"RATE", "ADDR:PORT", "CIDR[:PORTS]", "NAME:KEY", "FILE", "DIR", "PATH", "DURATION", "MiB", "Keys and peers:", "Ingress (near edge):", "Egress policy (far edge):", "Hub and upstreams:", "Tunnel:", "Limits:", "Operations:"} {
		if !strings.Contains(help, p) {
			t.Errorf("run --help does not show %q", p)
		}
	}
	if strings.Contains(help, "Other:") || strings.Contains(help, "[=true|false]") || strings.Contains(help, `"`) {
		t.Errorf("run --help shows an Other group, [=true|false] or a quoted default:\n%s", help)
	}
}

func TestShownDefault(t *testing.T) {
	var f runFlags
	fs := newRunFlagSet(&f, io.Discard)
	for name, want := range map[string]string{"peer-timeout": "20m", "flow-idle-timeout": "24h", "dial-timeout": "10s", "cc": "bbr", "memory-mib": "384", "key": "", "check": "", "allow": "", "procs": ""} {
		if got := shownDefault(fs.Lookup(name)); got != want {
			t.Errorf("--%s: shown default %q, want %q", name, got, want)
		}
	}
}
