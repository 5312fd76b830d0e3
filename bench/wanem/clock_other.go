//go:build !linux

package wanem

import (
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// sleepUntil blocks until clockNow() ≥ t. Without clock_nanosleep it uses
// Go's timers, whose granularity (about 1 ms) makes the emulator far less
// precise than on Linux.
func sleepUntil(t monotime.Time) {
	if d := t.Sub(clockNow()); d > 0 {
		time.Sleep(d)
	}
}

// prepareReleaserThread has nothing to tune without Linux timers.
func prepareReleaserThread() {}
