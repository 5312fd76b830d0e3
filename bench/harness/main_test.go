package harness

import (
	"testing"

	"github.com/wanopt/wanopt/bench/harness/labtest"
)

func TestMain(m *testing.M) { labtest.Main(m) }
