//go:build !linux

package driver

import "github.com/wanopt/wanopt/internal/monotime"

// havePreciseSleep is false: the driver uses only its Go timer.
const havePreciseSleep = false

// sleeper is never used where havePreciseSleep is false.
type sleeper struct{}

func newSleeper() *sleeper           { return &sleeper{} }
func (*sleeper) until(monotime.Time) {}
func (*sleeper) close()              {}
