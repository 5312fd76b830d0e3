package dist

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
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
}

const (
	unitDir = "usr/lib/systemd/system"
	docDir  = "usr/share/doc/wanopt"
	// guide is the page the units' Documentation= names.
	guide  = "deploy.md"
	binary = "/usr/bin/wanopt"
)

// TestInstall runs 'make install' into a temporary DESTDIR and checks the
// tree, the units (systemd-analyze verify), the sysusers.d file
// (systemd-sysusers --dry-run) and the example configurations
// (wanopt run --check with fresh keys), then 'make uninstall'.
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
	makeArgs := []string{"DESTDIR=" + dest, "PREFIX=/usr", "GO=" + goCommand(t), "BIN=" + t.TempDir()}
	run(t, repo, "make", append([]string{"install"}, makeArgs...)...)

	t.Run("tree", func(t *testing.T) { checkTree(t, dest) })
	t.Run("units", func(t *testing.T) { checkUnits(t, dest) })
	t.Run("verify", func(t *testing.T) { verifyUnits(t, dest) })
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
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "BINDIR", "SYSTEMDUNITDIR", "SYSUSERSDIR", "DOCDIR":
		default:
			env = append(env, kv)
		}
	}
	return env
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
