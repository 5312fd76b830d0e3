package tunnel

// The send cap: how much stream data this end holds ahead of the path.
//
// A send stream holds what the application wrote until the peer
// acknowledges it. Without a bound beyond the per-stream buffer and the
// memory budget, a source faster than the path (a client's upload into
// the near edge, a server's answer into the far edge) filled the whole
// budget: 96 MiB at the edge's default, 3 s of a 250 Mbit/s link when a
// few hundred kilobytes are in flight. That memory is the same budget the
// receive windows grow from, so a tunnel carrying bulk data both ways at
// once held each direction's windows near their floors: in the simulator
// at 250 Mbit/s and 200 ms, four streams moved 164 Mbit/s up beside a
// download instead of 227 alone (TestSendCapBothWays).

// sendCapCwnds is the send cap in congestion windows: one window in
// flight and about one more written and waiting for the pacer, as
// Linux's send buffer auto-tuning keeps about twice the window.
const sendCapCwnds = 2

// minSendCapBytes is the least send cap: on a short path a window is a
// few hundred kilobytes, and the writers must stay ahead of the pacer
// across a scheduling delay (4 MiB is 134 ms at 250 Mbit/s, 34 ms at
// 1 Gbit/s).
const minSendCapBytes = 4 << 20

// updateSendCap sets the streams' send cap from the congestion window.
func (c *Conn) updateSendCap() {
	c.flow.SetSendCap(max(minSendCapBytes, sendCapCwnds*uint64(c.sender.CongestionWindow())))
}
