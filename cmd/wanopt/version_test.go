package main

import (
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	code, out, errs := run("version")
	if code != 0 || errs != "" {
		t.Fatalf("version: exit %d, stderr %q", code, errs)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "wanopt ") || !strings.HasPrefix(lines[1], "commit ") ||
		!strings.HasPrefix(lines[2], runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH) {
		t.Errorf("version printed %q; want 'wanopt VERSION', 'commit REV' and the Go release", out)
	}
	if code, out2, _ := run("--version"); code != 0 || out2 != out {
		t.Errorf("--version: exit %d, %q; want what 'wanopt version' prints", code, out2)
	}
}
