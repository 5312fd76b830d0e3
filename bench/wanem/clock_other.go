//go:build !linux

package wanem

import (
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// sleepUntil blocks until clockNow() ≥ t with Go's timers, far less
// precise than clock_nanosleep on Linux.
func sleepUntil(t monotime.Time) {
	if d := t.Sub(clockNow()); d > 0 {
		time.Sleep(d)
	}
}

// prepareReleaserThread has nothing to tune without Linux timers.
func prepareReleaserThread() {}
