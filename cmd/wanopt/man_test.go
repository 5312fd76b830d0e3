package main

import (
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestManPage: wanopt(8) has the sections of a manual page, every command
// and every flag of run by group, and renders without a warning.
func TestManPage(t *testing.T) {
	code, page, errs := run("man")
	if code != 0 || errs != "" {
		t.Fatalf("man: exit %d, stderr %q", code, errs)
	}
	if !strings.HasPrefix(page, ".TH WANOPT 8 ") {
		t.Errorf("the page starts %.30q; want .TH WANOPT 8", page)
	}
	for _, sec := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "RUN OPTIONS", "CONFIGURATION FILE", "FILES", "ENVIRONMENT", "EXIT STATUS", "SEE ALSO"} {
		if !strings.Contains(page, "\n.SH "+sec+"\n") {
			t.Errorf("no section %s", sec)
		}
	}
	for _, g := range runFlagGroups {
		if !strings.Contains(page, "\n.SS "+roff(g.title)+"\n") {
			t.Errorf("no subsection for the run flags %q", g.title)
		}
	}
	var f runFlags
	newRunFlagSet(&f, io.Discard).VisitAll(func(fl *pflag.Flag) {
		if !strings.Contains(page, `\fB\-\-`+roff(fl.Name)+`\fR`) {
			t.Errorf("the page does not describe --%s", fl.Name)
		}
	})
	for _, c := range commandList {
		if !c.hidden && !strings.Contains(page, `\fBwanopt `+c.name) {
			t.Errorf("the page does not describe %s", c.name)
		}
	}
	for _, code := range []string{"0", "1", "2", "3"} {
		if !strings.Contains(page, ".TP\n.B "+code+"\n") {
			t.Errorf("EXIT STATUS does not describe %s", code)
		}
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skip("groff is not installed: the page was not rendered")
	}
	cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = strings.NewReader(page)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("groff -man -ww: %v\n%s", err, out)
	}
}

func TestRoff(t *testing.T) {
	for in, want := range map[string]string{
		`--key FILE`:        `\-\-key FILE`,
		`a\b`:               `a\eb`,
		".starts a request": `\&.starts a request`,
		"'quoted":           `\&'quoted`,
		"two\n.lines":       "two\n\\&.lines",
	} {
		if got := roff(in); got != want {
			t.Errorf("roff(%q) = %q, want %q", in, got, want)
		}
	}
}
