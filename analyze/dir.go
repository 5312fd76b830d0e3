package analyze

import (
	"fmt"
	"math/bits"
)

// rttRing is how many unacknowledged sends a direction remembers for RTT
// samples (older ones are forgotten: fewer samples, never wrong ones).
const rttRing = 256

// rttKeep is how many RTT samples a direction keeps for its median.
const rttKeep = 4096

type pendingSend struct{ end, t int64 }

// dirState is the analysis state of the data flowing one way in a
// connection: what the sender sent, and what the receiver acknowledged,
// advertised and selectively acknowledged about it.
type dirState struct {
	based   bool
	base    uint32 // sequence offsets are relative to this
	started bool   // payload seen
	nextSeq int64  // highest sequence offset sent (end of data)
	mss     int64  // largest payload seen

	firstData, lastData, lastProgress int64

	ackSeen   bool
	acked     int64 // highest cumulative ACK from the receiver
	win       int64 // receive window granted by the receiver, bytes (scaled)
	winKnown  bool
	winScaled bool // the scale is known (handshake seen)

	holes  rangeSet // data never seen (gaps), for out-of-order detection
	sacked rangeSet // receiver's SACK scoreboard above acked

	// counters
	segs, dataSegs, retrans, spurious, ooo, lost, keepalives int
	dupAcks, dupRun, zwProbes, winFull, winUpdates, dsacks   int
	ackedUnseen, zwEvents, idleGaps, fastRetrans             int
	bytes, retransBytes, lostBytes, unique                   int64

	// time accounting (ns)
	lastEv                                     int64
	lastInFlight                               int64
	blockedNs, activeNs                        int64
	winNs, inflightNs                          float64 // byte·ns, float: int64 would overflow
	idleNs, allAckedAt, zwStart, zwNs, lastWin int64
	zwAtIdle                                   int64 // zwNs when allAckedAt was set
	idleLongNs                                 int64 // idle gaps longer than the handshake RTT
	inZW                                       bool
	minWin, maxWin                             int64

	ring       []pendingSend // allocated with the first data segment
	rHead, rN  int
	rtt        rttStats // data segment to the ACK that covers it
	ser        series
	serStarted bool

	// What ended each pause in sending new data while data was in flight
	// (see sendGaps).
	gaps           sendGaps
	lastAckAt      int64 // last ACK that acknowledged new data
	firstAckAfter  int64 // first such ACK since the last new data sent
	ackedSinceSend bool
	blockedAtSend  int64 // blockedNs when new data was last sent
}

// ackTrigger is how soon after an ACK new data must leave for the send to
// count as released by that ACK. Near the sender, the kernel (and an
// application woken by freed buffer space) sends within microseconds; a
// write on the application's own clock follows an ACK within 1 ms only by
// chance.
const ackTrigger = int64(1e6)

// sendGaps sorts the gaps of a millisecond or more between new data
// segments, sent while data was in flight and the window had room, into
// octaves of their length (bin k: 2^(k-1) to 2^k µs), so that the verdict
// can pick the gaps that are long for this flow's RTT once it knows it.
type sendGaps struct {
	n       [gapBins]int   // gaps
	ackd    [gapBins]int   // … ended by new data within ackTrigger of an ACK
	pauseNs [gapBins]int64 // … the others: time from the first ACK (or the last send) to the send
}

const gapBins = 48

func gapBin(ns int64) int { return min(bits.Len64(uint64(ns/1e3)), gapBins-1) }

// gapBinFloor is the shortest gap bin k holds, ns.
func gapBinFloor(k int) int64 {
	if k == 0 {
		return 0
	}
	return int64(1) << (k - 1) * 1e3
}

func (d *dirState) inFlight() int64 { return max(d.nextSeq-d.acked, 0) }

// account charges the time since the previous event to the state that held
// during it. It is called before every change to the direction.
func (d *dirState) account(t int64) {
	if d.started && d.lastEv != 0 && t > d.lastEv {
		dt := t - d.lastEv
		if d.lastInFlight > 0 {
			d.activeNs += dt
			d.inflightNs += float64(d.lastInFlight) * float64(dt)
			if d.winKnown {
				d.winNs += float64(d.win) * float64(dt)
				if d.lastInFlight+max(d.mss, 1) > d.win {
					d.blockedNs += dt
				}
			}
		}
	}
	if t > d.lastEv {
		d.lastEv = t
	}
}

func (d *dirState) bucket(c *conn, t int64) *bucket {
	if !d.serStarted {
		d.ser.init(c.first)
		d.serStarted = true
	}
	return d.ser.at(t)
}

func (d *dirState) settle(c *conn, t int64) {
	d.lastInFlight = d.inFlight()
	if d.started {
		b := d.bucket(c, t)
		b.maxInFlight = max(b.maxInFlight, d.lastInFlight)
		b.endInFlight = d.lastInFlight
	}
}

// send processes a segment sent in this direction.
func (d *dirState) send(c *conn, seg *segment, t int64, pkt int) {
	d.segs++
	if !d.based {
		d.based, d.base = true, seg.seq-1
	}
	n := int64(seg.payloadLen)
	if seg.flags&flagRST != 0 {
		return
	}
	st := unwrap(seg.seq, d.base, d.nextSeq)
	if seg.flags&flagSYN != 0 {
		st++ // data starts after the SYN
	}
	end := st + n
	if n == 0 {
		switch {
		case seg.flags&(flagSYN|flagFIN) == 0 && st == d.nextSeq-1 && d.winKnown && d.win == 0:
			d.zwProbes++ // Linux probes a zero window with an empty segment below snd.una
		case seg.flags&flagSYN != 0:
			d.nextSeq = max(d.nextSeq, st)
		case seg.flags&flagFIN != 0:
			d.nextSeq = max(d.nextSeq, end+1) // the FIN takes one sequence number
		}
		return
	}
	if seg.flags&flagFIN != 0 {
		defer func() { d.nextSeq = max(d.nextSeq, end+1) }()
	}
	d.account(t)
	if !d.started {
		d.started, d.firstData = true, t
		if d.nextSeq == 0 || !d.ackSeen {
			d.nextSeq = st
		}
		d.allAckedAt = t
	}
	d.dataSegs++
	d.bytes += n
	d.mss = max(d.mss, n)
	b := d.bucket(c, t)
	b.sentBytes += n

	// An idle sender: nothing was in flight since allAckedAt.
	if d.inFlight() == 0 && st >= d.nextSeq && d.allAckedAt != 0 && t > d.allAckedAt {
		// Time spent waiting on a zero window is the receiver's doing.
		gap := t - d.allAckedAt - (d.zwNs - d.zwAtIdle)
		if gap > 1e6 { // ignore sub-millisecond turnarounds
			d.idleNs += gap
			d.idleGaps++
			if c.hsRTT > 0 && gap > c.hsRTT {
				d.idleLongNs += gap
			}
		}
	}

	switch {
	case n <= 1 && st == d.nextSeq-1 && d.ackSeen && d.acked == d.nextSeq:
		d.keepalives++
	case st >= d.nextSeq:
		d.sendGap(t)
		if st > d.nextSeq {
			d.lost++
			d.lostBytes += st - d.nextSeq
			d.holes.add(d.nextSeq, st)
		}
		if d.winKnown && d.win == 0 && d.ackSeen {
			d.zwProbes++
		}
		d.unique += end - st
		d.nextSeq = end
		d.lastData = t
		d.pushRTT(end, t)
	default: // st < nextSeq: out of order, or a retransmission
		if d.holes.covers(st, min(end, d.nextSeq)) && t-d.lastData < d.oooWindow(c) {
			d.ooo++
			d.holes.remove(st, end)
		} else {
			d.retrans++
			d.retransBytes += n
			b.retrans += n
			if end <= d.acked || d.sacked.covers(st, end) {
				d.spurious++
				c.flagPkt("spurious-retransmission", pkt)
			}
			if d.dupRun >= 2 {
				d.fastRetrans++
			}
			d.holes.remove(st, end)
			d.rN = 0 // Karn: no RTT samples across a retransmission
		}
		if end > d.nextSeq {
			d.unique += end - d.nextSeq
			d.nextSeq = end
			d.lastData = t
		}
	}
	if d.winKnown && d.ackSeen && d.win > 0 && end+d.mss > d.acked+d.win {
		d.winFull++
	}
	d.settle(c, t)
}

// sendGap records what ended the gap before new data sent at t (see
// sendGaps). Gaps with nothing in flight are idle time (idleNs); gaps in
// which the window had no room are the receiver's doing.
func (d *dirState) sendGap(t int64) {
	gap := t - d.lastData
	if d.lastData > 0 && gap >= 1e6 && d.lastInFlight > 0 && d.blockedNs == d.blockedAtSend {
		k := gapBin(gap)
		d.gaps.n[k]++
		switch {
		case d.ackedSinceSend && t-d.lastAckAt <= ackTrigger:
			d.gaps.ackd[k]++
		case d.ackedSinceSend:
			d.gaps.pauseNs[k] += max(t-d.firstAckAfter, 0) // capture clocks can step back
		default:
			d.gaps.pauseNs[k] += gap
		}
	}
	d.ackedSinceSend = false
	d.blockedAtSend = d.blockedNs
}

// oooWindow is how soon after the highest segment a gap-filling segment must
// arrive to count as reordered rather than retransmitted.
func (d *dirState) oooWindow(c *conn) int64 {
	if c.hsRTT > 0 {
		return max(c.hsRTT/2, 3e6)
	}
	return 3e6
}

func (d *dirState) pushRTT(end, t int64) {
	if d.ring == nil {
		d.ring = make([]pendingSend, rttRing)
	}
	if d.rN == rttRing {
		d.rHead = (d.rHead + 1) % rttRing
		d.rN--
	}
	d.ring[(d.rHead+d.rN)%rttRing] = pendingSend{end, t}
	d.rN++
}

func (d *dirState) sampleRTT(c *conn, a, t int64) {
	var hit int64 = -1
	for d.rN > 0 && d.ring[d.rHead].end <= a {
		hit = d.ring[d.rHead].t
		d.rHead = (d.rHead + 1) % rttRing
		d.rN--
	}
	if hit < 0 || t < hit {
		return
	}
	d.rtt.add(t - hit)
	if d.started {
		b := d.bucket(c, t)
		b.rttMin = minSample(b.rttMin, max(t-hit, 1))
	}
}

// ackFrom processes an ACK for this direction's data, sent by the receiver
// (the other side). It updates acknowledgement, window and SACK state.
func (d *dirState) ackFrom(c *conn, self int, seg *segment, t int64, pkt int) {
	if !d.based {
		d.based, d.base = true, seg.ack
	}
	d.account(t)
	a := unwrap(seg.ack, d.base, d.acked)
	if !d.ackSeen {
		d.acked = a
		if !d.started {
			d.nextSeq = max(d.nextSeq, a)
		}
	}
	if a > d.nextSeq {
		if d.started {
			d.ackedUnseen++
			c.flagPkt("acked-unseen-segment", pkt) // lost by the capture, or an ACK a middlebox made up
		}
		d.nextSeq = a
	}
	pure := seg.payloadLen == 0 && seg.flags&(flagSYN|flagFIN|flagRST) == 0
	newAck := a > d.acked && d.ackSeen
	switch {
	case newAck:
		if sp, ok := d.sacked.containing(a); ok {
			c.flag("sack-reneging", pkt, func() string {
				return fmt.Sprintf("%s acknowledged up to %d, inside a block it had selectively acknowledged (%d-%d): the receiver discarded data it had SACKed",
					c.ep[1-self], a, sp.l, sp.r)
			})
		}
		if d.started {
			d.bucket(c, t).ackedBytes += a - d.acked
		}
		d.acked = a
		d.sacked.pruneBelow(a)
		d.holes.pruneBelow(a)
		d.sampleRTT(c, a, t)
		if !d.ackedSinceSend {
			d.firstAckAfter, d.ackedSinceSend = t, true
		}
		d.lastAckAt = t
		d.dupRun = 0
		d.lastProgress = t
		if d.inFlight() == 0 {
			d.allAckedAt, d.zwAtIdle = t, d.zwNs
		}
	case a == d.acked && pure && d.nextSeq > d.acked && d.winKnown && d.lastWin == int64(seg.window):
		d.dupAcks++
		d.dupRun++
	}
	d.ackSeen = true

	d.window(c, self, seg, t, pkt, pure && a == d.acked && !newAck)
	if seg.nSACK > 0 {
		d.sackBlocks(c, self, seg, a, pkt)
	}
	d.settle(c, t)
}

// window records the receive window the receiver advertised.
func (d *dirState) window(c *conn, self int, seg *segment, t int64, pkt int, pure bool) {
	raw := int64(seg.window)
	w := raw
	if seg.flags&flagSYN == 0 {
		sh, known := c.scale(1 - self)
		w = raw << sh
		d.winScaled = known
	}
	if d.winKnown && pure && w > d.win && d.lastWin != raw {
		d.winUpdates++
	}
	d.lastWin = raw
	if seg.flags&flagRST != 0 {
		return
	}
	if w == 0 && !d.inZW {
		d.inZW, d.zwStart = true, t
		d.zwEvents++
		c.flagPkt("zero-window", pkt)
	} else if w > 0 && d.inZW {
		d.inZW = false
		d.zwNs += t - d.zwStart
	}
	if !d.winKnown || w < d.minWin {
		d.minWin = w
	}
	d.win, d.winKnown = w, true
	d.maxWin = max(d.maxWin, w)
	if d.started {
		b := d.bucket(c, t)
		b.lastWindow = w
		if b.minWindow < 0 || w < b.minWindow {
			b.minWindow = w
		}
	}
}

// sackBlocks checks the SACK blocks of an ACK for this direction's data.
func (d *dirState) sackBlocks(c *conn, self int, seg *segment, a int64, pkt int) {
	if c.sackState() == "not negotiated" {
		c.flag("sack-not-negotiated", pkt, func() string {
			who := "the SYN"
			if c.syn[1].seen && !c.syn[1].sackPerm {
				who = "the SYN-ACK"
			}
			return fmt.Sprintf("%s sent SACK blocks but %s did not offer SACK-permitted", c.ep[1-self], who)
		})
	}
	for i := 0; i < seg.nSACK; i++ {
		l := unwrap(seg.sack[i][0], d.base, a)
		r := unwrap(seg.sack[i][1], d.base, a)
		if r <= l {
			c.flag("sack-malformed", pkt, func() string {
				return fmt.Sprintf("SACK block %d-%d has its right edge at or before its left edge", l, r)
			})
			continue
		}
		// The highest sequence sent is known once data was seen, or,
		// before any, from the sender's SYN: a block in an ACK that
		// comes before the first data (the handshake's last ACK) covers
		// nothing sent at all.
		if (d.started || c.syn[self].seen) && r > d.nextSeq {
			c.flag("sack-unsent-data", pkt, func() string {
				return fmt.Sprintf("%s selectively acknowledged %d-%d, but %s had sent only up to %d: no receiver could have sent this block",
					c.ep[1-self], l, r, c.ep[self], d.nextSeq)
			})
			continue
		}
		if i == 0 && (r <= a || (seg.nSACK > 1 && d.dsackCovered(seg, l, r, a))) {
			d.dsacks++ // RFC 2883 duplicate SACK: reports a duplicate, not held data
			continue
		}
		d.sacked.add(max(l, a), r)
	}
}

func (d *dirState) dsackCovered(seg *segment, l, r, a int64) bool {
	l2 := unwrap(seg.sack[1][0], d.base, a)
	r2 := unwrap(seg.sack[1][1], d.base, a)
	return l2 <= l && r <= r2
}

// flagPkt counts an event that is reported with packet numbers but is not a
// middlebox anomaly (kept in the same list, filtered when reporting).
func (c *conn) flagPkt(name string, pkt int) {
	c.flag(name, pkt, func() string { return "" })
}
