package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// Help follows one style for every command: "Usage: wanopt CMD [flags]
// ARGS", a blank line, one paragraph, a blank line, "Flags:" and the flags
// as pflag prints them. --help, -h and 'wanopt help CMD' print it on
// standard output; a bad command line is an error wrapping errUsage, which
// dispatch prints on standard error with a pointer to the help.

// valuesAnnotation is the pflag annotation that lists the words a flag
// takes, for the completions.
const valuesAnnotation = "wanopt_values"

// flagGroup is a titled group of a command's flags in its help and manual
// page; note, if any, follows the group's flags.
type flagGroup struct {
	title string
	names []string
	note  string
}

// helpText formats a command's help: the usage line, the paragraph, any
// extra blocks (examples), then the flags, in groups if groups is not
// empty.
func helpText(usage, paragraph string, fs *pflag.FlagSet, groups []flagGroup, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n\n%s\n", usage, strings.TrimSpace(paragraph))
	for _, e := range extra {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimRight(e, "\n"))
	}
	if fs == nil || !fs.HasAvailableFlags() {
		return b.String()
	}
	col := flagColumn(fs)
	if len(groups) == 0 {
		b.WriteString("\nFlags:\n")
		fs.VisitAll(func(fl *pflag.Flag) {
			if !fl.Hidden {
				b.WriteString(formatFlag(fl, col))
			}
		})
		return b.String()
	}
	for _, g := range groupFlags(fs, groups) {
		fmt.Fprintf(&b, "\n%s:\n", g.title)
		for _, fl := range g.flags {
			b.WriteString(formatFlag(fl, col))
		}
		if g.note != "" {
			fmt.Fprintf(&b, "  %s\n", g.note)
		}
	}
	return b.String()
}

// flagHead is the left column of a flag's help line: "  -x, --name VALUE"
// or "      --name VALUE".
func flagHead(fl *pflag.Flag) string {
	h := "      --" + fl.Name
	if fl.Shorthand != "" {
		h = "  -" + fl.Shorthand + ", --" + fl.Name
	}
	if v, _ := pflag.UnquoteUsage(fl); v != "" && fl.Value.Type() != "bool" {
		h += " " + v
	}
	return h
}

// flagColumn is where the usages of fs's flags start.
func flagColumn(fs *pflag.FlagSet) int {
	col := 0
	fs.VisitAll(func(fl *pflag.Flag) { col = max(col, len(flagHead(fl))) })
	return col + 3
}

// formatFlag is a flag's help line, its usage starting at column col: as
// pflag prints it, but booleans without "[=true|false]", defaults
// unquoted and durations short ("20m", not "20m0s").
func formatFlag(fl *pflag.Flag, col int) string {
	h := flagHead(fl)
	line := h + strings.Repeat(" ", max(col-len(h), 2))
	var b strings.Builder
	for _, w := range strings.Fields(flagUsage(fl)) {
		if len(line)+1+len(w) > helpWidth && len(strings.TrimSpace(line)) > len(h) {
			b.WriteString(line + "\n")
			line = strings.Repeat(" ", col)
		} else if len(line) > 0 && line[len(line)-1] != ' ' {
			line += " "
		}
		line += w
	}
	b.WriteString(line + "\n")
	return b.String()
}

// helpWidth is the width help lines wrap at.
const helpWidth = 100

// flagUsage is a flag's usage with its placeholder, its default and
// whether it repeats.
func flagUsage(fl *pflag.Flag) string {
	_, usage := pflag.UnquoteUsage(fl)
	if d := shownDefault(fl); d != "" {
		usage += " (default " + d + ")"
	}
	if _, ok := fl.Value.(pflag.SliceValue); ok {
		usage += " (repeatable)"
	}
	return usage
}

// shownDefault is the default a flag's help states, "" if it is nothing
// (empty, zero, false).
func shownDefault(fl *pflag.Flag) string {
	d := fl.DefValue
	switch d {
	case "", "0", "false", "[]", "0s":
		return ""
	}
	if fl.Value.Type() == "duration" {
		if strings.HasSuffix(d, "m0s") {
			d = strings.TrimSuffix(d, "0s")
		}
		if strings.HasSuffix(d, "h0m") {
			d = strings.TrimSuffix(d, "0m")
		}
	}
	return d
}

// shownGroup is a group with its flags.
type shownGroup struct {
	flagGroup
	flags []*pflag.Flag
}

// groupFlags returns the groups with their flags, and the flags no group
// names in a last group, "Other", so that no flag goes unshown.
func groupFlags(fs *pflag.FlagSet, groups []flagGroup) []shownGroup {
	var out []shownGroup
	placed := map[string]bool{}
	for _, g := range groups {
		sg := shownGroup{flagGroup: g}
		for _, n := range g.names {
			if fl := fs.Lookup(n); fl != nil && !fl.Hidden {
				sg.flags = append(sg.flags, fl)
				placed[n] = true
			}
		}
		out = append(out, sg)
	}
	other := shownGroup{flagGroup: flagGroup{title: "Other"}}
	fs.VisitAll(func(fl *pflag.Flag) {
		if !placed[fl.Name] && !fl.Hidden {
			other.flags = append(other.flags, fl)
		}
	})
	if len(other.flags) > 0 {
		out = append(out, other)
	}
	return out
}

// parseCommand parses args into fs for a command whose help has the
// usage line and summary given: done reports that --help or -h printed
// that help on stdout; a bad command line is a usage error.
func parseCommand(fs *pflag.FlagSet, usage, summary string, args []string, stdout io.Writer) (done bool, err error) {
	err = parseFlags(fs, args)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Fprint(stdout, helpText(usage, summary, fs, nil))
		return true, nil
	}
	return false, err
}

// parseFlags parses args into fs and words pflag's errors for the
// operator: pflag.ErrHelp for --help or -h, else a usage error.
func parseFlags(fs *pflag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if err == nil || errors.Is(err, pflag.ErrHelp) {
		return err
	}
	var (
		invalid  *pflag.InvalidValueError
		required *pflag.ValueRequiredError
		unknown  *pflag.NotExistError
	)
	switch {
	case errors.As(err, &invalid):
		return usagef("--%s %s", invalid.GetFlag().Name, valueProblem(err))
	case errors.As(err, &required):
		fl := required.GetFlag()
		return usagef("--%s needs a value: --%s %s", fl.Name, fl.Name, placeholder(fl))
	case errors.As(err, &unknown):
		dashes := "--"
		if unknown.GetSpecifiedShortnames() != "" {
			dashes = "-"
		}
		return usagef("unknown flag %s%s", dashes, unknown.GetSpecifiedName())
	}
	return usagef("%v", err)
}

// valueProblem words a flag value pflag refused ("lots: not a whole
// number"), without the parser's text.
func valueProblem(err error) string {
	var invalid *pflag.InvalidValueError
	if !errors.As(err, &invalid) {
		return err.Error()
	}
	why := invalid.Unwrap().Error()
	switch invalid.GetFlag().Value.Type() {
	case "int", "int64", "uint", "uint64":
		why = "not a whole number"
	case "duration":
		why = "not a duration: want a number and a unit, e.g. 300ms, 10s, 20m or 24h"
	case "bool":
		why = "want true or false"
	}
	return fmt.Sprintf("%s: %s", invalid.GetValue(), why)
}

// placeholder is the value a flag takes as its help shows it (FILE,
// CIDR[:PORTS]).
func placeholder(fl *pflag.Flag) string {
	v, _ := pflag.UnquoteUsage(fl)
	if v == "" {
		return "VALUE"
	}
	return v
}

// runRunHelped is 'wanopt run': --help prints run's help on standard
// output; everything else is runRun's.
func runRunHelped(args []string, stdout, stderr io.Writer) error {
	var f runFlags
	if errors.Is(parseFlags(newRunFlagSet(&f, io.Discard), args), pflag.ErrHelp) {
		fmt.Fprint(stdout, runHelpText())
		return nil
	}
	return runRun(args, stdout, stderr)
}

// runHelpText is 'wanopt run --help'.
func runHelpText() string {
	var f runFlags
	return helpText("wanopt run [flags]", runSummary, newRunFlagSet(&f, io.Discard), runFlagGroups, runExamples)
}
