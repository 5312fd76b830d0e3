package crypt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/flynn/noise"
	"github.com/wanopt/wanopt/internal/monotime"
)

// Initiator runs the initiating side of handshakes with one peer whose static
// public key is known. It is reused for every handshake (and rehandshake)
// with that peer; at most one handshake is pending at a time.
//
// An Initiator is not safe for concurrent use.
type Initiator struct {
	local    PrivateKey
	localPub PublicKey
	remote   PublicKey
	rand     io.Reader

	lastStamp Timestamp // last timestamp sent, valid if sentAny
	sentAny   bool
	suites    Suites // offered in message 1 (localSuites; tests change it)
	flags     byte   // message 1's flags (SetResume)

	// The pending handshake; hs is nil when none is pending. eph and
	// payload are kept so the state after message 1 can be rebuilt
	// exactly when a bad message 2 has disturbed it.
	hs      *noise.HandshakeState
	eph     [KeySize]byte
	payload [msg1PayloadSize]byte
	index   uint32
	started monotime.Time
}

// NewInitiator returns an Initiator that authenticates as local to the peer
// whose static key is remote. rand supplies ephemeral keys (crypto/rand.Reader
// in production). It fails with ErrBadKey if remote is a low-order point.
func NewInitiator(local PrivateKey, remote PublicKey, rand io.Reader) (*Initiator, error) {
	if rand == nil {
		return nil, errors.New("new initiator: nil random source; pass crypto/rand.Reader")
	}
	if !sharedOK(local, remote) {
		return nil, fmt.Errorf("new initiator: peer public key %v is a low-order point: %w", remote, ErrBadKey)
	}
	return &Initiator{local: local, localPub: local.PublicKey(), remote: remote, rand: rand, suites: localSuites()}, nil
}

// Peer returns the responder's static public key.
func (i *Initiator) Peer() PublicKey { return i.remote }

// SetResume marks the handshakes begun from now on as coming from an
// initiator that still holds an established session with the responder
// (Session.Resume on the responder's side).
func (i *Initiator) SetResume(on bool) { i.setFlag(flagResume, on) }

// SetRekey marks the handshakes begun from now on as rekeys of the
// established session (Session.Rekey on the responder's side; the
// responder's answer says whether it held the session: Session.Rekeyed).
func (i *Initiator) SetRekey(on bool) { i.setFlag(flagRekey, on) }

func (i *Initiator) setFlag(f byte, on bool) {
	i.flags &^= f
	if on {
		i.flags |= f
	}
}

// Pending reports whether a handshake awaits message 2.
func (i *Initiator) Pending() bool { return i.hs != nil }

// Begin starts a handshake, abandoning any pending one, and appends message
// 1 (Message1Size bytes) to dst. index is this side's sender index for the
// new session: the responder echoes it in message 2 and the caller uses it
// to route packets. stamp should be wall-clock Unix nanoseconds (see
// Timestamp); if it is not above the last one this Initiator sent, Begin
// uses the last one plus 1, so a clock stepping back within a process does
// not get handshakes rejected. now is the start time for HandshakeTimeout.
//
// On error (randomness failed, or timestamps exhausted) the Initiator is
// unchanged and nothing is appended.
func (i *Initiator) Begin(dst []byte, index uint32, stamp Timestamp, now monotime.Time) ([]byte, error) {
	if i.sentAny && stamp <= i.lastStamp {
		if i.lastStamp == math.MaxUint64 {
			return nil, errors.New("handshake: timestamps exhausted; use a fresh key")
		}
		stamp = i.lastStamp + 1
	}
	var eph [KeySize]byte
	if _, err := io.ReadFull(i.rand, eph[:]); err != nil {
		return nil, fmt.Errorf("handshake: reading randomness for the ephemeral key: %w", err)
	}
	var payload [msg1PayloadSize]byte
	putMsg1Payload(&payload, stamp, index, i.suites, i.flags)
	hs, msg, err := i.writeMessage1(dst, &eph, &payload)
	if err != nil {
		return nil, err
	}
	i.hs, i.eph, i.payload, i.index, i.started = hs, eph, payload, index, now
	i.lastStamp, i.sentAny = stamp, true
	return msg, nil
}

// writeMessage1 builds a fresh handshake state whose ephemeral key is eph
// and writes message 1 with payload. It is deterministic.
func (i *Initiator) writeMessage1(dst []byte, eph *[KeySize]byte, payload *[msg1PayloadSize]byte) (*noise.HandshakeState, []byte, error) {
	cfg := handshakeConfig(i.local, i.localPub, true)
	cfg.PeerStatic = i.remote[:]
	cfg.Random = bytes.NewReader(eph[:])
	hs, err := noise.NewHandshakeState(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("handshake: %w", err)
	}
	start := len(dst)
	msg, _, _, err := hs.WriteMessage(dst, payload[:])
	if err != nil {
		return nil, nil, fmt.Errorf("handshake: writing message 1: %w", err)
	}
	if len(msg)-start != Message1Size {
		return nil, nil, fmt.Errorf("handshake: message 1 is %d bytes, want %d", len(msg)-start, Message1Size)
	}
	return hs, msg, nil
}

// Consume processes message 2 and, on success, returns the new Session and
// forgets the pending handshake.
//
// Error contract (whether state advanced):
//   - ErrNoHandshake, ErrMalformed, ErrUnknownIndex, ErrAuth: nothing
//     changes; the pending handshake still accepts the genuine message 2,
//     so a forged or corrupted one cannot abort it.
//   - ErrExpired: more than HandshakeTimeout passed since Begin; the
//     pending handshake is dropped. Call Begin again.
//
// Bad bytes never panic.
func (i *Initiator) Consume(msg2 []byte, now monotime.Time) (*Session, error) {
	if i.hs == nil {
		return nil, ErrNoHandshake
	}
	if len(msg2) != Message2Size {
		return nil, fmt.Errorf("handshake message 2: %d bytes, want %d: %w", len(msg2), Message2Size, ErrMalformed)
	}
	if got := binary.BigEndian.Uint32(msg2[0:4]); got != i.index {
		return nil, fmt.Errorf("handshake message 2: receiver index %d, pending handshake has %d: %w", got, i.index, ErrUnknownIndex)
	}
	if now.Sub(i.started) > HandshakeTimeout {
		i.abandon()
		return nil, fmt.Errorf("handshake with %v: message 2 after %v: %w", i.remote, now.Sub(i.started), ErrExpired)
	}
	payload, cs1, cs2, err := i.hs.ReadMessage(nil, msg2[4:])
	if err != nil || cs1 == nil || len(payload) != msg2PayloadSize || !i.suites.has(Suite(payload[4])) {
		// A suite we did not offer cannot come from the genuine
		// responder, so it counts as a forgery too. flynn/noise does
		// not roll back every failure path, so rebuild the state after
		// message 1 from scratch.
		i.restore()
		return nil, fmt.Errorf("handshake message 2 from %v: %w", i.remote, ErrAuth)
	}
	s := newSession(cs1.UnsafeKey(), cs2.UnsafeKey(), Suite(payload[4]))
	s.peer = i.remote
	s.localIndex = i.index
	s.remoteIndex = binary.BigEndian.Uint32(payload[0:4])
	s.created = now
	s.initiator = true
	s.rekeyed = payload[5]&flagRekeyed != 0
	i.abandon()
	return s, nil
}

// restore rebuilds the handshake state as it was right after Begin.
func (i *Initiator) restore() {
	hs, _, err := i.writeMessage1(nil, &i.eph, &i.payload)
	if err != nil {
		i.abandon() // unreachable: it succeeded in Begin with the same input
		return
	}
	i.hs = hs
}

// abandon forgets the pending handshake.
func (i *Initiator) abandon() {
	i.hs = nil
	i.eph = [KeySize]byte{}
	i.payload = [msg1PayloadSize]byte{}
}
