package tunnel

import (
	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// Rekeying. After Config.RekeyAfter (or RekeyAfterPackets sealed) the
// client handshakes again inside the established connection, with the
// rekey flag and a new index, while both sides go on with the old keys.
// The server's driver answers through a successor Conn and hands the new
// session to the established Conn (AcceptRekey), which sends the answer
// and keeps the old keys until the client's first packet under the new
// ones. The client switches when the answer arrives. Each side keeps the
// previous session to open packets still in flight; packet numbers, and
// so streams, loss recovery and congestion control, go on. An answer
// without the rekeyed flag means the server restarted: the client closes
// with ErrPeerLostSession.

// scheduleRekey sets when the client's current session is due for a rekey.
func (c *Conn) scheduleRekey(now monotime.Time) {
	c.sessSent = 0
	c.stats.KeysAt = now
	if c.client && c.cfg.RekeyAfter > 0 {
		c.rekeyAt = now.Add(c.cfg.RekeyAfter)
	}
}

// rekeyDeadline is the client's next rekey moment: the retransmission of
// a pending rekey initiation, or when the session is due (0: none).
func (c *Conn) rekeyDeadline() monotime.Time {
	switch {
	case !c.client:
		return 0
	case c.rekeying:
		return c.hsNext
	}
	return c.rekeyAt
}

// pollRekey sends the server's answer to a rekey, or the client's rekey
// initiation when due.
func (c *Conn) pollRekey(now monotime.Time, buf []byte) int {
	if !c.client {
		return c.pollResponse(buf)
	}
	if !c.rekeying {
		due := c.rekeyAt != 0 && !now.Before(c.rekeyAt) || c.sessSent >= c.cfg.RekeyAfterPackets
		if !due {
			return 0
		}
		c.rekeying = true
		c.rekeyIndex = c.rng.Uint32()
		c.hsNext, c.hsInterval = now, DefaultHandshakeRetransmit
		c.initiator.SetRekey(true)
	}
	if now.Before(c.hsNext) {
		return 0
	}
	return c.appendInitiation(now, buf, c.rekeyIndex)
}

// handleRekeyResp completes the client's rekey: it switches to the new
// session at once (its next packet confirms the keys to the server).
func (c *Conn) handleRekeyResp(now monotime.Time, msg []byte) {
	sess, err := c.initiator.Consume(msg, now)
	if err != nil {
		c.stats.DroppedPackets++
		c.stats.DroppedUnauthenticated++
		return
	}
	c.stats.PacketsReceived++
	if !sess.Rekeyed() {
		// The old session is gone at the peer: a CLOSE under it would
		// not be read.
		c.terminate(ErrPeerLostSession)
		return
	}
	c.rekeying = false
	c.initiator.SetRekey(false)
	c.prevSess, c.sess = c.sess, sess
	c.stats.Rekeys++
	c.scheduleRekey(now)
	c.pingPending = true
}

// PeerRekeying (server) reports whether the initiation this Conn answered
// asked to rekey the established session (see AcceptRekey).
func (c *Conn) PeerRekeying() bool { return !c.client && c.sess != nil && c.sess.Rekey() }

// AcceptRekey (server) takes the rekeyed session from from, a successor
// that answered the client's rekey initiation, and sends its answer; it
// switches to the new keys when the client's first packet under them
// arrives. It reports false, changing nothing, when c is not established
// or from answered no rekey.
func (c *Conn) AcceptRekey(from *Conn) bool {
	if c.client || c.state != stateEstablished || from.sess == nil || !from.sess.Rekeyed() {
		return false
	}
	c.nextSess = from.sess
	c.hsResp = append(c.hsResp[:0], from.hsResp...)
	c.hsRespReady = true
	return true
}

// sessionFor returns the session whose local index is idx: the current
// one, the one before the last rekey, or the server's pending rekey.
func (c *Conn) sessionFor(idx uint32) *crypt.Session {
	switch {
	case c.sess != nil && c.sess.LocalIndex() == idx:
		return c.sess
	case c.nextSess != nil && c.nextSess.LocalIndex() == idx:
		return c.nextSess
	case c.prevSess != nil && c.prevSess.LocalIndex() == idx:
		return c.prevSess
	}
	return nil
}

// promote makes the server's pending rekeyed session the current one.
func (c *Conn) promote(now monotime.Time) {
	c.prevSess, c.sess, c.nextSess = c.sess, c.nextSess, nil
	c.stats.Rekeys++
	c.scheduleRekey(now)
}
