// Package monotime is the time type of wanopt's protocol and controller code:
// a monotonic instant in nanoseconds. Protocol code takes a Time as an
// argument and never reads the clock; only drivers call Now.
package monotime

import "time"

// Time is a monotonic instant in nanoseconds since an arbitrary epoch. The
// zero Time means "unset".
type Time int64

// base anchors Now to Go's monotonic clock.
var base = time.Now()

// Now reads the monotonic clock. Only drivers (code that owns sockets and
// timers) may call it.
func Now() Time { return Time(time.Since(base)) + 1 }

// Add returns t+d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

// Sub returns t-u.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

// IsZero reports whether t is unset.
func (t Time) IsZero() bool { return t == 0 }

// Before reports whether t is before u.
func (t Time) Before(u Time) bool { return t < u }

// After reports whether t is after u.
func (t Time) After(u Time) bool { return t > u }
