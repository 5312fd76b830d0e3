package tunnel

import (
	"time"

	"github.com/wanopt/wanopt/cc"
	"github.com/wanopt/wanopt/internal/monotime"
)

// Sizing a new stream's receive window.
//
// A stream opened on a warm connection should start at the path's rate,
// not at the initial window while auto-tuning doubles it once per round
// trip. So its receiving side grants at once, with STREAM_OPEN or
// OPEN_RESULT,
//
//	clamp(openWindowBDPs x bw x srtt, InitialStreamWindow, MaxStreamWindow)
//
// where bw is the rate at which the peer has delivered stream data to
// this end (recvRate). The credit comes from the memory budget, at most
// half of what is free per stream, so a burst of opens never exceeds it;
// the connection window is raised to 1.5 times the stream's.
//
// The receive rate, not the local controller's estimate, because a
// receive window bounds what the peer sends: the local controller
// measures the other direction, wrong on an asymmetric path and
// app-limited on a one-way transfer. A connection that has received no
// stream data keeps the initial window, unless Config.InitialBandwidthBps
// stands in for the measurement.

// openWindowBDPs is the new stream's window in bandwidth-delay products:
// auto-tuning settles between 2 and 4 (see stream's autoTuneRTTs), and a
// window of 2 covers the in-flight BDP plus the quarter window a
// MAX_STREAM_DATA update waits for.
const openWindowBDPs = 2

// recvRateWindow is how many measurement intervals (each at least one
// smoothed RTT of receiving) the receive-rate maximum is kept for: about
// as long as BBR keeps its bandwidth maximum. Idle time does not count, so
// the estimate survives an idle connection as BBR's model does.
const recvRateWindow = 10

// recvRate estimates the rate at which the peer delivers stream data to
// this end: stream bytes received (retransmissions included: they took
// the path too) per interval of at least one smoothed RTT, max-filtered
// over the last recvRateWindow intervals. An arrival after a gap longer
// than the smoothed RTT starts a new interval without a sample, so idle
// periods neither lower the estimate nor age it.
type recvRate struct {
	start  monotime.Time // start of the current interval (0: none)
	last   monotime.Time // latest arrival counted
	bytes  uint64        // bytes received after start
	rounds int64         // intervals closed: the filter's clock
	max    cc.MaxFilter[uint64]
}

func newRecvRate() recvRate { return recvRate{max: cc.NewMaxFilter[uint64](recvRateWindow)} }

// onReceived counts n stream bytes arriving at now.
func (r *recvRate) onReceived(now monotime.Time, n int, srtt time.Duration) {
	if srtt <= 0 {
		return
	}
	if r.start == 0 || now.Sub(r.last) > srtt {
		// The first arrival only marks the start: its bytes were on the
		// way before it.
		r.start, r.last, r.bytes = now, now, 0
		return
	}
	r.last = now
	r.bytes += uint64(n)
	if d := now.Sub(r.start); d >= srtt {
		r.rounds++
		r.max.Update(uint64(float64(r.bytes)/d.Seconds()), r.rounds)
		r.start, r.bytes = now, 0
	}
}

// bytesPerSecond returns the estimate (0: nothing measured yet).
func (r *recvRate) bytesPerSecond() uint64 { return r.max.Get() }

// openWindow returns the receive window a stream opened now should get, or
// 0 when the connection has no estimate yet (the initial window then
// stands).
func (c *Conn) openWindow() uint64 {
	if c.rtt == nil {
		return 0
	}
	bw, srtt := c.rxRate.bytesPerSecond(), c.rtt.SmoothedRTT()
	if bw == 0 {
		// Nothing received yet: the operator's rate, if given, stands in
		// for the measurement.
		bw = c.cfg.InitialBandwidthBps / 8
	}
	if bw == 0 || srtt <= 0 {
		return 0
	}
	return uint64(openWindowBDPs * float64(bw) * srtt.Seconds())
}

// growOpenWindow grants a new stream's receive window from the
// bandwidth-delay product (see openWindow) and queues MAX_STREAM_DATA and
// MAX_DATA when credit grew.
func (c *Conn) growOpenWindow(st *streamState) {
	w := c.openWindow()
	if w == 0 {
		return
	}
	if _, ok := st.recv.GrowWindow(w, c.flow.Budget().Available()/2); ok {
		st.needMaxStreamData = true
		c.maxDataCheck = true
		c.queueCtrl(st)
	}
}
