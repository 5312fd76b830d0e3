package dist

import (
	"bufio"
	"bytes"
	byteorder "encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wanopt/wanopt/edge"
	"github.com/wanopt/wanopt/egress"
	"golang.org/x/sys/unix"
)

// installed is every file 'make install PREFIX=/usr' puts under DESTDIR,
// with its mode, beside the guides of docs/guide. Anything else there,
// /etc included, is a failure.
var installed = map[string]fs.FileMode{
	"usr/bin/wanopt":                                                     0o755,
	"usr/lib/systemd/system/wanopt@.service":                             0o644,
	"usr/lib/systemd/system/wanopt-tun@.service":                         0o644,
	"usr/lib/systemd/system/system-wanopt.slice":                         0o644,
	"usr/lib/sysusers.d/wanopt.conf":                                     0o644,
	"usr/share/doc/wanopt/wo0.netdev":                                    0o644,
	"usr/share/doc/wanopt/wo0.network":                                   0o644,
	"usr/share/doc/wanopt/examples/near.conf":                            0o644,
	"usr/share/doc/wanopt/examples/far.conf":                             0o644,
	"usr/share/doc/wanopt/examples/wanopt@near.service.d/tun.conf":       0o644,
	"usr/share/doc/wanopt/examples/wanopt-tun@wo0.service.d/routes.conf": 0o644,
	"usr/share/man/man8/wanopt.8":                                        0o644,
	"usr/share/bash-completion/completions/wanopt":                       0o644,
	"usr/share/zsh/site-functions/_wanopt":                               0o644,
}

const (
	unitDir = "usr/lib/systemd/system"
	docDir  = "usr/share/doc/wanopt"
	// guide is the page the units' Documentation= names.
	guide  = "deploy.md"
	binary = "/usr/bin/wanopt"
)

// TestInstall runs 'make build' and 'make install' into a temporary
// DESTDIR and checks the tree, the units (their settings, systemd-analyze
// verify and security), the sysusers.d file (systemd-sysusers --dry-run)
// and the example configurations (wanopt run --check with fresh keys, as
// the unit runs it), then 'make uninstall'. 'make install' without a
// build first must refuse and create nothing.
func TestInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("skipping: 'make' is not installed; the install tree is built by 'make install' (apt-get install make)")
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(repo, "Makefile")); err != nil {
		t.Fatalf("repository root: %v", err)
	}
	dest := t.TempDir()
	// BIN keeps the build out of the work tree's bin/, which the lab runs.
	bin := filepath.Join(t.TempDir(), "bin")
	makeArgs := []string{"DESTDIR=" + dest, "PREFIX=/usr", "GO=" + goCommand(t), "BIN=" + bin}

	// 'sudo make install' must not compile as root: without a build it
	// says so, and leaves neither bin/ nor anything installed.
	out, err := makeCommand(repo, append([]string{"install"}, makeArgs...)...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "run 'make build' first as yourself") {
		t.Errorf("make install before make build: %v; want it refused, saying to run 'make build' first:\n%s", err, out)
	}
	if _, err := os.Stat(bin); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("make install before make build made %s (stat: %v)", bin, err)
	}
	if entries, _ := os.ReadDir(dest); len(entries) > 0 {
		t.Errorf("make install before make build installed %d entries in DESTDIR", len(entries))
	}

	run(t, repo, "make", append([]string{"build"}, makeArgs...)...)
	run(t, repo, "make", append([]string{"install"}, makeArgs...)...)

	t.Run("tree", func(t *testing.T) { checkTree(t, dest) })
	t.Run("units", func(t *testing.T) { checkUnits(t, dest) })
	t.Run("verify", func(t *testing.T) { verifyUnits(t, dest) })
	t.Run("security", func(t *testing.T) { checkSecurity(t, dest) })
	t.Run("man and completions", func(t *testing.T) { checkManAndCompletions(t, dest) })
	t.Run("sysusers", func(t *testing.T) { checkSysusers(t, dest) })
	t.Run("examples", func(t *testing.T) { checkExamples(t, dest) })

	run(t, repo, "make", append([]string{"uninstall"}, makeArgs...)...)
	var left []string
	filepath.WalkDir(dest, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, strings.TrimPrefix(path, dest+"/"))
		}
		return err
	})
	if len(left) > 0 {
		t.Errorf("make uninstall left %q", left)
	}
}

// goCommand is the go command for make's GO: the one on PATH, else this
// toolchain's, so that the test runs however 'go test' was found.
func goCommand(t *testing.T) string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("skipping: no go command on PATH or at %s for 'make install' to build with", p)
	}
	return p
}

// checkTree checks that the expected files, and only they, are installed
// with their modes: no /etc/wanopt, which is the administrator's.
func checkTree(t *testing.T, dest string) {
	want := map[string]fs.FileMode{}
	for rel, mode := range installed {
		want[rel] = mode
	}
	guides, err := filepath.Glob("../docs/guide/*")
	if err != nil || len(guides) == 0 {
		t.Fatalf("the guides in docs/guide: %v (found %d)", err, len(guides))
	}
	for _, g := range guides {
		want[docDir+"/"+filepath.Base(g)] = 0o644
	}
	if _, ok := want[docDir+"/"+guide]; !ok {
		t.Errorf("docs/guide has no %s, which the units name", guide)
	}
	seen := map[string]bool{}
	err = filepath.WalkDir(dest, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(path, dest+"/")
		seen[rel] = true
		mode, ok := want[rel]
		if !ok {
			t.Errorf("unexpected file installed: /%s", rel)
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			t.Errorf("/%s: %v, want a regular file", rel, info.Mode())
		} else if got := info.Mode().Perm(); got != mode {
			t.Errorf("/%s: mode %04o, want %04o", rel, got, mode)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk the install tree: %v", err)
	}
	for rel := range want {
		if !seen[rel] {
			t.Errorf("not installed: /%s", rel)
		}
	}
	if _, err := os.Stat(filepath.Join(dest, "etc")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("make install created /etc (stat: %v); /etc/wanopt is left to the administrator", err)
	}
}

// checkUnits checks what sed filled in: the units run the installed binary
// and point at the installed guide.
func checkUnits(t *testing.T, dest string) {
	for _, name := range []string{"wanopt@.service", "wanopt-tun@.service", "system-wanopt.slice"} {
		text := readFile(t, filepath.Join(dest, unitDir, name))
		if strings.Contains(text, "@BINDIR@") || strings.Contains(text, "@DOCDIR@") {
			t.Errorf("%s: a placeholder was not substituted:\n%s", name, text)
		}
		doc := unitValues(text, "Documentation")
		if len(doc) != 1 || doc[0] != "file:/"+docDir+"/"+guide {
			t.Errorf("%s: Documentation=%q, want file:/%s/%s", name, doc, docDir, guide)
		}
	}
	// Instances of wanopt@ run in system-wanopt.slice: its weight is the
	// one that counts against the other services.
	if w := unitValues(readFile(t, filepath.Join(dest, unitDir, "system-wanopt.slice")), "CPUWeight"); len(w) != 1 || w[0] != "1000" {
		t.Errorf("system-wanopt.slice: CPUWeight=%q, want 1000", w)
	}
	text := readFile(t, filepath.Join(dest, unitDir, "wanopt@.service"))
	if s := unitValues(text, "Slice"); len(s) != 0 {
		t.Errorf("wanopt@.service: Slice=%q; its instances belong in system-wanopt.slice, which carries their CPU weight", s)
	}
	if r := unitValues(text, "ExecReload"); len(r) != 1 || r[0] != binary+" reload --control /run/wanopt/%i.sock" {
		t.Errorf("wanopt@.service: ExecReload=%q, want %s reload --control /run/wanopt/%%i.sock", r, binary)
	}
	for _, key := range []string{"ExecStartPre", "ExecStart"} {
		vals := unitValues(text, key)
		if len(vals) != 1 {
			t.Errorf("wanopt@.service: %d %s= lines, want 1", len(vals), key)
			continue
		}
		if argv := strings.Fields(vals[0]); argv[0] != binary || argv[1] != "run" {
			t.Errorf("wanopt@.service: %s=%s, want %s run …", key, vals[0], binary)
		}
	}
	if exec := unitValues(text, "ExecStart"); len(exec) == 1 && !strings.Contains(exec[0], "--control /run/wanopt/%i.sock") {
		t.Errorf("wanopt@.service: ExecStart=%s lacks --control /run/wanopt/%%i.sock", exec[0])
	}
	// The key stays root's: systemd passes a copy, and both commands read
	// that copy whatever the config's key line says.
	if c := unitValues(text, "LoadCredential"); len(c) != 1 || c[0] != "key:/etc/wanopt/%i.key" {
		t.Errorf("wanopt@.service: LoadCredential=%q, want key:/etc/wanopt/%%i.key", c)
	}
	for _, key := range []string{"ExecStartPre", "ExecStart"} {
		if vals := unitValues(text, key); len(vals) == 1 && !strings.Contains(vals[0], " "+credentialKey+" ") {
			t.Errorf("wanopt@.service: %s=%s lacks %s", key, vals[0], credentialKey)
		}
	}
	want := map[string]string{"Type": "notify", "NotifyAccess": "main", "UMask": "0077", "User": "wanopt"}
	for key, v := range want {
		if got := unitValues(text, key); len(got) != 1 || got[0] != v {
			t.Errorf("wanopt@.service: %s=%q, want %s", key, got, v)
		}
	}
	if f := unitValues(text, "SystemCallFilter"); len(f) == 0 || f[0] != "@system-service" {
		t.Errorf("wanopt@.service: SystemCallFilter=%q, want @system-service first", f)
	}
	// A near edge reports ready at the latest readyWait after it starts,
	// tunnel or not: the start timeout must leave it that long.
	if v := unitValues(text, "TimeoutStartSec"); len(v) != 1 {
		t.Errorf("wanopt@.service: TimeoutStartSec=%q; want one, above the edge's %v wait for a tunnel", v, readyWait)
	} else if d, err := time.ParseDuration(strings.ReplaceAll(strings.ReplaceAll(v[0], "min", "m"), " ", "")); err != nil || d < readyWait+30*time.Second {
		t.Errorf("wanopt@.service: TimeoutStartSec=%s (%v); want at least %v, the edge's wait for a tunnel and 30 s", v[0], err, readyWait+30*time.Second)
	}
	checkMemory(t, text)

	tun := readFile(t, filepath.Join(dest, unitDir, "wanopt-tun@.service"))
	if c := unitValues(tun, "CapabilityBoundingSet"); len(c) != 1 || c[0] != "CAP_NET_ADMIN" {
		t.Errorf("wanopt-tun@.service: CapabilityBoundingSet=%q, want CAP_NET_ADMIN alone", c)
	}
}

// readyWait is cmd/wanopt's readyWait (notify.go): how long a near edge
// holds its start job waiting for a tunnel.
const readyWait = 30 * time.Second

// credentialKey is the --key of the unit's commands: the copy of the key
// LoadCredential= makes.
const credentialKey = "--key ${CREDENTIALS_DIRECTORY}/key"

// checkMemory checks wanopt@.service's memory limits against the default
// budget: the Go runtime's own limit (budget and part of the overhead)
// under MemoryHigh, so that the collector works before the kernel
// throttles, and MemoryHigh under MemoryMax.
func checkMemory(t *testing.T, text string) {
	limit := func(key string) int64 {
		v := unitValues(text, key)
		if len(v) != 1 {
			t.Errorf("wanopt@.service: %s=%q, want one", key, v)
			return 0
		}
		n, err := parseBytes(v[0])
		if err != nil {
			t.Errorf("wanopt@.service: %s=%s: %v", key, v[0], err)
		}
		return n
	}
	high, max := limit("MemoryHigh"), limit("MemoryMax")
	goLimit := edge.PlanMemory(edge.DefaultMemoryMiB, egress.DefaultMaxFlows).RuntimeLimitBytes
	process := int64(edge.DefaultMemoryMiB+edge.FixedOverheadMiB) << 20
	if high <= goLimit || high < process || max <= high {
		t.Errorf("wanopt@.service: MemoryHigh=%d MiB, MemoryMax=%d MiB; want MemoryHigh above the Go runtime's limit (%d MiB) and the default budget with the process's overhead (%d MiB), and MemoryMax above MemoryHigh",
			high>>20, max>>20, goLimit>>20, process>>20)
	}
}

// parseBytes reads a systemd size: a number with K, M, G or T (powers of
// 1024) or none (bytes).
func parseBytes(s string) (int64, error) {
	shift := 0
	switch {
	case strings.HasSuffix(s, "K"):
		shift = 10
	case strings.HasSuffix(s, "M"):
		shift = 20
	case strings.HasSuffix(s, "G"):
		shift = 30
	case strings.HasSuffix(s, "T"):
		shift = 40
	}
	if shift > 0 {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not a size: %w", err)
	}
	return n << shift, nil
}

// maxExposure is the highest 'systemd-analyze security' exposure each
// unit may have (0 is the best, 10 the worst).
var maxExposure = map[string]float64{
	"wanopt@near.service":    2.5,
	"wanopt-tun@wo0.service": 4,
}

var exposureRE = regexp.MustCompile(`Overall exposure level for (\S+): ([0-9]+(?:\.[0-9]+)?)`)

// checkSecurity runs 'systemd-analyze security --offline=true' on the
// instances with their drop-ins and holds each to its maxExposure.
func checkSecurity(t *testing.T, dest string) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("skipping: systemd-analyze is not installed, so the units' exposure is not measured (apt-get install systemd)")
	}
	dir := t.TempDir()
	copyUnits(t, dest, dir)
	for _, name := range slices.Sorted(maps.Keys(maxExposure)) {
		out, err := exec.Command(analyze, "security", "--offline=true", "--no-pager", filepath.Join(dir, name)).CombinedOutput()
		if strings.Contains(string(out), "unrecognized option") {
			t.Skipf("skipping: this systemd-analyze has no 'security --offline' (systemd 250 or later has it): %s", bytes.TrimSpace(out))
		}
		m := exposureRE.FindSubmatch(out)
		if err != nil || m == nil {
			t.Errorf("systemd-analyze security --offline=true %s: %v; no overall exposure in:\n%s", name, err, out)
			continue
		}
		got, _ := strconv.ParseFloat(string(m[2]), 64)
		if got > maxExposure[name] {
			t.Errorf("%s: exposure %.1f, want at most %.1f; what it counts against the unit:\n%s", name, got, maxExposure[name], unsafeLines(out))
		} else {
			t.Logf("%s: exposure %.1f (at most %.1f)", name, got, maxExposure[name])
		}
	}
}

// unsafeLines are the lines of systemd-analyze security's table that
// count against the unit.
func unsafeLines(out []byte) string {
	var b strings.Builder
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "✗") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// checkManAndCompletions checks what 'make build' generated: a man page
// that man renders, and completion scripts the shells parse.
func checkManAndCompletions(t *testing.T, dest string) {
	page := filepath.Join(dest, "usr/share/man/man8/wanopt.8")
	if text := readFile(t, page); !strings.HasPrefix(text, ".TH WANOPT 8") {
		t.Errorf("wanopt.8 does not start with .TH WANOPT 8: %.80q", text)
	}
	if man, err := exec.LookPath("man"); err == nil {
		cmd := exec.Command(man, "-l", page)
		cmd.Env = append(os.Environ(), "MANWIDTH=80", "MANPAGER=cat", "PAGER=cat")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "wanopt run") {
			t.Errorf("man -l wanopt.8: %v; want a page that names 'wanopt run':\n%.500s", err, out)
		}
	}
	for _, c := range []struct{ shell, file, first string }{
		{"bash", "usr/share/bash-completion/completions/wanopt", ""},
		{"zsh", "usr/share/zsh/site-functions/_wanopt", "#compdef wanopt"},
	} {
		path := filepath.Join(dest, c.file)
		text := readFile(t, path)
		if c.first != "" && !strings.HasPrefix(text, c.first+"\n") {
			t.Errorf("%s: first line %.40q, want %s (zsh autoloads a completion by it)", c.file, text, c.first)
		}
		sh, err := exec.LookPath(c.shell)
		if err != nil {
			t.Logf("%s is not installed: %s is not parsed", c.shell, c.file)
			continue
		}
		if out, err := exec.Command(sh, "-n", path).CombinedOutput(); err != nil {
			t.Errorf("%s -n %s: %v\n%s", c.shell, c.file, err, out)
		}
	}
}

// verifyUnits runs systemd-analyze verify on the installed units, the
// templates and instances with the example drop-ins. verify insists that
// ExecStart's binary exists, and --root= would also need every unit the
// instances depend on (sysinit.target, …) inside the root, so the units are
// copied to a directory of their own with the binary's path pointed into
// DESTDIR; the host's units resolve the dependencies. verify exits 0 on
// unknown keys and bad values, so any output at all fails.
func verifyUnits(t *testing.T, dest string) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("skipping: systemd-analyze is not installed, so the units are not verified (apt-get install systemd)")
	}
	dir := t.TempDir()
	copyUnits(t, dest, dir)
	names := []string{"wanopt@.service", "wanopt-tun@.service", "system-wanopt.slice", "wanopt@near.service", "wanopt@far.service", "wanopt-tun@wo0.service"}
	var args []string
	for _, n := range names {
		args = append(args, filepath.Join(dir, n))
	}
	out, err := exec.Command(analyze, append([]string{"verify"}, args...)...).CombinedOutput()
	switch {
	case err != nil:
		t.Errorf("systemd-analyze verify %s: %v\n%s", strings.Join(names, " "), err, out)
	case len(bytes.TrimSpace(out)) > 0:
		t.Errorf("systemd-analyze verify %s exited 0 but complained:\n%s", strings.Join(names, " "), out)
	default:
		t.Logf("systemd-analyze verify %s: no complaint", strings.Join(names, " "))
	}

	// The control: a bad key in a drop-in must be reported, which shows
	// that verify reads the drop-ins and that its warnings reach us.
	bad := t.TempDir()
	copyUnits(t, dest, bad)
	dropIn := filepath.Join(bad, "wanopt@near.service.d", "tun.conf")
	if err := os.WriteFile(dropIn, []byte(readFile(t, dropIn)+"NoSuchKey=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ = exec.Command(analyze, "verify", filepath.Join(bad, "wanopt@near.service")).CombinedOutput()
	if !strings.Contains(string(out), "NoSuchKey") {
		t.Errorf("systemd-analyze verify did not report a bad key in a drop-in, so its silence proves nothing; it said:\n%s", out)
	}
}

// copyUnits puts the installed units and the example drop-ins in dir, with
// the binary's path pointed at the one installed in dest.
func copyUnits(t *testing.T, dest, dir string) {
	bin := filepath.Join(dest, binary)
	for _, name := range []string{"wanopt@.service", "wanopt-tun@.service", "system-wanopt.slice"} {
		text := strings.ReplaceAll(readFile(t, filepath.Join(dest, unitDir, name)), binary+" ", bin+" ")
		writeFile(t, filepath.Join(dir, name), text)
	}
	for _, d := range []string{"wanopt@near.service.d/tun.conf", "wanopt-tun@wo0.service.d/routes.conf"} {
		writeFile(t, filepath.Join(dir, d), readFile(t, filepath.Join(dest, docDir, "examples", d)))
	}
}

// checkSysusers has systemd-sysusers read the file against an empty root
// and say what it would create.
func checkSysusers(t *testing.T, dest string) {
	sysusers, err := exec.LookPath("systemd-sysusers")
	if err != nil {
		t.Skip("skipping: systemd-sysusers is not installed, so sysusers.d/wanopt.conf is not checked")
	}
	out, err := exec.Command(sysusers, "--root="+t.TempDir(), "--dry-run", filepath.Join(dest, "usr/lib/sysusers.d/wanopt.conf")).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-sysusers --dry-run: %v\n%s", err, out)
	}
	for _, want := range []string{"Creating group 'wanopt'", "Creating user 'wanopt'"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("systemd-sysusers --dry-run does not say %q:\n%s", want, out)
		}
	}
}

// checkExamples fills the example configurations in with fresh keys and
// validates them with the installed binary. --check reads the key but
// opens no device, so the near edge's passes without root or wo0.
func checkExamples(t *testing.T, dest string) {
	bin := filepath.Join(dest, binary)
	dir := t.TempDir()
	pub := map[string]string{}
	for _, role := range []string{"near", "far"} {
		key := filepath.Join(dir, role+".key")
		out, err := exec.Command(bin, "keygen", "--out", key).CombinedOutput()
		if err != nil {
			t.Fatalf("wanopt keygen --out %s: %v\n%s", key, err, out)
		}
		p, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "public key: ")
		if !ok {
			t.Fatalf("wanopt keygen: no public key in %q", out)
		}
		pub[role] = p
	}
	peer := map[string]string{"near": "far", "far": "near"}
	for _, role := range []string{"near", "far"} {
		text := readFile(t, filepath.Join(dest, docDir, "examples", role+".conf"))
		placeholder := strings.ToUpper(peer[role]) + "_PUBLIC_KEY"
		for _, s := range []string{"/etc/wanopt/" + role + ".key", placeholder} {
			if strings.Count(text, s) < 1 {
				t.Fatalf("%s.conf: no %q to fill in", role, s)
			}
		}
		text = strings.ReplaceAll(text, "/etc/wanopt/"+role+".key", filepath.Join(dir, role+".key"))
		text = strings.ReplaceAll(text, placeholder, pub[peer[role]])
		conf := filepath.Join(dir, role+".conf")
		writeFile(t, conf, text)
		out, err := exec.Command(bin, "run", "--config", conf, "--check").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "configuration OK") {
			t.Errorf("wanopt run --config %s.conf --check: %v\n%s", role, err, out)
			continue
		}
		t.Logf("%s.conf: %s", role, strings.TrimSpace(string(out)))
	}

	// As the unit runs it: the config's key line names a root-owned file
	// the service cannot read (absent here), and --key the credential.
	// systemd writes a credential mode 0400 and gives the service user
	// read access with an ACL entry, whose mask stat shows as group read
	// (0440); only where the file system has no ACLs (ramfs) does it
	// chown the file to the user instead. run must take both.
	unit := readFile(t, filepath.Join(dest, unitDir, "wanopt@.service"))
	pre := unitValues(unit, "ExecStartPre")
	if len(pre) != 1 {
		t.Fatalf("wanopt@.service: ExecStartPre=%q, want one", pre)
	}
	for _, cred := range []struct {
		name string
		acl  bool
	}{{"credential owned by the user (ramfs)", false}, {"credential read through an ACL (tmpfs)", true}} {
		for _, role := range []string{"near", "far"} {
			creds := t.TempDir()
			key, err := os.ReadFile(filepath.Join(dir, role+".key"))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(creds, "key")
			if err := os.WriteFile(path, key, 0o400); err != nil {
				t.Fatal(err)
			}
			if cred.acl {
				if err := grantRead(path, 65534); err != nil {
					t.Logf("%s: not tried, the temporary directory takes no ACL: %v", cred.name, err)
					continue
				}
			}
			text := readFile(t, filepath.Join(dest, docDir, "examples", role+".conf"))
			text = strings.ReplaceAll(text, strings.ToUpper(peer[role])+"_PUBLIC_KEY", pub[peer[role]])
			conf := filepath.Join(dir, role+"-unit.conf")
			writeFile(t, conf, text)
			line := strings.NewReplacer(binary+" ", bin+" ", "/etc/wanopt/%i.conf", conf, "${CREDENTIALS_DIRECTORY}", creds).Replace(pre[0])
			argv := strings.Fields(line)
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), "CREDENTIALS_DIRECTORY="+creds)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "configuration OK") {
				fi, _ := os.Stat(path)
				t.Errorf("%s.conf as wanopt@%s.service checks it, with a %s, mode %04o (%s): %v\n%s", role, role, cred.name, fi.Mode().Perm(), line, err, out)
			}
		}
	}

	// The pieces that name the near edge's TUN device must agree.
	near := readFile(t, filepath.Join(dest, docDir, "examples", "near.conf"))
	tun := configValue(near, "tun")
	checks := map[string]string{
		"examples/wanopt@near.service.d/tun.conf":       "Requires=wanopt-tun@" + tun + ".service",
		"examples/wanopt-tun@wo0.service.d/routes.conf": "dev " + tun,
		"wo0.netdev":  "Name=" + tun,
		"wo0.network": "Name=" + tun,
	}
	for file, want := range checks {
		if !strings.Contains(readFile(t, filepath.Join(dest, docDir, file)), want) {
			t.Errorf("%s does not say %q (near.conf has tun = %s)", file, want, tun)
		}
	}
}

// unitValues returns the values of key in a unit file, continuation lines
// joined.
func unitValues(text, key string) []string {
	var vals []string
	text = strings.ReplaceAll(text, "\\\n", " ")
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == key {
			vals = append(vals, strings.TrimSpace(v))
		}
	}
	return vals
}

// configValue returns the value of name in a wanopt config file.
func configValue(text, name string) string {
	for _, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "#")
		if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// makeEnv is this process's environment less what would steer make away
// from the command line's settings: an outer make's flags (make test runs
// this test) and the install directories, which the Makefile takes from the
// environment when set there.
func makeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "BINDIR", "SYSTEMDUNITDIR", "SYSUSERSDIR", "DOCDIR", "MANDIR", "BASHCOMPDIR", "ZSHCOMPDIR":
		default:
			env = append(env, kv)
		}
	}
	return env
}

// makeCommand is make with args, run in dir with makeEnv.
func makeCommand(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("make", args...)
	cmd.Dir = dir
	cmd.Env = makeEnv()
	return cmd
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = makeEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// grantRead gives uid read access to path with a POSIX ACL entry, as
// systemd does for a credential: the entries user::r, user:UID:r, group::-,
// mask::r, other::- in the kernel's xattr format.
func grantRead(path string, uid uint32) error {
	const (
		userObj, user, groupObj, mask, other = 0x01, 0x02, 0x04, 0x10, 0x20
		read                                 = 4
		noID                                 = 0xffffffff
	)
	b := byteorder.LittleEndian.AppendUint32(nil, 2) // the format's version
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{userObj, read, noID}, {user, read, uid}, {groupObj, 0, noID}, {mask, read, noID}, {other, 0, noID}} {
		b = byteorder.LittleEndian.AppendUint16(b, e.tag)
		b = byteorder.LittleEndian.AppendUint16(b, e.perm)
		b = byteorder.LittleEndian.AppendUint32(b, e.id)
	}
	return unix.Setxattr(path, "system.posix_acl_access", b, 0)
}
