//go:build !linux

package driver

import "github.com/wanopt/wanopt/internal/monotime"

// havePreciseSleep is false: the driver uses only its Go timer.
const havePreciseSleep = false

func sleepUntil(monotime.Time) {}
