package tunnel

// The send cap: how much stream data this end holds ahead of the path.
//
// A send stream holds what the application wrote until the peer
// acknowledges it. Without a bound beyond the per-stream buffer and the
// memory budget, a source faster than the path fills the whole budget,
// which is also what the receive windows grow from, so a tunnel carrying
// bulk data both ways holds each direction's windows near their floors
// (TestSendCapBothWays).

// sendCapCwnds is the send cap in congestion windows: one window in
// flight and about one more written and waiting for the pacer, as
// Linux's send buffer auto-tuning keeps about twice the window.
const sendCapCwnds = 2

// minSendCapBytes is the least send cap: on a short path a window is a
// few hundred kilobytes, and the writers must stay ahead of the pacer
// across a scheduling delay (4 MiB is 134 ms at 250 Mbit/s).
const minSendCapBytes = 4 << 20

// updateSendCap sets the streams' send cap from the congestion window.
func (c *Conn) updateSendCap() {
	c.flow.SetSendCap(max(minSendCapBytes, sendCapCwnds*uint64(c.sender.CongestionWindow())))
}
