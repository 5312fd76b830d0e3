package driver

import (
	"testing"

	"github.com/wanopt/wanopt/internal/monotime"
)

// TestTimerForGathers: with a socket that tells the reader's waits, the
// driver leaves a gather's deadline to the coming batches while the
// reader reads, and arms its timer once the reader waits: told either by
// the flag it finds set or by the reader's signal, whichever of the two
// stores came first. Without that socket it always arms.
func TestTimerForGathers(t *testing.T) {
	g := monotime.Time(5_000_000)
	woken := func(tn *Tunnel) bool {
		select {
		case <-tn.rxWait:
			return true
		default:
			return false
		}
	}

	tn := &Tunnel{rxWait: make(chan struct{}, 1)}
	d := &tn.d
	d.t = tn
	if d.timerForGathers(0) || !d.timerForGathers(g) {
		t.Fatal("without the socket's hook: want the timer for a gather, and none without one")
	}

	d.waitHook = true
	tn.rxWaiting.Store(false) // the reader holds or reads: a batch is coming
	if d.timerForGathers(g) {
		t.Fatal("reader reading: the timer was armed for the gather")
	}
	if !tn.rxWantWait.Load() {
		t.Fatal("reader reading: the driver did not ask to be told when it waits")
	}
	tn.readerWaits() // the socket is empty: the reader waits
	if !woken(tn) {
		t.Fatal("the reader waited without waking the driver, which left a gather to it")
	}
	if !d.timerForGathers(g) {
		t.Fatal("reader waiting: the timer was not armed for the gather")
	}

	// The reader's wait comes first: the driver finds the flag.
	tn.rxWaiting.Store(false)
	d.timerForGathers(0) // no gather: nothing asked
	if tn.rxWantWait.Load() {
		t.Fatal("no gather armed, yet the driver still asks to be told of waits")
	}
	tn.readerWaits()
	if woken(tn) {
		t.Fatal("the reader woke the driver, which had nothing left to it")
	}
	if !d.timerForGathers(g) {
		t.Fatal("the reader waits already: the timer was not armed for a new gather")
	}
}
