// Package labtest holds what the lab's tests share: skipping without root
// or tools, building the project's commands, and a lab whose link runs in
// the test binary itself.
package labtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/wanem"
)

// LinkEnv, set, makes a test binary run the link emulator instead of
// its tests (see Main).
const LinkEnv = "WANOPT_LABTEST_LINK"

// Main is a TestMain: the test binary doubles as the lab's link emulator,
// which the lab starts again with LinkEnv set.
func Main(m *testing.M) {
	lab.RunLinkHelperIf(LinkEnv)
	os.Exit(m.Run())
}

// NeedLab skips t unless it runs as root with each of tools installed; pkgs
// names the Debian packages that hold them, for the message.
func NeedLab(t testing.TB, pkgs string, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab creates network namespaces and needs root (run 'sudo make test')")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s is not installed (apt-get install %s)", tool, pkgs)
		}
	}
}

// BuildCommands builds the project's commands names (e.g. "wanopt") into
// a temporary folder and returns it.
func BuildCommands(t testing.TB, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, name), "github.com/wanopt/wanopt/cmd/"+name).CombinedOutput()
		if err != nil {
			t.Fatalf("go build %s: %v\n%s", name, err, out)
		}
	}
	return dir
}

// NewLab builds a lab of kind whose link runs in this test binary (see
// Main), closed when the test ends, and starts the link with ab and ba.
func NewLab(t testing.TB, ctx context.Context, kind lab.Kind, ab, ba wanem.Config) *lab.Lab {
	t.Helper()
	t.Setenv(LinkEnv, "1")
	l, err := lab.Build(ctx, lab.Options{Kind: kind, LinkCommand: []string{os.Args[0]}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.StartLink(ctx, ab, ba); err != nil {
		t.Fatal(err)
	}
	return l
}
