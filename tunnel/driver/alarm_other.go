//go:build !linux

package driver

import "time"

// alarm has no timerfd here: newAlarm returns nil, and the driver waits
// for every deadline with its Go timer.
type alarm struct{ C chan struct{} }

func newAlarm() *alarm                   { return nil }
func (*alarm) set(time.Duration) bool    { return false }
func (*alarm) stop() bool                { return false }
func (*alarm) wait(done chan<- struct{}) { close(done) }
func (*alarm) close()                    {}
