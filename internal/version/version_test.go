package version

import (
	"strings"
	"testing"
)

func TestVersionFields(t *testing.T) {
	for _, c := range []struct {
		name, got string
	}{{"Version", Version()}, {"Revision", Revision()}, {"GoVersion", GoVersion()}} {
		if c.got == "" || strings.ContainsAny(c.got, " \n") {
			t.Errorf("%s() = %q, want one word", c.name, c.got)
		}
	}
	if !strings.HasPrefix(GoVersion(), "go") {
		t.Errorf("GoVersion() = %q, want go1.x", GoVersion())
	}
}
