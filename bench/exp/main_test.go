package exp

import (
	"os"
	"testing"

	"github.com/wanopt/wanopt/bench/lab"
)

// The test binary doubles as the lab's link helper: the lab starts it again
// with this variable set, and TestMain runs the emulator instead of tests.
const linkHelperEnv = "WANOPT_EXP_TEST_LINK_HELPER"

func TestMain(m *testing.M) {
	lab.RunLinkHelperIf(linkHelperEnv)
	os.Exit(m.Run())
}
