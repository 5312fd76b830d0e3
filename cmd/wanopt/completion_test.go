package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func completionScript(t *testing.T, shell string) string {
	t.Helper()
	code, out, errs := run("completion", shell)
	if code != 0 || errs != "" {
		t.Fatalf("completion %s: exit %d, stderr %q", shell, code, errs)
	}
	return out
}

// TestBashCompletion: the script parses (bash -n) and, sourced, completes
// commands, flags, the words a flag takes and file names.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed: cannot check the bash completion")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "wanopt.bash")
	if err := os.WriteFile(script, []byte(completionScript(t, "bash")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bash, "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	files := filepath.Join(dir, "files")
	os.MkdirAll(filepath.Join(files, "keys"), 0o755)
	os.WriteFile(filepath.Join(files, "near.key"), nil, 0o600)
	complete := func(words ...string) []string {
		t.Helper()
		// COMP_WORDS as bash splits the line, the cursor in the last word.
		var q []string
		for _, w := range words {
			q = append(q, shellQuote(w))
		}
		prog := "source " + shellQuote(script) + "\ncd " + shellQuote(files) + "\nCOMP_WORDS=(" + strings.Join(q, " ") + ")\nCOMP_CWORD=" +
			strconv.Itoa(len(words)-1) + "\n_wanopt\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		out, err := exec.Command(bash, "--norc", "--noprofile", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("completing %q: %v\n%s", words, err, out)
		}
		return strings.Fields(string(out))
	}
	for _, tc := range []struct {
		words []string
		want  []string
	}{
		{[]string{"wanopt", "ru"}, []string{"run"}},
		{[]string{"wanopt", "--v"}, []string{"--version"}},
		{[]string{"wanopt", "run", "--wan"}, []string{"--wan-rate"}},
		{[]string{"wanopt", "run", "--peer-"}, []string{"--peer-key", "--peer-name", "--peer-timeout"}},
		{[]string{"wanopt", "run", "--cc", ""}, []string{"bbr", "cubic"}},
		{[]string{"wanopt", "run", "--log-level", "w"}, []string{"warn"}},
		{[]string{"wanopt", "run", "--key", "ne"}, []string{"near.key"}},
		{[]string{"wanopt", "run", "--key", "=", "ne"}, []string{"near.key"}},
		{[]string{"wanopt", "run", "--capture", ""}, []string{"keys"}},
		{[]string{"wanopt", "run", "--allow", ""}, nil},
		{[]string{"wanopt", "run", "--tun", "wo0", "--che"}, []string{"--check"}},
		{[]string{"wanopt", "keygen", "--o"}, []string{"--out"}},
		{[]string{"wanopt", "analyze", "ne"}, []string{"near.key"}},
		{[]string{"wanopt", "analyze", "--plot-format", ""}, []string{"png", "svg"}},
		{[]string{"wanopt", "status", "--j"}, []string{"--json"}},
		{[]string{"wanopt", "flows", "--w"}, []string{"--why"}},
		{[]string{"wanopt", "help", "st"}, []string{"status"}},
		{[]string{"wanopt", "completion", ""}, []string{"bash", "zsh"}},
	} {
		if got := complete(tc.words...); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("completing %q: %q, want %q", tc.words, got, tc.want)
		}
	}
	// Every flag of run completes: the script comes from the flag set.
	got := " " + strings.Join(complete("wanopt", "run", "--"), " ") + " "
	var f runFlags
	newRunFlagSet(&f, io.Discard).VisitAll(func(fl *pflag.Flag) {
		if !strings.Contains(got, " --"+fl.Name+" ") {
			t.Errorf("wanopt run --<TAB> does not offer --%s", fl.Name)
		}
	})
}

// TestZshCompletion: the script names every command and flag, and parses
// (zsh -n) where zsh is installed.
func TestZshCompletion(t *testing.T) {
	script := completionScript(t, "zsh")
	if !strings.HasPrefix(script, "#compdef wanopt\n") {
		t.Errorf("the zsh script does not start with #compdef wanopt")
	}
	for _, c := range completionModel() {
		if !strings.Contains(script, "'"+c.name+":") || !strings.Contains(script, "        "+c.name+")\n") {
			t.Errorf("the zsh script does not describe or complete %s", c.name)
		}
		for _, f := range c.flags {
			if !strings.Contains(script, "--"+f.name+"[") && !strings.Contains(script, "--"+f.name+"=[") {
				t.Errorf("the zsh script does not complete %s --%s", c.name, f.name)
			}
		}
	}
	if !strings.Contains(script, "'--key=[read this edge'\\''s private key from FILE]:FILE:_files'") ||
		!strings.Contains(script, "'*--allow=[connect only flows to CIDR\\[:PORTS\\]]:CIDR\\[\\:PORTS\\]: '") ||
		!strings.Contains(script, ":NAME:(bbr cubic)'") {
		t.Errorf("the zsh script's specs are not as expected:\n%s", script)
	}
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skip("zsh is not installed: its script was checked for content, not parsed")
	}
	path := filepath.Join(t.TempDir(), "_wanopt")
	os.WriteFile(path, []byte(script), 0o644)
	if out, err := exec.Command(zsh, "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
}
