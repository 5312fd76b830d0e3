package exp

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// needLab skips t unless it runs as root with each of tools installed; pkgs
// names the Debian packages that hold them, for the message.
func needLab(t *testing.T, pkgs string, tools ...string) {
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

// buildCommands builds the project's commands names (e.g. "wanopt") into
// a temporary folder and returns it.
func buildCommands(t *testing.T, names ...string) string {
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
