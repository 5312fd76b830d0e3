package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
	"github.com/wanopt/wanopt/internal/version"
)

const manSummary = `Print the manual page wanopt(8) in roff, generated from the same flag
definitions as the help: 'wanopt man | man -l -' shows it, and 'make
install' installs it.`

// runMan is 'wanopt man' (hidden: it serves the build).
func runMan(args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("man", pflag.ContinueOnError)
	if done, err := parseCommand(fs, "wanopt man", manSummary, args, stdout); done || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q: man takes none", fs.Args())
	}
	_, err := io.WriteString(stdout, manPage())
	return err
}

// roff escapes text for a roff text line: backslashes, hyphens (as \-, so
// flags copy as typed) and a leading dot or quote, which would start a
// request.
func roff(s string) string {
	s = strings.NewReplacer(`\`, `\e`, "-", `\-`).Replace(s)
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			l = `\&` + l
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}

// manFlag is a flag's tag and text in a .TP list.
func manFlag(b *strings.Builder, name, short, value, usage string) {
	tag := `\fB\-\-` + roff(name) + `\fR`
	if short != "" {
		tag = `\fB\-` + roff(short) + `\fR, ` + tag
	}
	if value != "" {
		tag += ` \fI` + roff(value) + `\fR`
	}
	fmt.Fprintf(b, ".TP\n%s\n%s\n", tag, roff(usage))
}

// commandHelp reads a command's usage line and paragraph from its --help.
func commandHelp(c cmdInfo) (usage, paragraph string) {
	var b bytes.Buffer
	c.run([]string{"--help"}, &b, io.Discard)
	blocks := strings.Split(strings.TrimSpace(b.String()), "\n\n")
	if len(blocks) > 0 {
		usage = strings.TrimPrefix(strings.SplitN(blocks[0], "\n", 2)[0], "Usage: ")
	}
	if len(blocks) > 1 {
		paragraph = blocks[1]
	}
	return usage, paragraph
}

// manPage is wanopt(8).
func manPage() string {
	var b strings.Builder
	fmt.Fprintf(&b, ".TH WANOPT 8 \"\" \"wanopt %s\" \"System Manager's Manual\"\n", roff(version.Version()))
	b.WriteString(".SH NAME\nwanopt \\- split\\-TCP WAN accelerator: the edge and its operator tools\n")
	cmds := completionModel()
	b.WriteString(".SH SYNOPSIS\n.nf\n")
	usages := map[string]string{}
	paragraphs := map[string]string{}
	for _, c := range commandList {
		if c.hidden {
			continue
		}
		u, p := commandHelp(c)
		usages[c.name], paragraphs[c.name] = u, p
		rest := strings.TrimPrefix(u, "wanopt "+c.name)
		fmt.Fprintf(&b, "\\fBwanopt %s\\fR%s\n", roff(c.name), roff(rest))
	}
	b.WriteString(".fi\n")
	fmt.Fprintf(&b, ".SH DESCRIPTION\n%s\n", roff(wanoptSummary))
	b.WriteString(".PP\nA near edge intercepts the TCP routed into its TUN device (\\fB\\-\\-tun\\fR) and opens the tunnel to its peer " +
		"(\\fB\\-\\-peer\\fR); a far edge accepts it (\\fB\\-\\-listen\\fR) and connects the flows its egress policy allows " +
		"(\\fB\\-\\-allow\\fR). Each edge has a private key (\\fBwanopt keygen\\fR) and knows its peer by its public key.\n")
	b.WriteString(".SH COMMANDS\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, ".TP\n\\fB%s\\fR\n%s\n", roff(usages[c.name]), roff(paragraphs[c.name]))
		if c.name == "run" {
			b.WriteString(".IP\nIts flags are under RUN OPTIONS.\n")
			continue
		}
		if len(c.flags) == 0 {
			continue
		}
		b.WriteString(".RS\n")
		for _, f := range c.flags {
			manFlag(&b, f.name, f.short, f.value, f.usage)
		}
		b.WriteString(".RE\n")
	}
	b.WriteString(".SH RUN OPTIONS\nEvery flag of \\fBwanopt run\\fR is also a key of its configuration file, except \\fB\\-\\-config\\fR and \\fB\\-\\-check\\fR. " +
		"The configuration reference (configuration.md, among the guides) says more of each.\n")
	var f runFlags
	fs := newRunFlagSet(&f, io.Discard)
	for _, g := range groupFlags(fs, runFlagGroups) {
		fmt.Fprintf(&b, ".SS %s\n", roff(g.title))
		for _, fl := range g.flags {
			v, _ := pflag.UnquoteUsage(fl)
			if fl.Value.Type() == "bool" {
				v = ""
			}
			manFlag(&b, fl.Name, fl.Shorthand, v, flagUsage(fl)+".")
		}
		if g.note != "" {
			fmt.Fprintf(&b, ".PP\n%s.\n", roff(upperFirst(g.note)))
		}
	}
	b.WriteString(`.SH CONFIGURATION FILE
\fB\-\-config\fR \fIFILE\fR reads one setting per line, \fIname\fR = \fIvalue\fR, where \fIname\fR is the long flag name without dashes.
\fB#\fR starts a comment; blank lines are ignored; a boolean flag may stand alone.
A repeatable flag takes one line per value; any other setting given twice is an error naming both lines.
Flags on the command line win over the file (for a repeatable flag, over all of its lines).
Every error about the file names it and the line: \fIFILE\fR:\fILINE\fR.
.SH FILES
.TP
.I /etc/wanopt/NAME.conf
the configuration of the edge \fBwanopt@NAME.service\fR runs.
.TP
.I /etc/wanopt/NAME.key
its private key, mode 0600 (\fBwanopt keygen \-\-out\fR \fIFILE\fR).
.TP
.I ` + roff(controlSocketDefault) + `
the control socket of an edge run without \fB\-\-control\fR, which \fBstatus\fR, \fBflows\fR and \fBreload\fR ask when they are given none.
.TP
.I /run/wanopt/NAME.sock
the control socket of \fBwanopt@NAME.service\fR.
.SH ENVIRONMENT
.TP
.B GOMEMLIMIT
the Go runtime's memory limit; without it the edge sets one from \fB\-\-memory\-mib\fR.
.TP
.B WANOPT_CPUPROFILE_DIR
write a CPU profile of the whole run to \fIDIR\fR/\fIROLE\fR\-\fIPID\fR.pprof.
.SH EXIT STATUS
.TP
.B 0
Success; for \fBstatus\fR, every tunnel is up.
.TP
.B 1
Failure: for \fBstatus\fR, \fBflows\fR and \fBreload\fR, the edge cannot be reached (or refused the reload).
.TP
.B 2
A bad command line or configuration (\fBwanopt run \-\-check\fR exits 2 for a configuration it refuses).
.TP
.B 3
\fBstatus\fR: a tunnel is down.
.SH SEE ALSO
.BR ip (8),
.BR systemctl (1),
.BR systemd.exec (5),
.BR tcpdump (8).
The guides installed with wanopt (by default in /usr/local/share/doc/wanopt): configuration.md, operations.md, troubleshooting.md, deploy.md, security.md.
`)
	return b.String()
}

// upperFirst capitalises the first letter of a sentence.
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
