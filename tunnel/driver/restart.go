// Session restart: a server renewing its Conn while no client came, the
// REJECT a server sends for an unknown session, the successor Conn a
// server offers a restarted client, and the new handshake a rejected
// client starts; the new session replaces the old (switchConn).

package driver

import (
	"net/netip"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// rejectInterval is the least time between two REJECTs a server sends;
// rehandshakeInterval the least between two new handshakes a client
// starts on REJECTs.
const (
	rejectInterval      = 50 * time.Millisecond
	rehandshakeInterval = time.Second
)

// An established server examines at most initRate new initiations per
// second (burst initBurst): a restarted client retransmits its initiation
// every second, and a flood of replayed ones must not take the driver
// goroutine from the session's data.
const (
	initRate  = 20
	initBurst = 20
)

// restartServer replaces a server Conn that closed before any client
// completed the handshake (ErrHandshakeTimeout), so Listen keeps waiting
// until its context ends. It returns false when the driver should stop.
func (d *driverState) restartServer(now monotime.Time) bool {
	if d.t.client || d.estDone || d.t.ctx.Err() != nil {
		return false
	}
	conn, err := tunnel.NewServerConn(d.t.cfg.Tunnel, now)
	if err != nil {
		d.closeErr = err
		return false
	}
	d.conn = conn
	d.closeErr = nil
	d.peer = netip.AddrPort{}
	d.t.log.Debug("no client yet; server state renewed")
	return d.service()
}

// maybeReject (server) answers p, a datagram from ep, with a REJECT when
// it was data for a session the Conn does not hold, so a client of the
// server's life before a restart handshakes again now rather than after
// its idle timeout. At most one REJECT per rejectInterval, each no
// larger than what it answers.
func (d *driverState) maybeReject(now monotime.Time, p []byte, ep netip.AddrPort) {
	if d.lastReject != 0 && now.Sub(d.lastReject) < rejectInterval {
		return
	}
	d.rejectBuf = d.conn.AppendReject(d.rejectBuf[:0], p)
	if len(d.rejectBuf) == 0 {
		return
	}
	d.lastReject = now
	if err := d.t.bc.WriteBatch([][]byte{d.rejectBuf}, ep); err != nil {
		d.ctr.txErrors++
		return
	}
	d.ctr.rejectsSent++
	d.ctr.datagramsOut++
	d.t.log.Debug("data for an unknown session; REJECT sent", "to", ep)
}

// offerSuccessor (server) gives p, a handshake initiation from ep that
// arrived while the session is established, to a successor Conn: if it is
// newer than every initiation accepted so far (the client restarted), the
// successor answers and replaces the session once the client confirms the
// keys (pollNext, switchConn). Replays and forgeries cost the rate-limited
// check and leave nothing behind.
func (d *driverState) offerSuccessor(now monotime.Time, p []byte, ep netip.AddrPort) {
	if d.initRefill == 0 {
		d.initTokens, d.initRefill = initBurst, now
	}
	d.initTokens = min(initBurst, d.initTokens+now.Sub(d.initRefill).Seconds()*initRate)
	d.initRefill = now
	if d.initTokens < 1 {
		return
	}
	d.initTokens--
	if d.next != nil {
		// A retransmitted initiation (our response was lost): the
		// successor answers it again while unconfirmed.
		d.next.HandleDatagram(now, p)
		d.nextPeer = ep
		return
	}
	next, err := d.conn.NewSuccessor(now)
	if err != nil {
		d.t.log.Warn("cannot examine a new initiation", "err", err)
		return
	}
	before := next.Stats().PacketsReceived
	next.HandleDatagram(now, p)
	if next.Stats().PacketsReceived == before {
		d.ctr.initiationsRefused++ // replayed, forged or not allowed: no answer
		for {
			ev, ok := next.PollEvent()
			if !ok {
				break
			}
			if ev.Kind == tunnel.EventHandshakeRefused {
				d.t.cfg.Refusals.addEvent(time.Now(), ep, ev)
			}
		}
		return
	}
	if next.PeerRekeying() {
		// The client's periodic rekey: the session keeps its streams and
		// takes the new keys (tunnel's rekey.go).
		d.conn.AcceptRekey(next)
		return
	}
	if next.PeerResuming() {
		// The client says it still holds this session: a REJECT we never
		// sent. Declined unanswered; the session goes on.
		d.ctr.resumesDeclined++
		d.t.log.Info("the peer handshook again while its session here is alive (a forged REJECT?); declined, the session goes on", "from", ep)
		return
	}
	d.next, d.nextPeer, d.nextTried = next, ep, now
	d.t.log.Info("new handshake from the peer while established (it restarted?); answering, the current session goes on until it confirms", "from", ep)
}

// startRehandshake (client) begins a new handshake with the server after
// it rejected our session, keeping the current one: REJECT is not
// authenticated, so only a completed handshake replaces the session
// (switchConn). One runs at a time, at most one per rehandshakeInterval.
func (d *driverState) startRehandshake(now monotime.Time) {
	if !d.t.client || d.next != nil || d.t.ctx.Err() != nil ||
		(d.nextTried != 0 && now.Sub(d.nextTried) < rehandshakeInterval) {
		return
	}
	// A fresh timestamp, and the resume flag: a server that restarted
	// holds no session and answers, while a live one (the REJECT was
	// forged) declines (offerSuccessor) and keeps the session.
	cfg := d.t.cfg.Tunnel
	cfg.HandshakeTimestamp = crypt.Timestamp(time.Now().UnixNano())
	cfg.Resume = true
	conn, err := tunnel.NewClientConn(cfg, now)
	if err != nil {
		d.t.log.Warn("the server rejected our session; cannot start a new handshake", "err", err)
		return
	}
	d.next, d.nextTried = conn, now
	d.ctr.rehandshakes++
	d.t.log.Info("the server rejected our session (restarted?); new handshake started, the current session goes on meanwhile")
}

// pollNext handles the new handshake's events: established, it replaces
// the session; failed, it is dropped.
func (d *driverState) pollNext() {
	for d.next != nil {
		ev, ok := d.next.PollEvent()
		if !ok {
			return
		}
		switch ev.Kind {
		case tunnel.EventEstablished:
			d.switchConn()
		case tunnel.EventClosed:
			d.t.log.Info("new handshake failed; keeping the current session", "err", ev.Err)
			d.next, d.nextPeer = nil, netip.AddrPort{}
		}
	}
}

// switchConn makes the new handshake's Conn the tunnel's. The streams of
// the old session are reset (their state at the far edge is gone):
// Reads and Writes fail with a *StreamError with CodePeerRestarted, opens
// waiting for an answer fail as unreachable (the client retries its SYN,
// which opens a stream on the new session).
func (d *driverState) switchConn() {
	old := d.conn
	for s := range d.parked { // what the old session put in them was read
		d.takeParked(s)
	}
	d.conn, d.next = d.next, nil
	if !d.t.client {
		d.peer, d.nextPeer = d.nextPeer, netip.AddrPort{}
		d.ctr.clientRestarts++
	}
	for id, s := range d.streams {
		s.d.gone = true
		if !s.peerReset.Load() {
			s.markPeerReset(CodePeerRestarted)
		}
		if !s.d.stopped {
			s.d.stopped, s.d.stopCode = true, CodePeerRestarted
		}
		if s.opened != nil && !s.d.answered {
			s.d.answered = true
			s.opened <- wire.OpenUnreachable // capacity 1, never sent yet
		}
		delete(d.streams, id)
		d.continueRead(s)
		signal(s.writable)
	}
	d.t.log.Info("new session with the peer established; streams of the old one reset",
		"peer", d.peer, "old_packets_received", old.Stats().PacketsReceived)
}
