package tunnel

import (
	"fmt"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/stream"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// handleFrame acts on the frame the parser holds. A protocol violation
// closes the connection (the caller stops when the state changes).
func (c *Conn) handleFrame(now monotime.Time, t wire.FrameType) {
	p := &c.parser
	switch t {
	case wire.FramePadding, wire.FramePing, wire.FrameDataBlocked, wire.FrameStreamDataBlocked:
		// Nothing to do; PING only makes the packet ack-eliciting.
	case wire.FrameAck:
		f := p.Ack()
		if err := c.sender.OnAck(now, &f, c.ackedFn, c.lostFn); err != nil {
			c.closeWithError(now, wire.CloseProtocolViolation, "bad ack", fmt.Errorf("%w: %w", ErrProtocol, err))
			return
		}
		c.updateSendCap()
	case wire.FrameStream:
		f := p.Stream()
		c.onStreamFrame(now, &f)
	case wire.FrameResetStream:
		f := p.ResetStream()
		st := c.peerStream(now, f.StreamID)
		if st == nil {
			return
		}
		if err := st.recv.OnResetStream(f.Code, f.FinalSize); err != nil {
			c.streamError(now, err)
			return
		}
		if _, ok := st.recv.ResetCode(); ok && !st.appRecvDone {
			st.appRecvDone = true
			c.events.push(Event{Kind: EventStreamReset, StreamID: f.StreamID, Code: f.Code})
			c.maxDataCheck = true
		}
		c.maybeFinish(st)
	case wire.FrameStopSending:
		f := p.StopSending()
		st := c.peerStream(now, f.StreamID)
		if st == nil {
			return
		}
		if final, ok := st.send.OnStopSending(f.Code); ok {
			st.needReset, st.resetCode, st.resetFinal = true, f.Code, final
			c.queueCtrl(st)
			c.events.push(Event{Kind: EventStreamStopSending, StreamID: f.StreamID, Code: f.Code})
		}
	case wire.FrameMaxData:
		if c.flow.OnMaxData(p.MaxData().Max) {
			c.scheduleAll()
		}
	case wire.FrameMaxStreamData:
		f := p.MaxStreamData()
		if st := c.peerStream(now, f.StreamID); st != nil && st.send.OnMaxStreamData(f.Max) {
			c.schedule(st)
			// Under a send cap a stream holds little beyond the peer's
			// credit (stream.SendStream.Writable): new credit is room.
			c.signalWritable(st)
		}
	case wire.FrameClose:
		f := p.Close()
		c.terminate(fmt.Errorf("%w: %v: %q", ErrPeerClosed, f.Code, truncate(f.Reason, 64)))
	case wire.FrameStreamOpen:
		c.onStreamOpen(now, p.StreamOpen())
	case wire.FrameOpenResult:
		c.onOpenResult(p.OpenResult())
	case wire.FrameDatagram:
		c.onDatagram(p.Datagram().Data)
	}
}

// truncate returns at most n bytes of b as a string, for error messages.
func truncate(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}

// streamError closes the connection for a stream-level violation.
func (c *Conn) streamError(now monotime.Time, err error) {
	c.closeWithError(now, stream.CloseCode(err), "stream error", fmt.Errorf("%w: %w", ErrProtocol, err))
}

// isLocalID reports whether id belongs to streams this side opens.
func (c *Conn) isLocalID(id uint64) bool { return id&1 == c.nextLocalID&1 }

// peerStream returns the stream a frame from the peer names. For a stream
// that is finished and forgotten (or a rejected open) it returns nil: the
// frame is a late retransmission. A stream that was never opened is a
// protocol violation: the connection is closed and nil returned.
func (c *Conn) peerStream(now monotime.Time, id uint64) *streamState {
	if st := c.streams[id]; st != nil {
		return st
	}
	if c.isLocalID(id) {
		if id < c.nextLocalID {
			return nil
		}
	} else if c.peerSeen.contains(id >> 1) {
		return nil
	}
	c.closeWithError(now, wire.CloseStreamState, "frame for an unopened stream",
		fmt.Errorf("%w: frame for stream %d, never opened", ErrProtocol, id))
	return nil
}

// onStreamFrame takes a STREAM frame.
func (c *Conn) onStreamFrame(now monotime.Time, f *wire.StreamFrame) {
	st := c.peerStream(now, f.StreamID)
	if st == nil {
		return
	}
	c.stats.StreamBytesReceived += uint64(len(f.Data))
	c.rxRate.onReceived(now, len(f.Data), c.rtt.SmoothedRTT())
	taken := st.recv.Taken()
	if err := st.recv.HandleFrame(f.Offset, f.Data, f.Fin); err != nil {
		c.streamError(now, err)
		return
	}
	// The connection's credit follows arrivals (stream.ConnFlow.release).
	c.maxDataCheck = true
	if k := st.recv.Taken() - taken; k > 0 { // read into the lent buffer
		c.stats.StreamBytesReadInto += uint64(k)
		c.creditDue(st)
	}
	c.signalReadable(st)
}

// signalWritable reports EventStreamWritable to a writer that waits, once
// the room it waits for is there.
func (c *Conn) signalWritable(st *streamState) {
	if st.wantWritable && st.send.Writable() >= max(st.writableAt, 1) {
		st.wantWritable = false
		c.events.push(Event{Kind: EventStreamWritable, StreamID: st.id})
	}
}

// signalReadable reports EventStreamReadable once per drain.
func (c *Conn) signalReadable(st *streamState) {
	if st.readSignalled || st.appRecvDone {
		return
	}
	if st.recv.Readable() == 0 && st.recv.Taken() == 0 {
		if _, fin := st.recv.Read(nil); !fin {
			return
		}
	}
	st.readSignalled = true
	c.events.push(Event{Kind: EventStreamReadable, StreamID: st.id})
}

// onStreamOpen takes a STREAM_OPEN. A repeated one is ignored; one beyond
// Config.MaxStreams is refused with wire.OpenResourceLimit.
func (c *Conn) onStreamOpen(now monotime.Time, f wire.StreamOpenFrame) {
	if c.isLocalID(f.StreamID) {
		c.closeWithError(now, wire.CloseStreamState, "STREAM_OPEN with our stream ID",
			fmt.Errorf("%w: STREAM_OPEN for stream %d, an ID of ours", ErrProtocol, f.StreamID))
		return
	}
	k := f.StreamID >> 1
	if c.peerSeen.contains(k) {
		return
	}
	if !c.peerSeen.add(k) {
		c.closeWithError(now, wire.CloseStreamLimit, "stream ID too far ahead",
			fmt.Errorf("%w: STREAM_OPEN for stream %d, more than %d ahead of the lowest not yet opened", ErrProtocol, f.StreamID, c.peerSeen.span()))
		return
	}
	if c.peerOpen >= c.cfg.MaxStreams {
		c.openResults = append(c.openResults, wire.OpenResultFrame{StreamID: f.StreamID, Code: wire.OpenResourceLimit})
		c.stats.StreamsRefused++
		return
	}
	st := c.newStream(f.StreamID, false)
	st.open = openWaitAccept
	st.proto, st.src, st.dst = f.Proto, f.Src, f.Dst
	c.stats.StreamsAccepted++
	c.events.push(Event{Kind: EventStreamOpened, StreamID: f.StreamID, Proto: f.Proto, Src: f.Src, Dst: f.Dst})
}

// onOpenResult takes the peer's answer to our STREAM_OPEN.
func (c *Conn) onOpenResult(f wire.OpenResultFrame) {
	st := c.streams[f.StreamID]
	if st == nil || !st.local || st.open != openWaitResult {
		return // repeated, or for a stream already gone
	}
	st.needOpen = false
	c.events.push(Event{Kind: EventOpenResult, StreamID: f.StreamID, OpenCode: f.Code})
	if f.Code != wire.OpenOK {
		c.removeStream(st, false)
		return
	}
	st.open = openOK
	if st.needReset || st.needStop || st.needMaxStreamData || st.checkCredit {
		c.queueCtrl(st)
	}
	c.schedule(st)
}

// onDatagram queues a received datagram as an event (copied), or drops it
// when Config.MaxDatagramQueue are already waiting.
func (c *Conn) onDatagram(data []byte) {
	if c.dgPending >= c.cfg.MaxDatagramQueue {
		c.stats.DatagramsDropped++
		return
	}
	c.stats.DatagramsReceived++
	c.dgPending++
	c.events.push(Event{Kind: EventDatagram, Data: append(c.dgBuf(), data...)})
}

// onAcked is the Sender's ackedFn: the packet with token tok arrived.
func (c *Conn) onAcked(tok uint64) {
	first, n, big := untoken(tok)
	c.pmtu.onPacketAcked(big)
	for i := range uint64(n) {
		r := c.records.at(first + i)
		switch r.kind {
		case fkProbe:
			c.cfg.Logger.Debug("path MTU probe acked", "bytes", r.off, "probe", r.id, "current", c.pmtu.probeID)
			if c.pmtu.onProbeAcked(r.id, int(r.off), c.now) {
				c.onPathMTUChanged()
			}
		case fkStream:
			if st := c.streams[r.id]; st != nil {
				st.send.OnAcked(r.off, int(r.n), r.fin)
				c.signalWritable(st)
				c.maybeFinish(st)
			}
		case fkReset:
			if st := c.streams[r.id]; st != nil {
				st.send.OnResetAcked()
				c.maybeFinish(st)
			}
		case fkAck:
			c.receiver.OnAckOfAckReceived(r.off)
		}
	}
	c.records.release(first, n)
}

// onLost is the Sender's lostFn: the packet with token tok is lost; its
// frames that still matter are queued again.
func (c *Conn) onLost(tok uint64) {
	first, n, big := untoken(tok)
	c.pmtu.onPacketLost(big)
	for i := range uint64(n) {
		r := c.records.at(first + i)
		switch r.kind {
		case fkProbe:
			c.cfg.Logger.Debug("path MTU probe declared lost", "bytes", r.off, "probe", r.id, "current", c.pmtu.probeID)
			c.pmtu.onProbeLost(r.id, c.now)
		case fkStream:
			if st := c.streams[r.id]; st != nil {
				st.send.OnLost(r.off, int(r.n), r.fin)
				c.schedule(st)
			}
		case fkMaxData:
			if r.off == c.maxDataValue {
				c.maxDataPending = true
			}
		case fkMaxStreamData:
			if st := c.streams[r.id]; st != nil {
				if _, limit := st.recv.RecvWindow(); limit == r.off && !st.recv.Done() {
					st.needMaxStreamData = true
					c.queueCtrl(st)
				}
			}
		case fkOpen:
			if st := c.streams[r.id]; st != nil && st.open == openWaitResult {
				st.needOpen = true
				c.queueCtrl(st)
			}
		case fkOpenResult:
			c.openResults = append(c.openResults, wire.OpenResultFrame{StreamID: r.id, Code: wire.OpenCode(r.code)})
		case fkReset:
			if st := c.streams[r.id]; st != nil {
				st.needReset = true
				c.queueCtrl(st)
			}
		case fkStopSending:
			if st := c.streams[r.id]; st != nil && !st.recv.Done() {
				st.needStop = true
				c.queueCtrl(st)
			}
		}
	}
	c.records.release(first, n)
}
