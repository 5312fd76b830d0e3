package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/spf13/pflag"
)

const completionSummary = `Print a completion script for bash or zsh, which completes the commands,
each command's flags, the words a flag takes (--cc bbr or cubic) and file
names where a flag takes a FILE, DIR or PATH. The script is generated from
the commands' flag definitions. Install it with
'wanopt completion bash > /usr/share/bash-completion/completions/wanopt' or
'wanopt completion zsh > /usr/share/zsh/site-functions/_wanopt', or try it
with 'source <(wanopt completion bash)'.`

// runCompletion is 'wanopt completion bash|zsh'.
func runCompletion(args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("completion", pflag.ContinueOnError)
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(stdout, helpText("wanopt completion bash|zsh", completionSummary, fs, nil))
			return nil
		}
		return err
	}
	if fs.NArg() != 1 {
		return usagef("name one shell, bash or zsh")
	}
	cmds := completionModel()
	switch fs.Arg(0) {
	case "bash":
		_, err := io.WriteString(stdout, bashCompletion(cmds))
		return err
	case "zsh":
		_, err := io.WriteString(stdout, zshCompletion(cmds))
		return err
	}
	return usagef("unknown shell %q: want bash or zsh", fs.Arg(0))
}

// compFlag is a flag as the completions see it.
type compFlag struct {
	name, short string
	value       string // the placeholder; "" for a boolean
	usage       string
	repeatable  bool
	words       []string // the values it takes, if they are a list
}

// files says what a flag's value completes to: "file", "dir" or "".
func (f compFlag) files() string {
	switch f.value {
	case "FILE", "PATH":
		return "file"
	case "DIR":
		return "dir"
	}
	return ""
}

// compCmd is a command as the completions see it.
type compCmd struct {
	name, summary, args string
	flags               []compFlag
}

// completionModel is every listed command with its flags: from its flag
// set where this file knows it, else read from the command's own help
// (status, flows and reload), which prints its flag set.
func completionModel() []compCmd {
	var out []compCmd
	for _, c := range commandList {
		if c.hidden {
			continue
		}
		cc := compCmd{name: c.name, summary: c.summary, args: c.args}
		if fs := commandFlags(c.name); fs != nil {
			fs.VisitAll(func(fl *pflag.Flag) {
				if fl.Hidden || fl.Name == "help" {
					return
				}
				v, u := pflag.UnquoteUsage(fl)
				if fl.Value.Type() == "bool" {
					v = ""
				}
				_, rep := fl.Value.(pflag.SliceValue)
				cc.flags = append(cc.flags, compFlag{name: fl.Name, short: fl.Shorthand, value: v, usage: u, repeatable: rep, words: fl.Annotations[valuesAnnotation]})
			})
		} else {
			cc.flags = flagsFromHelp(c)
		}
		out = append(out, cc)
	}
	return out
}

// commandFlags is the flag set of a command this file knows, or nil.
func commandFlags(name string) *pflag.FlagSet {
	switch name {
	case "run":
		var f runFlags
		return newRunFlagSet(&f, io.Discard)
	case "keygen":
		fs, _ := keygenFlags()
		return fs
	case "pubkey":
		return pubkeyFlags()
	case "analyze":
		return analyzeFlags(&analyzeOptions{})
	case "version":
		return versionFlags()
	case "completion", "help", "man":
		return pflag.NewFlagSet(name, pflag.ContinueOnError)
	}
	return nil
}

// helpFlagLine matches a flag's line in a help text: "  -j, --json",
// "      --control PATH", then two spaces and the usage.
var helpFlagLine = regexp.MustCompile(`^\s+(?:-([a-zA-Z0-9]), )?--([a-z0-9][a-z0-9-]*)(\[=[^\]]*\])?(?: (\S+))?\s{2,}(.*)$`)

// flagsFromHelp reads a command's flags from its --help.
func flagsFromHelp(c cmdInfo) []compFlag {
	var b bytes.Buffer
	c.run([]string{"--help"}, &b, &b)
	var out []compFlag
	cont := false // the last flag line may go on, indented deeper
	for _, l := range strings.Split(b.String(), "\n") {
		m := helpFlagLine.FindStringSubmatch(l)
		switch {
		case m != nil && m[2] != "help":
			out = append(out, compFlag{name: m[2], short: m[1], value: m[4], usage: m[5]})
			cont = true
		case m != nil:
			cont = false
		case cont && strings.HasPrefix(l, "        ") && strings.TrimSpace(l) != "":
			out[len(out)-1].usage += " " + strings.TrimSpace(l)
		default:
			cont = false
		}
	}
	for i := range out {
		out[i].repeatable = strings.Contains(out[i].usage, "(repeatable)")
	}
	return out
}

// argWords is what completes after a command's flags, for bash: the
// compgen options.
func (c compCmd) argWords(cmds []compCmd) string {
	switch c.args {
	case "":
		return ""
	case "file":
		return "-f"
	case "commands":
		var names []string
		for _, x := range cmds {
			names = append(names, x.name)
		}
		return "-W " + shellQuote(strings.Join(names, " "))
	}
	return "-W " + shellQuote(c.args)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func bashCompletion(cmds []compCmd) string {
	var b strings.Builder
	b.WriteString(`# bash completion for wanopt, generated by 'wanopt completion bash'.
# Install it as /usr/share/bash-completion/completions/wanopt, or try it
# with: source <(wanopt completion bash)

_wanopt_reply() {
    # _wanopt_reply COMPGEN-ARGS...: set COMPREPLY to compgen's words for $cur.
    mapfile -t COMPREPLY < <(compgen "$@" -- "$cur")
}

_wanopt() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev="" cmd="" i
    (( COMP_CWORD > 0 )) && prev=${COMP_WORDS[COMP_CWORD-1]}
    # --flag=VALUE: bash splits the word at '='.
    if [[ $cur == "=" ]]; then
        cur=""
    elif [[ $prev == "=" ]] && (( COMP_CWORD > 1 )); then
        prev=${COMP_WORDS[COMP_CWORD-2]}
    fi
    for (( i = 1; i < COMP_CWORD; i++ )); do
        case ${COMP_WORDS[i]} in
            -*|=) ;;
            *) cmd=${COMP_WORDS[i]}; break ;;
        esac
    done
    if [[ -z $cmd ]]; then
`)
	var names []string
	for _, c := range cmds {
		names = append(names, c.name)
	}
	fmt.Fprintf(&b, "        _wanopt_reply -W %s\n        return 0\n    fi\n    case $cmd in\n", shellQuote(strings.Join(append(names, "--help", "--version"), " ")))
	for _, c := range cmds {
		fmt.Fprintf(&b, "    %s)\n", c.name)
		var valued []string
		cases := map[string][]string{}
		var order []string
		for _, f := range c.flags {
			if f.value == "" {
				continue
			}
			names := []string{"--" + f.name}
			if f.short != "" {
				names = append(names, "-"+f.short)
			}
			action := ""
			switch {
			case len(f.words) > 0:
				action = "_wanopt_reply -W " + shellQuote(strings.Join(f.words, " "))
			case f.files() == "file":
				action = "compopt -o filenames 2>/dev/null; _wanopt_reply -f"
			case f.files() == "dir":
				action = "compopt -o filenames 2>/dev/null; _wanopt_reply -d"
			default:
				valued = append(valued, names...)
				continue
			}
			if _, ok := cases[action]; !ok {
				order = append(order, action)
			}
			cases[action] = append(cases[action], names...)
		}
		if len(order) > 0 || len(valued) > 0 {
			b.WriteString("        case $prev in\n")
			for _, a := range order {
				fmt.Fprintf(&b, "            %s) %s; return 0 ;;\n", strings.Join(cases[a], "|"), a)
			}
			if len(valued) > 0 {
				fmt.Fprintf(&b, "            %s) return 0 ;;\n", strings.Join(valued, "|"))
			}
			b.WriteString("        esac\n")
		}
		var flags []string
		for _, f := range c.flags {
			flags = append(flags, "--"+f.name)
			if f.short != "" {
				flags = append(flags, "-"+f.short)
			}
		}
		flags = append(flags, "--help")
		fmt.Fprintf(&b, "        if [[ $cur == -* ]]; then\n            _wanopt_reply -W %s\n", shellQuote(strings.Join(flags, " ")))
		if w := c.argWords(cmds); w != "" {
			if w == "-f" {
				fmt.Fprintf(&b, "        else\n            compopt -o filenames 2>/dev/null\n            _wanopt_reply -f\n")
			} else {
				fmt.Fprintf(&b, "        else\n            _wanopt_reply %s\n", w)
			}
		}
		b.WriteString("        fi\n        ;;\n")
	}
	b.WriteString(`    esac
    return 0
}

complete -F _wanopt wanopt
`)
	return b.String()
}

// zshQuote makes s fit inside a single-quoted _arguments spec, escaping
// what _arguments reads as syntax.
func zshQuote(s string, colons bool) string {
	s = strings.NewReplacer(`\`, `\\`, `[`, `\[`, `]`, `\]`).Replace(s)
	if colons {
		s = strings.ReplaceAll(s, ":", `\:`)
	}
	return strings.ReplaceAll(s, "'", `'\''`)
}

func zshCompletion(cmds []compCmd) string {
	var b strings.Builder
	b.WriteString(`#compdef wanopt
# zsh completion for wanopt, generated by 'wanopt completion zsh'.
# Install it as _wanopt in a directory of $fpath, e.g.
# /usr/share/zsh/site-functions/_wanopt, or try it with:
# source <(wanopt completion zsh)

_wanopt() {
    local curcontext=$curcontext state line
    local -a commands
    commands=(
`)
	var names []string
	for _, c := range cmds {
		names = append(names, c.name)
		fmt.Fprintf(&b, "        '%s:%s'\n", c.name, zshQuote(c.summary, true))
	}
	b.WriteString(`    )
    _arguments -C \
        '(- *)'{-h,--help}'[print the help]' \
        '(- *)--version[print the version]' \
        '1: :->command' \
        '*:: :->args'
    case $state in
    command)
        _describe -t commands 'wanopt command' commands
        ;;
    args)
        case $words[1] in
`)
	for _, c := range cmds {
		fmt.Fprintf(&b, "        %s)\n            _arguments -s \\\n", c.name)
		for _, f := range c.flags {
			rep := ""
			if f.repeatable {
				rep = "*"
			}
			spec := "--" + f.name
			desc := "[" + zshQuote(f.usage, false) + "]"
			if f.value == "" {
				fmt.Fprintf(&b, "                '%s%s%s' \\\n", rep, spec, desc)
				if f.short != "" {
					fmt.Fprintf(&b, "                '%s-%s%s' \\\n", rep, f.short, desc)
				}
				continue
			}
			action := " "
			switch {
			case len(f.words) > 0:
				action = "(" + strings.Join(f.words, " ") + ")"
			case f.files() == "file":
				action = "_files"
			case f.files() == "dir":
				action = "_files -/"
			}
			msg := zshQuote(f.value, true)
			fmt.Fprintf(&b, "                '%s%s=%s:%s:%s' \\\n", rep, spec, desc, msg, action)
			if f.short != "" {
				fmt.Fprintf(&b, "                '%s-%s+%s:%s:%s' \\\n", rep, f.short, desc, msg, action)
			}
		}
		switch c.args {
		case "":
		case "file":
			b.WriteString("                '1:capture FILE:_files' \\\n")
		case "commands":
			fmt.Fprintf(&b, "                '1:command:(%s)' \\\n", strings.Join(names, " "))
		default:
			fmt.Fprintf(&b, "                '1:argument:(%s)' \\\n", c.args)
		}
		b.WriteString("                '(- *)--help[print the help]'\n            ;;\n")
	}
	b.WriteString(`        esac
        ;;
    esac
}

if [[ $funcstack[1] == _wanopt ]]; then
    _wanopt "$@"
else
    compdef _wanopt wanopt
fi
`)
	return b.String()
}
