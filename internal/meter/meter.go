// Package meter turns growing byte counters into recent rates. The owner
// of the counters samples each one at a steady interval (a driver's ticker)
// and readers get the rate over the last interval: what a flow is doing
// now, where bytes over age would give its lifetime average.
package meter

import (
	"sync/atomic"
	"time"
)

// Rate is the recent rate of one byte counter. Sample must be called from
// one goroutine at a time; Bps from any.
type Rate struct {
	last    uint64 // the counter at the previous sample
	rateBps atomic.Uint64
}

// Sample records the counter's value total, interval after the previous
// sample (or after the counter started at zero).
func (r *Rate) Sample(total uint64, interval time.Duration) {
	if interval <= 0 || total < r.last {
		return
	}
	r.rateBps.Store(uint64(float64(total-r.last) * 8 / interval.Seconds()))
	r.last = total
}

// Bps is the rate over the last sampled interval, in bits per second.
func (r *Rate) Bps() uint64 { return r.rateBps.Load() }
