// The gathers' deadlines and the reader's waits: why the driver's timer
// is armed for a gathering read only once the reader waits for the
// socket.

package driver

import "github.com/wanopt/wanopt/internal/monotime"

// A gathering read's deadline moves later with every batch that brings
// its stream bytes. Kept on the driver's Go timer, each move would leave
// the runtime a wasted wake-up at the earlier instant (a timer reset to
// later keeps its place in the runtime's heap). While datagrams flow,
// the reader hands the driver a batch at least once per hold and the
// driver checks the gathers after every batch (expireParked), so the
// timer is needed only once the reader has found the socket empty and
// waits. The bind tells the reader that (bind.WaitNotifier): the reader
// sets rxWaiting before it waits and clears it when a read returns, and
// signals rxWait when the driver has said, through rxWantWait, that it
// left a deadline to the coming batches.
//
// Order: the driver stores rxWantWait before it loads rxWaiting, and the
// reader stores rxWaiting before it loads rxWantWait, so at least one
// sees the other's store: either the driver arms the timer, or the
// reader wakes it to do so.

// timerForGathers reports whether the driver must arm its timer for the
// gathering reads' earliest deadline g (0: none armed).
func (d *driverState) timerForGathers(g monotime.Time) bool {
	if !d.waitHook {
		return g != 0
	}
	if want := g != 0; d.t.rxWantWait.Load() != want { // the driver alone stores it
		d.t.rxWantWait.Store(want)
	}
	return g != 0 && d.t.rxWaiting.Load()
}

// readerWaits runs on the reader goroutine each time ReadBatch is about
// to wait for the socket.
func (t *Tunnel) readerWaits() {
	t.rxWaiting.Store(true)
	if t.rxWantWait.Load() {
		signal(t.rxWait)
	}
}
