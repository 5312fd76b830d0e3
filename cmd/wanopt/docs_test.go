package main

// Tests that keep the documentation honest: the configuration reference
// against the flags 'wanopt run' really has, and every relative link of
// the Markdown pages against the files of the repository. 'make
// docs-check' runs both.

import (
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/spf13/pflag"
)

// repoRoot is the repository's root, seen from this package's directory
// (where 'go test' runs the test binary).
const repoRoot = "../.."

// configurationDoc is the configuration reference.
const configurationDoc = "../../docs/guide/configuration.md"

// runReferenceHeading starts the reference of 'wanopt run' in
// configurationDoc; the next level-2 heading ("## ...") ends it.
const runReferenceHeading = "## `wanopt run` flags"

// flagRow is a table row of the run reference that documents a flag: its
// first cell is the flag in backticks, "| `--memory-mib` | ...".
var flagRow = regexp.MustCompile("^\\|\\s*`--([a-z0-9][a-z0-9-]*)`\\s*\\|")

// flagMention is any long flag named in the run reference's text.
var flagMention = regexp.MustCompile(`(^|[^a-zA-Z0-9-])--([a-z][a-z0-9-]*)`)

// otherCommands is a code span that shows another command, such as
// `wanopt keygen --out FILE`: its flags are not run's.
var otherCommands = regexp.MustCompile("`wanopt (?:analyze|keygen|pubkey|status|flows|reload|help)\\b[^`]*`")

// TestConfigurationReferenceListsEveryFlag checks the run reference of
// docs/guide/configuration.md, the part from the heading
// runReferenceHeading to the next level-2 heading, against the flag set of
// 'wanopt run' (newRunFlagSet):
//
//   - every flag has a row there whose first cell is the flag in
//     backticks ("| `--memory-mib` | ...");
//   - every such row names a flag that exists, and no flag has two rows;
//   - every --name the section mentions anywhere (in a row, in prose) is a
//     flag of 'wanopt run' (or --help), so a rename cannot leave a stale
//     cross-reference either. A code span that shows another command
//     (`wanopt keygen --out FILE`) is left out; the other commands' flags
//     are documented after the section;
//   - when the default --help shows is not empty, zero or false, the row's
//     Default cell (the column headed "Default" of its table) states it.
//     The cell is split into words of letters, digits, '.' and '_'; one
//     word must equal the default as --help prints it ("384", "bbr",
//     "1500"), or, for a duration flag, parse with time.ParseDuration to
//     the same value ("20m" for 20m0s, "24h" for 24h0m0s). Write numbers
//     in plain digits ("4096", not "4,096").
func TestConfigurationReferenceListsEveryFlag(t *testing.T) {
	raw, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	start, end := -1, len(lines)
	for i, l := range lines {
		l = strings.TrimRight(l, " \t\r")
		switch {
		case start < 0 && l == runReferenceHeading:
			start = i + 1
		case start >= 0 && strings.HasPrefix(l, "## "):
			end = i
		}
		if end < len(lines) {
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s: no heading %q: the test reads the run reference from it to the next level-2 heading", configurationDoc, runReferenceHeading)
	}

	var f runFlags
	fset := newRunFlagSet(&f, io.Discard)

	type row struct {
		line  int // 1-based
		cells []string
		def   int // index of the Default cell, -1 if the table has none
	}
	rows := map[string]row{}
	defCol := -1
	for i := start; i < end; i++ {
		l := strings.TrimSpace(lines[i])
		n := i + 1
		if isTableRow(l) && i+1 < end && isTableSeparator(strings.TrimSpace(lines[i+1])) {
			defCol = slices.IndexFunc(tableCells(l), func(c string) bool { return strings.EqualFold(c, "Default") })
		}
		for _, m := range flagMention.FindAllStringSubmatch(otherCommands.ReplaceAllString(l, "``"), -1) {
			if name := m[2]; name != "help" && fset.Lookup(name) == nil {
				t.Errorf("%s:%d: mentions --%s, which is not a flag of 'wanopt run' (renamed or removed?)", configurationDoc, n, name)
			}
		}
		m := flagRow.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		name := m[1]
		if r, dup := rows[name]; dup {
			t.Errorf("%s:%d: a second row for --%s (the first is on line %d)", configurationDoc, n, name, r.line)
			continue
		}
		rows[name] = row{line: n, cells: tableCells(l), def: defCol}
	}

	var missing []string
	fset.VisitAll(func(fl *pflag.Flag) {
		r, ok := rows[fl.Name]
		if !ok {
			missing = append(missing, "--"+fl.Name)
			return
		}
		if !hasDefault(fl) {
			return
		}
		if r.def < 0 || r.def >= len(r.cells) {
			t.Errorf("%s:%d: --%s defaults to %q, but its table has no Default column", configurationDoc, r.line, fl.Name, fl.DefValue)
			return
		}
		if !statesDefault(fl, r.cells[r.def]) {
			t.Errorf("%s:%d: --%s defaults to %q ('wanopt run --help'), but its Default cell says %q", configurationDoc, r.line, fl.Name, fl.DefValue, r.cells[r.def])
		}
	})
	for _, name := range missing {
		t.Errorf("%s: flag %s of 'wanopt run' has no row in the run reference (a row beginning \"| `%s` |\" under %q)", configurationDoc, name, name, runReferenceHeading)
	}
	for name, r := range rows {
		if fset.Lookup(name) == nil {
			t.Errorf("%s:%d: documents --%s, which 'wanopt run' does not have (renamed or removed?)", configurationDoc, r.line, name)
		}
	}
}

// hasDefault reports whether --help shows a default for fl worth stating.
func hasDefault(fl *pflag.Flag) bool {
	switch fl.DefValue {
	case "", "0", "false", "[]", "0s":
		return false
	}
	return true
}

var cellWord = regexp.MustCompile(`[A-Za-z0-9._]+`)

// statesDefault reports whether the Default cell states fl's default, by
// the rule of TestConfigurationReferenceListsEveryFlag.
func statesDefault(fl *pflag.Flag, cell string) bool {
	var want time.Duration
	isDuration := fl.Value.Type() == "duration"
	if isDuration {
		var err error
		if want, err = time.ParseDuration(fl.DefValue); err != nil {
			isDuration = false
		}
	}
	for _, w := range cellWord.FindAllString(cell, -1) {
		if w == fl.DefValue {
			return true
		}
		if d, err := time.ParseDuration(w); isDuration && err == nil && d == want {
			return true
		}
	}
	return false
}

// isTableRow reports whether the trimmed line is a Markdown table row.
func isTableRow(l string) bool { return strings.HasPrefix(l, "|") }

var tableSeparator = regexp.MustCompile(`^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?$`)

// isTableSeparator reports whether the trimmed line is the |---|---| line
// under a table's header.
func isTableSeparator(l string) bool {
	return strings.Contains(l, "-") && tableSeparator.MatchString(l)
}

// tableCells splits a table row into its trimmed cells, at the pipes that
// are not escaped (\|), as GitHub does.
func tableCells(l string) []string {
	l = strings.TrimSpace(l)
	l = strings.TrimPrefix(l, "|")
	if strings.HasSuffix(l, "|") && !strings.HasSuffix(l, `\|`) {
		l = l[:len(l)-1]
	}
	var cells []string
	var b strings.Builder
	for i := 0; i < len(l); i++ {
		switch {
		case l[i] == '\\' && i+1 < len(l) && l[i+1] == '|':
			b.WriteByte('|')
			i++
		case l[i] == '|':
			cells = append(cells, strings.TrimSpace(b.String()))
			b.Reset()
		default:
			b.WriteByte(l[i])
		}
	}
	return append(cells, strings.TrimSpace(b.String()))
}

// TestDocLinks checks the links of README.md and of every *.md under
// docs/: each Markdown link or image ([text](target), ![alt](target), a
// reference definition "[name]: target") and each <img src> or <a href>,
// outside code blocks and code spans. Links to http://, https:// and
// mailto: are left alone. Any other target is a path relative to the page
// (with an optional #anchor), and must name a file or directory of the
// work tree inside the repository. An #anchor into a Markdown page (or a
// page's own "#anchor") must match one of its headings as GitHub makes
// their anchors (lower case, punctuation dropped, spaces to '-', "-1",
// "-2" for repeats) or an HTML id or name. Each broken link is reported
// as file:line.
func TestDocLinks(t *testing.T) {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	pages := []string{filepath.Join(root, "README.md")}
	err = filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			pages = append(pages, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{} // page -> its anchors, lower case
	anchorsOf := func(page string) (map[string]bool, error) {
		if a, ok := anchors[page]; ok {
			return a, nil
		}
		raw, err := os.ReadFile(page)
		if err != nil {
			return nil, err
		}
		a := markdownAnchors(string(raw))
		anchors[page] = a
		return a, nil
	}
	checked, broken := 0, 0
	for _, page := range pages {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Error(err)
			continue
		}
		rel, _ := filepath.Rel(root, page)
		for _, l := range markdownLinks(string(raw)) {
			checked++
			if why := checkLink(root, page, l.target, anchorsOf); why != "" {
				broken++
				t.Errorf("%s:%d: link %q: %s", rel, l.line, l.target, why)
			}
		}
	}
	t.Logf("%d pages, %d links checked, %d broken", len(pages), checked, broken)
}

// checkLink returns why target, a link on page, is broken, or "".
func checkLink(root, page, target string, anchorsOf func(string) (map[string]bool, error)) string {
	target = strings.TrimSpace(target)
	target = strings.TrimSuffix(strings.TrimPrefix(target, "<"), ">")
	lower := strings.ToLower(target)
	for _, p := range []string{"http://", "https://", "mailto:"} {
		if strings.HasPrefix(lower, p) {
			return ""
		}
	}
	if urlScheme.MatchString(lower) {
		return "not a relative link (documentation links only to files of the repository)"
	}
	path, anchor, _ := strings.Cut(target, "#")
	path, _, _ = strings.Cut(path, "?")
	if p, err := url.PathUnescape(path); err == nil {
		path = p
	}
	if path == "" { // "#anchor": this page's own heading
		return checkAnchor(page, anchor, anchorsOf)
	}
	if strings.HasPrefix(path, "/") {
		return "an absolute path: make it relative to the page"
	}
	abs := filepath.Join(filepath.Dir(page), filepath.FromSlash(path))
	if rel, err := filepath.Rel(root, abs); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "points outside the repository"
	}
	fi, err := os.Stat(abs)
	if err != nil {
		rel, _ := filepath.Rel(root, abs)
		return fmt.Sprintf("%s does not exist", filepath.ToSlash(rel))
	}
	if anchor != "" && !fi.IsDir() && strings.HasSuffix(abs, ".md") {
		return checkAnchor(abs, anchor, anchorsOf)
	}
	return ""
}

// checkAnchor returns why #anchor names no heading of page, or "".
func checkAnchor(page, anchor string, anchorsOf func(string) (map[string]bool, error)) string {
	if anchor == "" {
		return ""
	}
	if a, err := url.PathUnescape(anchor); err == nil {
		anchor = a
	}
	a, err := anchorsOf(page)
	if err != nil {
		return err.Error()
	}
	if a[strings.ToLower(anchor)] {
		return ""
	}
	return fmt.Sprintf("no heading of %s has the anchor #%s", filepath.Base(page), anchor)
}

type docLink struct {
	line   int // 1-based
	target string
}

var (
	// inlineLink is [text](target) or ![alt](target), with an optional
	// title; the text may hold one level of brackets (an image in a link).
	inlineLink = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	// refDefinition is "[name]: target" on a line of its own.
	refDefinition = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	// htmlLink is <img src="..."> or <a href="...">.
	htmlLink = regexp.MustCompile(`(?i)<(?:img|a)\b[^>]*?\b(?:src|href)\s*=\s*["']([^"']*)["']`)
	fence    = regexp.MustCompile("^\\s{0,3}(`{3,}|~{3,})")
	// urlScheme starts a link to something other than a path.
	urlScheme = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)
)

// markdownLinks returns the link targets of a Markdown page, outside
// fenced code blocks and code spans.
func markdownLinks(text string) []docLink {
	var out []docLink
	var add func(n int, s string)
	add = func(n int, s string) {
		for _, m := range inlineLink.FindAllStringSubmatch(s, -1) {
			out = append(out, docLink{n, m[2]})
			add(n, m[1]) // an image inside a link's text
		}
	}
	forEachProseLine(text, func(n int, l string) {
		if m := refDefinition.FindStringSubmatch(l); m != nil {
			out = append(out, docLink{n, m[1]})
		}
		add(n, l)
		for _, m := range htmlLink.FindAllStringSubmatch(l, -1) {
			out = append(out, docLink{n, m[1]})
		}
	})
	return out
}

// forEachProseLine calls fn with each line outside fenced code blocks (and
// its 1-based number), code spans blanked out.
func forEachProseLine(text string, fn func(n int, line string)) {
	var open string // the open fence, "" outside one
	for i, l := range strings.Split(text, "\n") {
		l = strings.TrimRight(l, "\r")
		if m := fence.FindStringSubmatch(l); m != nil {
			switch {
			case open == "":
				open = m[1]
				continue
			case m[1][0] == open[0] && len(m[1]) >= len(open) && strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(l), m[1][:1])) == "":
				open = ""
				continue
			}
		}
		if open != "" {
			continue
		}
		fn(i+1, blankCodeSpans(l))
	}
}

// blankCodeSpans replaces the text of each code span (`code`, “co`de“)
// with "code", so that what it shows is not taken for a link.
func blankCodeSpans(l string) string {
	var b strings.Builder
	for i := 0; i < len(l); {
		if l[i] != '`' {
			b.WriteByte(l[i])
			i++
			continue
		}
		n := 0
		for i+n < len(l) && l[i+n] == '`' {
			n++
		}
		tick := strings.Repeat("`", n)
		end := -1
		for j := i + n; j < len(l); {
			k := strings.Index(l[j:], tick)
			if k < 0 {
				break
			}
			k += j
			if k+n < len(l) && l[k+n] == '`' { // a longer run: not the closing one
				for k < len(l) && l[k] == '`' {
					k++
				}
				j = k
				continue
			}
			end = k
			break
		}
		if end < 0 { // no closing run: literal backticks
			b.WriteString(tick)
			i += n
			continue
		}
		b.WriteString("code")
		i = end + n
	}
	return b.String()
}

var (
	atxHeading  = regexp.MustCompile(`^\s{0,3}#{1,6}(?:\s+(.*?))?(?:\s+#+)?\s*$`)
	setextUnder = regexp.MustCompile(`^\s{0,3}(=+|-+)\s*$`)
	htmlID      = regexp.MustCompile(`(?i)\b(?:id|name)\s*=\s*["']([^"']+)["']`)
)

// markdownAnchors returns the anchors of a page's headings, as GitHub
// makes them, and its HTML ids and names, all in lower case.
func markdownAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	addHeading := func(h string) {
		s := slug(h)
		if n := seen[s]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			anchors[s] = true
		}
		seen[s]++
	}
	var open string
	prev := "" // the previous prose line, for setext headings
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimRight(l, "\r")
		if m := fence.FindStringSubmatch(l); m != nil {
			if open == "" {
				open = m[1]
			} else if m[1][0] == open[0] && len(m[1]) >= len(open) {
				open = ""
			}
			prev = ""
			continue
		}
		if open != "" {
			continue
		}
		for _, m := range htmlID.FindAllStringSubmatch(l, -1) {
			anchors[strings.ToLower(m[1])] = true
		}
		switch t := strings.TrimSpace(prev); {
		case atxHeading.MatchString(l):
			addHeading(atxHeading.FindStringSubmatch(l)[1])
			l = ""
		case setextUnder.MatchString(l) && t != "" && !strings.ContainsAny(t[:1], "|#>-*+") && !atxHeading.MatchString(prev):
			addHeading(t)
			l = ""
		}
		prev = l
	}
	return anchors
}

var (
	mdLinkText = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
	emphasisUL = regexp.MustCompile(`(^|[^\p{L}\p{N}_])_+|_+([^\p{L}\p{N}_]|$)`)
)

// slug is GitHub's anchor for a heading's Markdown text: the rendered
// text in lower case, without punctuation but '-' and '_', each space a
// '-'. Code spans keep their text as it is; outside them links become
// their text and HTML tags and emphasis marks go.
func slug(h string) string {
	var text strings.Builder
	parts := strings.Split(h, "`") // odd parts are code spans
	for i, p := range parts {
		if i%2 == 0 || i == len(parts)-1 {
			p = mdLinkText.ReplaceAllString(p, "$1")
			p = htmlTag.ReplaceAllString(p, "")
			p = emphasisUL.ReplaceAllString(p, "$1$2")
		}
		text.WriteString(p)
	}
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text.String())) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
