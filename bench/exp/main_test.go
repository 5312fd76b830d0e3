package exp

import (
	"context"
	"os"
	"testing"

	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/wanem"
)

// The test binary doubles as the lab's link helper: the lab starts it again
// with this variable set, and TestMain runs the emulator instead of tests.
const linkHelperEnv = "WANOPT_EXP_TEST_LINK_HELPER"

func TestMain(m *testing.M) {
	lab.RunLinkHelperIf(linkHelperEnv)
	os.Exit(m.Run())
}

// newLab builds a lab of kind whose link runs in this test binary, closed
// when the test ends, and starts the link with ab and ba.
func newLab(t *testing.T, ctx context.Context, kind lab.Kind, ab, ba wanem.Config) *lab.Lab {
	t.Helper()
	t.Setenv(linkHelperEnv, "1")
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
