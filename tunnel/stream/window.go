package stream

import (
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// autoTuneRTTs is how many smoothed RTTs the application may take to
// consume one full window before the window is deemed too small: a window
// drained faster than that is the bottleneck, so it doubles. At a steady
// unconstrained rate R the window settles between 2 and 4 times R x RTT.
const autoTuneRTTs = 2

// recvWindow is the receive-side credit of a stream or of the connection,
// with auto-tuning. Offsets are cumulative bytes (a stream's offsets, or the
// sum over streams for the connection).
type recvWindow struct {
	windowBytes    uint64 // current target: credit = consumed + windowBytes
	maxWindowBytes uint64 // auto-tuning bound
	limit          uint64 // credit advertised to the peer (highest offset it may send)
	consumed       uint64 // bytes read by the application (or discarded)

	epochStart         monotime.Time // start of the current auto-tuning epoch (0: none yet)
	epochStartConsumed uint64
}

func newRecvWindow(initial, maxWindow uint64) recvWindow {
	return recvWindow{windowBytes: initial, maxWindowBytes: maxWindow, limit: initial}
}

// wantsUpdate reports whether enough of the window was consumed since the
// last update (a quarter of it) to be worth a MAX_DATA / MAX_STREAM_DATA.
func (w *recvWindow) wantsUpdate() bool {
	return w.consumed+w.windowBytes >= w.limit+w.windowBytes/4
}

// autoTune doubles the window (up to its maximum) if the application
// consumed more than half of it in less than autoTuneRTTs x rtt x the
// fraction consumed, and starts a new epoch once half a window was
// consumed. It returns whether the window grew. A zero rtt (no sample yet)
// never grows the window.
func (w *recvWindow) autoTune(now monotime.Time, rtt time.Duration) bool {
	inEpoch := w.consumed - w.epochStartConsumed
	if inEpoch <= w.windowBytes/2 {
		return false
	}
	grew := false
	if !w.epochStart.IsZero() && rtt > 0 && w.windowBytes < w.maxWindowBytes {
		fraction := float64(inEpoch) / float64(w.windowBytes)
		if now.Sub(w.epochStart) < time.Duration(autoTuneRTTs*fraction*float64(rtt)) {
			w.windowBytes = min(2*w.windowBytes, w.maxWindowBytes)
			grew = true
		}
	}
	w.epochStart, w.epochStartConsumed = now, w.consumed
	return grew
}

// ensureWindow raises the window to at least n bytes (bounded by the
// maximum), as a connection window must stay above its streams' windows.
func (w *recvWindow) ensureWindow(n uint64) {
	if n > w.windowBytes {
		w.windowBytes = min(n, w.maxWindowBytes)
	}
}
