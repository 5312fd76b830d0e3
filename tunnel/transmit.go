package tunnel

import (
	"fmt"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// tagSize is the AEAD tag appended to every data packet.
const tagSize = crypt.TagSize

// minStreamFrameSpace is the least room worth starting a STREAM frame in.
const minStreamFrameSpace = 24

// PollTransmit writes the next datagram to send at now into buf and
// returns its length, or 0 when nothing may be sent now (nothing to send,
// the congestion window is full, or the pacer holds it back: NextTimeout
// then says when to try again). Call it repeatedly until it returns 0.
// buf should hold Config.MaxUDPPayloadBytes, the ceiling of the path MTU
// search; data packets are no larger than the path MTU confirmed so far
// (PathMTU). A shorter buf, at least MinUDPPayloadBytes, gives shorter
// packets. The frames' order is in the package doc; the packet is sealed
// in place. In steady state PollTransmit does not allocate.
func (c *Conn) PollTransmit(now monotime.Time, buf []byte) int {
	c.now = now
	if len(buf) < MinUDPPayloadBytes {
		return 0
	}
	buf = buf[:min(len(buf), c.cfg.MaxUDPPayloadBytes)]
	switch c.state {
	case stateHandshake:
		return c.pollHandshake(now, buf)
	case stateClosing:
		return c.pollClose(now, buf)
	case stateEstablished:
		if n := c.pollRekey(now, buf); n > 0 {
			return n
		}
		return c.pollData(now, buf)
	}
	return 0
}

// pollHandshake sends the client's initiation when due, or the server's
// response to the last valid initiation.
func (c *Conn) pollHandshake(now monotime.Time, buf []byte) int {
	if !c.client {
		return c.pollResponse(buf)
	}
	if now.Before(c.hsNext) {
		return 0
	}
	return c.appendInitiation(now, buf, c.localIndex)
}

// pollResponse sends the server's handshake response, if one waits.
func (c *Conn) pollResponse(buf []byte) int {
	if !c.hsRespReady {
		return 0
	}
	c.hsRespReady = false
	n := copy(buf, c.hsResp)
	c.countSent(n)
	return n
}

// appendInitiation writes a handshake initiation offering index into buf
// and schedules its retransmission; it returns the datagram's length (0
// if the connection had to close).
func (c *Conn) appendInitiation(now monotime.Time, buf []byte, index uint32) int {
	b := wire.AppendHeader(buf[:0], &wire.Header{Type: wire.PacketHandshakeInit, SenderIndex: index})
	// A fresh timestamp in every initiation (Config.HandshakeTimestamp).
	stamp := c.cfg.HandshakeTimestamp + crypt.Timestamp(now.Sub(c.created))
	b, err := c.initiator.Begin(b, index, stamp, now)
	if err != nil {
		c.terminate(fmt.Errorf("%w: %w", ErrHandshakeTimeout, err))
		return 0
	}
	b = c.cookies.AppendMACs(b, now)
	c.hsNext = now.Add(c.hsInterval)
	c.hsInterval = min(2*c.hsInterval, MaxHandshakeRetransmit)
	c.stats.HandshakesSent++
	c.countSent(len(b))
	return len(b)
}

func (c *Conn) countSent(n int) {
	c.stats.PacketsSent++
	c.stats.BytesSent += uint64(n)
}

// packetBuilder assembles one data packet's plaintext in place.
type packetBuilder struct {
	b         []byte // header and frames so far; cap is the plaintext limit
	first     uint64 // first record's sequence number
	nrec      int
	eliciting bool
	full      bool // the last frame has no length field: nothing may follow
	probe     bool // a path MTU probe: not in flight for the loss recovery
}

func (p *packetBuilder) space() int { return cap(p.b) - len(p.b) }

// record remembers a frame of the packet.
func (c *Conn) record(p *packetBuilder, f sentFrame) {
	seq := c.records.push(f)
	if p.nrec == 0 {
		p.first = seq
	}
	p.nrec++
}

// beginData writes a data packet header into buf and returns the builder.
func (c *Conn) beginData(buf []byte) (packetBuilder, wire.Header) {
	pn := c.sender.NextPacketNumber()
	h := wire.Header{
		Type:          wire.PacketData,
		ReceiverIndex: c.sess.RemoteIndex(),
		PacketNumber:  pn,
		PNLen:         wire.PacketNumberLen(pn, c.sender.LargestAcked()),
	}
	b := wire.AppendHeader(buf[:0:len(buf)-tagSize], &h)
	return packetBuilder{b: b}, h
}

// finishData seals the packet and hands it to the Sender. It returns the
// datagram length.
func (c *Conn) finishData(now monotime.Time, buf []byte, p *packetBuilder, h *wire.Header) int {
	hl := h.Len()
	out, err := c.sess.Seal(buf[hl:hl], buf[:hl], p.b[hl:], h.PacketNumber)
	if err != nil { // unreachable: packet numbers come from the Sender, in order
		c.terminate(fmt.Errorf("tunnel: sealing packet %d: %w", h.PacketNumber, err))
		return 0
	}
	n := hl + len(out)
	c.sessSent++
	// A probe is tracked (its ACK confirms its size) but, for the loss
	// recovery, not ack-eliciting: not in flight, not the controller's,
	// not a reason for a PTO (RFC 8899 §3: a lost probe is no congestion).
	big := n > c.pmtu.base && !p.probe
	c.sender.OnPacketSent(now, h.PacketNumber, n, p.eliciting && !p.probe, token(p.first, p.nrec, big))
	c.countSent(n)
	if p.eliciting {
		c.lastElicitingSent = now
		c.ackOnlyRun = 0
		if !c.sentElicitingSince {
			c.sentElicitingSince = true
			c.idleStart = now
		}
	} else {
		c.ackOnlyRun++
	}
	return n
}

// pollData builds one data packet.
func (c *Conn) pollData(now monotime.Time, buf []byte) int {
	c.pacingWake = 0
	c.refreshCredit(now)
	t := c.sender.TimeToSend(now)
	canSend := t == now
	ackDue := c.receiver.AckDue(now)
	if !canSend {
		if t != 0 && c.wantsToSend() {
			c.pacingWake = t
		}
		if !ackDue {
			return 0
		}
	}
	if c.pmtu.checkBlackHole() {
		c.onPathMTUChanged()
	}
	if canSend && c.sender.ProbesPending() == 0 {
		if n := c.pollPMTUProbe(now, buf); n > 0 {
			return n
		}
	}
	limit := c.pmtu.size
	if c.sender.ProbesPending() > 0 {
		// PTO probes go at the base size: if the path turned into a
		// black hole for the size in use, their ACKs are what tells.
		limit = c.pmtu.base
	}
	buf = buf[:min(len(buf), limit)]
	p, h := c.beginData(buf)
	if ackDue {
		// Only when due: an ACK in every data packet would cost about 10
		// bytes each for nothing.
		c.writeAck(now, &p)
	}
	if canSend {
		c.writeControl(&p)
		if p.nrec == 0 && c.ackOnlyRun >= 16 && !p.eliciting {
			// We only acknowledge: make the peer acknowledge our ACKs now
			// and then, so both Receivers can forget old ranges.
			c.pingPending = true
		}
		if c.pingPending && !p.eliciting && p.space() >= 1 {
			p.b = append(p.b, byte(wire.FramePing))
			p.eliciting = true
		}
		c.pingPending = false
		c.writeDatagrams(&p)
		c.writeStreams(&p)
		if !p.eliciting && !p.full && c.sender.ProbesPending() > 0 && p.space() >= 1 {
			p.b = append(p.b, byte(wire.FramePing))
			p.eliciting = true
		}
		if !p.eliciting {
			c.sender.OnAppLimited(now)
		}
	}
	if len(p.b) == h.Len() {
		return 0
	}
	return c.finishData(now, buf, &p, &h)
}

// wantsToSend reports whether anything ack-eliciting waits to be sent.
func (c *Conn) wantsToSend() bool {
	return c.sched.size > 0 || c.ctrlQ.size > 0 || c.dgOut.size > 0 ||
		len(c.openResults) > 0 || c.maxDataPending || c.pingPending || c.pmtu.probeDue()
}

// pollPMTUProbe sends the path MTU search's next probe, if one is due: a
// PING padded to the size probed, alone in its packet.
func (c *Conn) pollPMTUProbe(now monotime.Time, buf []byte) int {
	size := c.pmtu.nextProbe()
	if size == 0 {
		return 0
	}
	if size > len(buf) {
		// The driver's buffer cannot hold it: too big, as for the path.
		c.pmtu.tooBig(size, now)
		return 0
	}
	p, h := c.beginData(buf[:size])
	p.b = append(p.b, byte(wire.FramePing))
	pad := p.space()
	p.b = p.b[:len(p.b)+pad]
	clear(p.b[len(p.b)-pad:])
	// The PTO, and half an RTT for a queue building up meanwhile.
	id := c.pmtu.onProbeSent(now, size, c.rtt.PTO(true)+c.rtt.SmoothedRTT()/2)
	c.cfg.Logger.Debug("path MTU probe", "bytes", size, "probe", id, "pn", h.PacketNumber, "timeout", c.pmtu.probeDeadline.Sub(now))
	c.record(&p, sentFrame{kind: fkProbe, id: id, off: uint64(size)})
	p.eliciting, p.probe = true, true
	return c.finishData(now, buf, &p, &h)
}

// refreshCredit asks the flow controllers whether reads made new credit
// worth announcing.
func (c *Conn) refreshCredit(now monotime.Time) {
	if !c.maxDataCheck {
		return
	}
	c.maxDataCheck = false
	if v, ok := c.flow.ShouldSendMaxData(now, c.tuneRTT()); ok {
		c.maxDataValue, c.maxDataPending = v, true
	}
}

// writeAck adds an ACK frame if one fits.
func (c *Conn) writeAck(now monotime.Time, p *packetBuilder) {
	if !c.receiver.BuildAck(now, &c.ackFrame) {
		return
	}
	for c.ackFrame.EncodedLen() > p.space() && len(c.ackFrame.Ranges) > 1 {
		c.ackFrame.Ranges = c.ackFrame.Ranges[:len(c.ackFrame.Ranges)-1]
	}
	if c.ackFrame.EncodedLen() > p.space() {
		return
	}
	p.b = c.ackFrame.Append(p.b)
	c.record(p, sentFrame{kind: fkAck, off: c.ackFrame.Largest()})
	c.receiver.OnAckSent(now)
}

// writeControl adds the pending control frames that fit.
func (c *Conn) writeControl(p *packetBuilder) {
	if c.maxDataPending {
		f := wire.MaxDataFrame{Max: c.maxDataValue}
		if f.EncodedLen() <= p.space() {
			p.b = f.Append(p.b)
			c.record(p, sentFrame{kind: fkMaxData, off: f.Max})
			p.eliciting = true
			c.maxDataPending = false
		}
	}
	for len(c.openResults) > 0 {
		f := c.openResults[0]
		if f.EncodedLen() > p.space() || p.nrec >= maxRecordsPerPacket-2 {
			return
		}
		p.b = f.Append(p.b)
		c.record(p, sentFrame{kind: fkOpenResult, id: f.StreamID, code: uint64(f.Code)})
		p.eliciting = true
		n := copy(c.openResults, c.openResults[1:])
		c.openResults = c.openResults[:n]
	}
	for c.ctrlQ.size > 0 {
		st := c.ctrlQ.front()
		if !st.removed && !c.writeStreamControl(p, st) {
			return // did not fit: next packet
		}
		c.ctrlQ.pop()
		st.inCtrl = false
	}
}

// writeStreamControl writes a stream's pending control frames; it returns
// false if some did not fit (they stay pending).
func (c *Conn) writeStreamControl(p *packetBuilder, st *streamState) bool {
	if p.nrec >= maxRecordsPerPacket-8 {
		return false
	}
	if st.needOpen {
		f := wire.StreamOpenFrame{StreamID: st.id, Proto: st.proto, Src: st.src, Dst: st.dst}
		// The receive window granted at open (growOpenWindow) goes in the
		// same packet after STREAM_OPEN, so the peer never sees it for a
		// stream it does not know; if lost, both are sent again together.
		var credit wire.MaxStreamDataFrame
		need := f.EncodedLen()
		if st.needMaxStreamData {
			_, limit := st.recv.RecvWindow()
			credit = wire.MaxStreamDataFrame{StreamID: st.id, Max: limit}
			need += credit.EncodedLen()
		}
		if need > p.space() {
			return false
		}
		p.b = f.Append(p.b)
		c.record(p, sentFrame{kind: fkOpen, id: st.id})
		p.eliciting, st.needOpen = true, false
		if st.needMaxStreamData {
			p.b = credit.Append(p.b)
			c.record(p, sentFrame{kind: fkMaxStreamData, id: st.id, off: credit.Max})
			st.needMaxStreamData = false
		}
	}
	if st.local && st.open == openWaitResult {
		// The peer may not know the stream yet, and a frame for an unknown
		// stream is a protocol violation: RESET_STREAM, STOP_SENDING and
		// later credit wait for OPEN_RESULT.
		return true
	}
	if st.needReset {
		f := wire.ResetStreamFrame{StreamID: st.id, Code: st.resetCode, FinalSize: st.resetFinal}
		if f.EncodedLen() > p.space() {
			return false
		}
		p.b = f.Append(p.b)
		c.record(p, sentFrame{kind: fkReset, id: st.id})
		p.eliciting, st.needReset = true, false
	}
	if st.needStop {
		f := wire.StopSendingFrame{StreamID: st.id, Code: st.stopCode}
		if f.EncodedLen() > p.space() {
			return false
		}
		p.b = f.Append(p.b)
		c.record(p, sentFrame{kind: fkStopSending, id: st.id})
		p.eliciting, st.needStop = true, false
	}
	if st.checkCredit {
		st.checkCredit = false
		if _, ok := st.recv.ShouldSendMaxStreamData(c.now, c.tuneRTT()); ok {
			st.needMaxStreamData = true
		}
	}
	if st.needMaxStreamData {
		_, limit := st.recv.RecvWindow()
		f := wire.MaxStreamDataFrame{StreamID: st.id, Max: limit}
		if f.EncodedLen() > p.space() {
			return false
		}
		p.b = f.Append(p.b)
		c.record(p, sentFrame{kind: fkMaxStreamData, id: st.id, off: limit})
		p.eliciting, st.needMaxStreamData = true, false
	}
	return true
}

// writeDatagrams adds queued datagrams that fit. A datagram that fits
// only without its length field goes last, filling the packet; one that
// cannot fit even an otherwise empty packet is dropped.
func (c *Conn) writeDatagrams(p *packetBuilder) {
	for c.dgOut.size > 0 && !p.full {
		d := c.dgOut.front()
		f := wire.DatagramFrame{Data: d}
		if f.EncodedLen() > p.space() {
			f.OmitLength = true
		}
		if f.EncodedLen() > p.space() {
			if p.nrec > 0 || p.eliciting {
				return // the next packet has room
			}
			c.stats.DatagramsDropped++
		} else {
			p.b = f.Append(p.b)
			p.eliciting = true
			p.full = f.OmitLength
			c.stats.DatagramsSent++
		}
		c.dgFree = append(c.dgFree, c.dgOut.pop()[:0])
	}
}

// writeStreams fills the rest of the packet with stream data, one frame
// per stream in turn (round robin).
func (c *Conn) writeStreams(p *packetBuilder) {
	for c.sched.size > 0 && !p.full && p.space() >= minStreamFrameSpace && p.nrec < maxRecordsPerPacket-1 {
		st := c.sched.front()
		if st.removed || !st.send.HasData() {
			c.sched.pop()
			st.inSched = false
			continue
		}
		space := p.space()
		offLen := wire.VarintLen(min(st.sentHigh+uint64(space), wire.MaxVarint))
		hdrMax := 1 + wire.VarintLen(st.id) + offLen
		off, data, fin, ok := st.send.PopFrame(space - hdrMax)
		if !ok {
			c.sched.pop()
			st.inSched = false
			continue
		}
		f := wire.StreamFrame{StreamID: st.id, Offset: off, Data: data, Fin: fin, OmitLength: true}
		last := f.EncodedLen()+2+minStreamFrameSpace > space
		f.OmitLength = last
		p.b = f.Append(p.b)
		c.record(p, sentFrame{kind: fkStream, id: st.id, off: off, n: uint32(len(data)), fin: fin})
		p.eliciting = true
		end := off + uint64(len(data))
		if off < st.sentHigh {
			c.stats.StreamBytesRetransmitted += min(end, st.sentHigh) - off
		}
		if end > st.sentHigh {
			c.stats.StreamBytesSent += end - max(off, st.sentHigh)
			st.sentHigh = end
		}
		// Round robin: the stream goes to the back of the queue.
		c.sched.pop()
		if st.send.HasData() {
			c.sched.push(st)
		} else {
			st.inSched = false
		}
		if last {
			p.full = true
			return
		}
	}
}

// pollClose sends a CLOSE frame when one is due.
func (c *Conn) pollClose(now monotime.Time, buf []byte) int {
	if !c.closePending {
		return 0
	}
	c.closePending = false
	p, h := c.beginData(buf)
	f := wire.CloseFrame{Code: c.closeCode, Reason: c.closeReason[:c.closeReasonLen]}
	if f.EncodedLen() > p.space() {
		f.Reason = f.Reason[:0]
	}
	p.b = f.Append(p.b)
	return c.finishData(now, buf, &p, &h)
}

// tuneRTT is the round-trip time given to the receive-window auto-tuners:
// 3×srtt, since a lost packet holds back in-order delivery for loss
// detection (9/8 RTT) plus the retransmission's trip. With srtt, random
// loss makes consumption look slow, windows stop growing and the sender
// becomes flow-control limited (`wanbench cisco --rate 100mbit --rtt
// 100ms --loss 1%`). Windows stay bounded by stream.Config's maxima and
// the memory budget.
func (c *Conn) tuneRTT() time.Duration { return 3 * c.rtt.SmoothedRTT() }
