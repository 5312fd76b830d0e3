package simtcp

import (
	"math"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// Ack is what one ACK told the Sender, as passed to WindowController.OnAck.
type Ack struct {
	// Bytes is the payload newly delivered (cumulatively acknowledged or
	// SACKed), each byte counted once.
	Bytes int
	// RTT is the sample this ACK gave (timestamp echo of an ACK that
	// advanced the cumulative point), 0 if none.
	RTT time.Duration
	// SRTT is the smoothed RTT of RFC 6298, 0 before the first sample.
	SRTT time.Duration
	// Round counts round trips: it grows by one when an ACK covers the
	// last segment that had been sent when the previous round began.
	Round int64
}

// WindowController decides the sender's congestion window. The Sender calls
// it from its own methods only, so it needs no locking.
type WindowController interface {
	// OnAck reports an ACK that delivered data. The Sender does not call it
	// during fast recovery, nor when it used less than half of Cwnd (so an
	// application- or receiver-limited flow does not inflate its window).
	OnAck(now monotime.Time, a Ack)
	// OnLoss reports a loss detected from SACKs; it is called once per
	// recovery episode (once per window of data).
	OnLoss(now monotime.Time)
	// OnRTO reports that the retransmission timer expired.
	OnRTO(now monotime.Time)
	// Cwnd returns the congestion window in bytes.
	Cwnd() int
}

// initialWindowSegs is the initial window of RFC 6928.
const initialWindowSegs = 10

// Reno is the NewReno window controller of RFC 5681: slow start with
// appropriate byte counting, one MSS per window in congestion avoidance,
// halving on loss, one MSS after a timeout.
type Reno struct {
	mss                int
	cwnd, ssthresh     int
	bytesAckedInWindow int
}

var _ WindowController = (*Reno)(nil)

// NewReno returns a Reno controller for segments of mss payload bytes.
func NewReno(mss int) *Reno {
	return &Reno{mss: mss, cwnd: initialWindowSegs * mss, ssthresh: math.MaxInt}
}

// OnAck implements WindowController.
func (r *Reno) OnAck(_ monotime.Time, a Ack) {
	acked := a.Bytes
	if r.cwnd < r.ssthresh {
		inc := min(acked, r.ssthresh-r.cwnd)
		r.cwnd += inc
		acked -= inc
	}
	r.bytesAckedInWindow += acked
	for r.bytesAckedInWindow >= r.cwnd {
		r.bytesAckedInWindow -= r.cwnd
		r.cwnd += r.mss
	}
}

// OnLoss implements WindowController.
func (r *Reno) OnLoss(monotime.Time) {
	r.ssthresh = max(r.cwnd/2, 2*r.mss)
	r.cwnd = r.ssthresh
	r.bytesAckedInWindow = 0
}

// OnRTO implements WindowController.
func (r *Reno) OnRTO(monotime.Time) {
	r.ssthresh = max(r.cwnd/2, 2*r.mss)
	r.cwnd = r.mss
	r.bytesAckedInWindow = 0
}

// Cwnd implements WindowController.
func (r *Reno) Cwnd() int { return r.cwnd }
