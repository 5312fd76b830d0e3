package exp

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/wanopt/wanopt/bench/lab"
)

// The test binary doubles as the lab's link helper: the lab starts it again
// with this variable set, and TestMain runs the emulator instead of tests.
const linkHelperEnv = "WANOPT_EXP_TEST_LINK_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(linkHelperEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := lab.RunLink(ctx, os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString("link helper: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
