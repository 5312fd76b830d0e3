package simtcp

import (
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/netsim"
)

// Segment states on the sender's scoreboard.
const (
	segSACKed = 1 << iota // reported received by a SACK block
	segLost               // declared lost, to be retransmitted
	segRexmit             // retransmitted since it was declared lost
)

// dupThresh is how many segments above a hole must be SACKed before the
// hole is declared lost (RFC 6675's DupThresh).
const dupThresh = 3

// SenderStats are a Sender's counters and state.
type SenderStats struct {
	Start          monotime.Time // first transmission
	Done           monotime.Time // when every byte was acknowledged; 0 until then
	AckedBytes     int64         // bytes cumulatively acknowledged
	Segments       uint64        // data segments sent, including retransmissions
	Retransmits    uint64        // segments retransmitted
	FastRecoveries uint64        // recovery episodes started by SACK loss detection
	RTOs           uint64        // retransmission timeouts
	CwndBytes      int           // the controller's window now
	PipeBytes      int           // payload bytes the scoreboard counts in flight
	SRTT           time.Duration // smoothed RTT, 0 before the first sample
	RTO            time.Duration // current retransmission timeout
}

// recovery states of the sender.
const (
	open     = iota // no loss outstanding
	fast            // SACK-based recovery: the window stays frozen
	afterRTO        // retransmitting after a timeout: the window grows
)

// Sender is the sending end of a bulk transfer. It implements
// netsim.Endpoint; it is not safe for concurrent use.
type Sender struct {
	cfg       Config
	cc        WindowController
	mss       int64
	totalSegs int64 // -1 for an endless flow

	// Segments are numbered from 0; segment i holds bytes [i*mss, (i+1)*mss).
	una, nxt   int64   // first unacknowledged, next new segment
	flags      []uint8 // scoreboard ring, indexed by segment & mask
	mask       int64
	pipe       int // segments in flight
	sacked     intervalSet
	lostUpTo   int64 // segments below are past loss detection
	rexmitNext int64 // no lost segment awaits retransmission below this
	state      int
	recoverEnd int64 // recovery ends when una reaches it
	rwndEdge   int64 // highest byte the receiver allows, exclusive
	// Proportional rate reduction (RFC 6937) during fast recovery, in
	// segments.
	prrDelivered, prrOut, recoverFS, ssthresh, sendQuota int
	maxSendSegs                                          int64 // send buffer in segments

	srtt, rttvar, rto time.Duration
	rtoAt             monotime.Time
	round, roundEnd   int64 // round-trip counter for Ack.Round; it ends when una reaches roundEnd

	// Retransmissions in the order sent, with the next new segment at the
	// time: one is lost again when dupThresh segments sent after it were
	// SACKed (Linux's lost-retransmit detection before RACK).
	rxq    []rexmitRec
	rxHead int

	stats SenderStats
	fresh []span
	ack   ackSeg
}

type rexmitRec struct{ seg, nxtAt int64 }

var _ netsim.Endpoint = (*Sender)(nil)

func newSender(cfg Config) *Sender {
	s := &Sender{
		cfg:         cfg,
		cc:          cfg.Controller,
		mss:         int64(cfg.MSS),
		totalSegs:   -1,
		rto:         cfg.InitialRTO,
		rwndEdge:    int64(cfg.ReceiveBufferBytes),
		maxSendSegs: max(int64(cfg.SendBufferBytes)/int64(cfg.MSS), 1),
	}
	if cfg.TotalBytes > 0 {
		s.totalSegs = (cfg.TotalBytes + s.mss - 1) / s.mss
	}
	n := int64(64)
	for n < s.maxSendSegs+1 {
		n *= 2
	}
	s.flags, s.mask = make([]uint8, n), n-1
	return s
}

// Stats returns the sender's counters and state.
func (s *Sender) Stats() SenderStats {
	st := s.stats
	st.AckedBytes = s.segEnd(s.una - 1)
	st.CwndBytes = s.cc.Cwnd()
	st.PipeBytes = s.pipe * int(s.mss)
	st.SRTT, st.RTO = s.srtt, s.rto
	return st
}

// Done reports whether every byte has been acknowledged.
func (s *Sender) Done() bool { return !s.stats.Done.IsZero() }

// segEnd returns the end byte of segment i (0 for i < 0).
func (s *Sender) segEnd(i int64) int64 {
	if i < 0 {
		return 0
	}
	e := (i + 1) * s.mss
	if s.totalSegs >= 0 && i == s.totalSegs-1 {
		e = s.cfg.TotalBytes
	}
	return e
}

func (s *Sender) inFlight(f uint8) bool {
	return f&segSACKed == 0 && (f&segLost == 0 || f&segRexmit != 0)
}

// PollTransmit implements netsim.Endpoint: a retransmission if one is due,
// else new data, as the windows and the send buffer allow.
func (s *Sender) PollTransmit(now monotime.Time, buf []byte) int {
	if s.stats.Start.IsZero() {
		s.stats.Start = now
	}
	if s.state == fast {
		if s.sendQuota <= 0 {
			return 0
		}
	} else if s.pipe >= max(s.cc.Cwnd()/int(s.mss), 1) {
		return 0
	}
	for ; s.rexmitNext < s.lostUpTo; s.rexmitNext++ {
		i := s.rexmitNext
		if f := &s.flags[i&s.mask]; *f&(segLost|segRexmit|segSACKed) == segLost {
			*f |= segRexmit
			s.pipe++
			s.stats.Retransmits++
			s.rexmitNext++
			if s.rxHead == len(s.rxq) {
				s.rxq, s.rxHead = s.rxq[:0], 0
			}
			s.rxq = append(s.rxq, rexmitRec{seg: i, nxtAt: s.nxt})
			return s.transmit(now, buf, i)
		}
	}
	i := s.nxt
	if (s.totalSegs >= 0 && i >= s.totalSegs) || i-s.una >= s.maxSendSegs || s.segEnd(i) > s.rwndEdge {
		return 0
	}
	s.flags[i&s.mask] = 0
	s.nxt++
	s.pipe++
	return s.transmit(now, buf, i)
}

func (s *Sender) transmit(now monotime.Time, buf []byte, i int64) int {
	s.stats.Segments++
	if s.state == fast {
		s.sendQuota--
		s.prrOut++
	}
	if s.rtoAt.IsZero() {
		s.rtoAt = now.Add(s.rto)
	}
	lo := i * s.mss
	end := s.segEnd(i)
	return putData(buf, dataSeg{
		seq: lo, n: int(end - lo), tsval: now,
		fin: s.totalSegs >= 0 && i == s.totalSegs-1,
	}, s.cfg.HeaderBytes)
}

// NextTimeout implements netsim.Endpoint: the retransmission timer.
func (s *Sender) NextTimeout() monotime.Time { return s.rtoAt }

// HandleTimeout implements netsim.Endpoint: on RTO every unSACKed segment in
// flight is declared lost and the controller is told.
func (s *Sender) HandleTimeout(now monotime.Time) {
	if s.rtoAt.IsZero() || now.Before(s.rtoAt) {
		return
	}
	s.stats.RTOs++
	s.cc.OnRTO(now)
	s.rto = min(2*s.rto, maxRTO)
	for i := s.una; i < s.nxt; i++ {
		f := &s.flags[i&s.mask]
		if *f&segSACKed == 0 {
			*f = segLost
		}
	}
	s.pipe = 0
	s.rxq, s.rxHead = s.rxq[:0], 0
	s.lostUpTo, s.rexmitNext = s.nxt, s.una
	s.state, s.recoverEnd = afterRTO, s.nxt
	s.rtoAt = now.Add(s.rto)
}

// HandleDatagram implements netsim.Endpoint: it processes an ACK.
func (s *Sender) HandleDatagram(now monotime.Time, b []byte) {
	a := &s.ack
	if !parseAck(b, a) {
		return
	}
	s.rwndEdge = max(s.rwndEdge, a.ack+a.wnd)
	pipeBefore := s.pipe
	delivered := 0 // bytes
	var rtt time.Duration
	deliveredSegs := 0

	// Cumulative acknowledgement.
	ackSeg := min((a.ack+s.mss-1)/s.mss, s.nxt)
	if ackSeg > s.una {
		for i := s.una; i < ackSeg; i++ {
			f := s.flags[i&s.mask]
			if s.inFlight(f) {
				s.pipe--
			}
			if f&segSACKed == 0 {
				delivered += int(s.segEnd(i) - i*s.mss)
				deliveredSegs++
			}
		}
		s.una = ackSeg
		s.sacked.trimBelow(s.una)
		s.lostUpTo, s.rexmitNext = max(s.lostUpTo, s.una), max(s.rexmitNext, s.una)
		if !a.tsecr.IsZero() {
			rtt = max(now.Sub(a.tsecr), 1)
			s.rttSample(rtt)
		}
		if s.una >= s.roundEnd {
			s.round++
			s.roundEnd = s.nxt
		}
		s.rtoAt = now.Add(s.rto) // RFC 6298 (5.3)
		if s.state != open && s.una >= s.recoverEnd {
			s.state = open
		}
	}

	// SACK blocks.
	for _, blk := range a.blocks[:a.nblk] {
		lo, hi := max(blk.lo/s.mss, s.una), min((blk.hi+s.mss-1)/s.mss, s.nxt)
		s.fresh = s.sacked.add(lo, hi, s.fresh[:0])
		for _, sp := range s.fresh {
			for i := sp.lo; i < sp.hi; i++ {
				f := &s.flags[i&s.mask]
				if s.inFlight(*f) {
					s.pipe--
				}
				*f |= segSACKed
				delivered += int(s.segEnd(i) - i*s.mss)
				deliveredSegs++
			}
		}
	}
	lost := s.markLost()
	lost = s.markLostRetransmits() || lost
	if lost && s.state == open {
		s.state, s.recoverEnd = fast, s.nxt
		s.stats.FastRecoveries++
		s.cc.OnLoss(now)
		s.prrDelivered, s.prrOut = 0, 0
		s.recoverFS = int(s.nxt - s.una + int64(deliveredSegs))
		s.ssthresh = max(s.cc.Cwnd()/int(s.mss), 1)
	}
	if s.state == fast {
		s.prrUpdate(deliveredSegs)
	}

	if delivered > 0 && s.state != fast && 2*pipeBefore >= s.cc.Cwnd()/int(s.mss) {
		s.cc.OnAck(now, Ack{Bytes: delivered, RTT: rtt, SRTT: s.srtt, Round: s.round})
	}
	if s.una == s.nxt {
		s.rtoAt = 0
		if s.una == s.totalSegs && s.stats.Done.IsZero() {
			s.stats.Done = now
		}
	}
}

// prrUpdate computes how many segments may be sent in fast recovery after an
// ACK that delivered deliveredSegs (RFC 6937, slow-start reduction bound).
func (s *Sender) prrUpdate(deliveredSegs int) {
	s.prrDelivered += deliveredSegs
	var quota int
	if s.pipe > s.ssthresh {
		quota = (s.prrDelivered*s.ssthresh+s.recoverFS-1)/max(s.recoverFS, 1) - s.prrOut
	} else {
		quota = min(s.ssthresh-s.pipe, max(s.prrDelivered-s.prrOut, deliveredSegs)+1)
	}
	s.sendQuota = max(quota, 0)
}

// markLost declares lost every unSACKed segment below the dupThresh-th
// highest SACKed segment, and reports whether it found any.
func (s *Sender) markLost() bool {
	sp := s.sacked.s
	count, q := int64(0), int64(-1)
	for k := len(sp) - 1; k >= 0; k-- {
		n := sp[k].hi - sp[k].lo
		if count+n >= dupThresh {
			q = sp[k].hi - (dupThresh - count)
			break
		}
		count += n
	}
	found := false
	for i := s.lostUpTo; i < q; i++ {
		f := &s.flags[i&s.mask]
		if *f&(segSACKed|segLost) != 0 {
			continue
		}
		if s.inFlight(*f) {
			s.pipe--
		}
		*f = segLost
		if !found {
			s.rexmitNext = min(s.rexmitNext, i)
			found = true
		}
	}
	s.lostUpTo = max(s.lostUpTo, q)
	return found
}

// markLostRetransmits declares lost again the retransmissions overtaken by
// dupThresh later segments, and reports whether it found any.
func (s *Sender) markLostRetransmits() bool {
	if s.sacked.empty() {
		return false
	}
	highSacked := s.sacked.s[len(s.sacked.s)-1].hi - 1
	found := false
	for ; s.rxHead < len(s.rxq); s.rxHead++ {
		r := s.rxq[s.rxHead]
		f := &s.flags[r.seg&s.mask]
		if r.seg < s.una || *f&segSACKed != 0 || *f&segRexmit == 0 {
			continue // delivered, or already declared lost again
		}
		if highSacked < r.nxtAt+dupThresh-1 {
			break
		}
		*f &^= segRexmit
		s.pipe--
		s.rexmitNext = min(s.rexmitNext, r.seg)
		found = true
	}
	return found
}

// rttSample updates the RFC 6298 estimators and the timeout.
func (s *Sender) rttSample(r time.Duration) {
	if s.srtt == 0 {
		s.srtt, s.rttvar = r, r/2
	} else {
		d := s.srtt - r
		if d < 0 {
			d = -d
		}
		s.rttvar = (3*s.rttvar + d) / 4
		s.srtt = (7*s.srtt + r) / 8
	}
	s.rto = min(max(s.srtt+max(time.Millisecond, 4*s.rttvar), s.cfg.MinRTO), maxRTO)
}
