package exp

import (
	"strings"
	"testing"

	"github.com/wanopt/wanopt/bench/harness/labtest"
)

func TestMain(m *testing.M) { labtest.Main(m) }

// wantInTable fails t for each of wants that the Markdown md lacks.
func wantInTable(t *testing.T, md string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
}
