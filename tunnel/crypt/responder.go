package crypt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/flynn/noise"
	"github.com/wanopt/wanopt/internal/monotime"
)

// Responder answers handshakes addressed to one local static key. It
// keeps, for each allowed peer key that completed a handshake, the last
// message 1 timestamp it accepted, so a replayed message 1 gets no answer.
// The map grows only with authenticated, allowed keys.
//
// The map lives in memory: after a restart an old message 1 can be
// answered once more. That session is useless to an attacker (it lacks
// the initiator's ephemeral secret), but the caller should keep sending
// on a peer's previous session until the new one has opened a packet from
// the peer (key confirmation), as WireGuard does.
//
// Respond is safe for concurrent use if the allow function and the random
// source are (crypto/rand.Reader is).
type Responder struct {
	local    PrivateKey
	localPub PublicKey
	allow    func(PublicKey) bool
	rand     io.Reader
	suites   Suites // accepted (localSuites; tests change it)

	stamps *Timestamps
}

// Timestamps remembers, for each initiator key, the newest message 1
// timestamp a responder accepted. A responder that keeps one for its
// process's life (shared between connections: Responder.ShareTimestamps)
// answers no initiation twice. Its size is bounded by the allow-list.
// Safe for concurrent use.
type Timestamps struct {
	mu   sync.Mutex
	last map[PublicKey]Timestamp
}

// NewTimestamps returns an empty memory.
func NewTimestamps() *Timestamps { return &Timestamps{last: make(map[PublicKey]Timestamp)} }

// Last returns the newest timestamp accepted from peer, and whether one was.
func (ts *Timestamps) Last(peer PublicKey) (Timestamp, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t, ok := ts.last[peer]
	return t, ok
}

// fresh reports whether stamp is newer than the last accepted from peer.
func (ts *Timestamps) fresh(peer PublicKey, stamp Timestamp) bool {
	last, ok := ts.Last(peer)
	return !ok || stamp > last
}

// accept records stamp for peer if it is still the newest, and reports
// whether it was.
func (ts *Timestamps) accept(peer PublicKey, stamp Timestamp) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if last, ok := ts.last[peer]; ok && stamp <= last {
		return false
	}
	ts.last[peer] = stamp
	return true
}

// NewResponder returns a Responder for the local static key. allow is the
// policy: it reports whether a peer's static key may connect (an
// allow-list). rand supplies ephemeral keys (crypto/rand.Reader in
// production).
func NewResponder(local PrivateKey, allow func(PublicKey) bool, rand io.Reader) (*Responder, error) {
	if allow == nil {
		return nil, errors.New("new responder: nil allow policy; pass a function that checks the allow-list")
	}
	if rand == nil {
		return nil, errors.New("new responder: nil random source; pass crypto/rand.Reader")
	}
	return &Responder{
		local:    local,
		localPub: local.PublicKey(),
		allow:    allow,
		rand:     rand,
		suites:   localSuites(),
		stamps:   NewTimestamps(),
	}, nil
}

// ShareTimestamps makes the responder check and record message 1
// timestamps in ts, shared with other responders (of other connections
// with the same peers). Call it before the first Respond.
func (r *Responder) ShareTimestamps(ts *Timestamps) { r.stamps = ts }

// PublicKey returns the responder's static public key.
func (r *Responder) PublicKey() PublicKey { return r.localPub }

// LastTimestamp returns the last message 1 timestamp accepted from peer, and
// whether one was.
func (r *Responder) LastTimestamp(peer PublicKey) (Timestamp, bool) { return r.stamps.Last(peer) }

// Respond processes handshake message 1 (the bytes after the type byte).
// On success it appends message 2 (Message2Size bytes) to dst and returns
// it with the new Session, whose local index is index (this side's sender
// index, chosen by the caller) and created time now.
//
// Error contract: on any error the Responder's state is unchanged, nothing
// is appended and nothing must be sent back. The errors are ErrMalformed
// (wrong length, no cryptography done), ErrAuth (does not authenticate:
// forged, corrupted, or for another responder key), ErrUnknownPeer (the
// allow policy rejects the initiator's key) and ErrReplay (timestamp not
// newer than the last accepted from that key). State advances (the key's
// timestamp is recorded) only when Respond returns a nil error.
//
// Bad bytes never panic.
func (r *Responder) Respond(dst, msg1 []byte, index uint32, now monotime.Time) ([]byte, *Session, error) {
	return r.RespondHeld(dst, msg1, index, now, false)
}

// RespondHeld is Respond for a responder that holds an established session
// with the initiator (held): if message 1 asks for a rekey, message 2 says
// it is rekeyed (Session.Rekeyed at the initiator).
func (r *Responder) RespondHeld(dst, msg1 []byte, index uint32, now monotime.Time, held bool) ([]byte, *Session, error) {
	if len(msg1) != Message1Size {
		return nil, nil, fmt.Errorf("handshake message 1: %d bytes, want %d: %w", len(msg1), Message1Size, ErrMalformed)
	}
	cfg := handshakeConfig(r.local, r.localPub, false)
	cfg.Random = r.rand
	hs, err := noise.NewHandshakeState(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("handshake: %w", err)
	}
	payload, _, _, err := hs.ReadMessage(nil, msg1)
	if err != nil || len(payload) != msg1PayloadSize || len(hs.PeerStatic()) != KeySize {
		return nil, nil, fmt.Errorf("handshake message 1: %w", ErrAuth)
	}
	peer := PublicKey(hs.PeerStatic())
	if !r.allow(peer) {
		return nil, nil, &PeerError{Key: peer, Err: ErrUnknownPeer}
	}
	stamp, remoteIndex, offer, flags := parseMsg1Payload(payload)
	suite := choose(offer, r.suites)
	if suite == 0 {
		return nil, nil, fmt.Errorf("handshake message 1 from %v: offers no cipher suite this side has (offered %08b): %w", peer, offer, ErrMalformed)
	}
	if !r.stamps.fresh(peer, stamp) {
		return nil, nil, &PeerError{Key: peer, Err: ErrReplay}
	}

	start := len(dst)
	out := binary.BigEndian.AppendUint32(dst, remoteIndex)
	var reply [msg2PayloadSize]byte
	binary.BigEndian.PutUint32(reply[0:4], index)
	reply[4] = byte(suite)
	if held && flags&flagRekey != 0 {
		reply[5] = flagRekeyed
	}
	out, cs1, cs2, err := hs.WriteMessage(out, reply[:])
	if err != nil {
		return nil, nil, fmt.Errorf("handshake: writing message 2: %w", err)
	}
	if len(out)-start != Message2Size || cs1 == nil {
		return nil, nil, fmt.Errorf("handshake: message 2 is %d bytes, want %d", len(out)-start, Message2Size)
	}

	// Commit last, re-checking: a concurrent Respond may have accepted
	// the same or a newer message 1 meanwhile.
	if !r.stamps.accept(peer, stamp) {
		return nil, nil, &PeerError{Key: peer, Err: ErrReplay}
	}

	// Split: cs1 protects initiator to responder, cs2 the reverse.
	s := newSession(cs2.UnsafeKey(), cs1.UnsafeKey(), suite)
	s.peer = peer
	s.localIndex = index
	s.remoteIndex = remoteIndex
	s.created = now
	s.resume = flags&flagResume != 0
	s.rekey = flags&flagRekey != 0
	s.rekeyed = s.rekey && held
	return out, s, nil
}

// PeerError is a refusal of a message 1 that decrypted: the initiator's
// static key is known (Noise IK carries it encrypted to the responder), so
// the operator can be told which edge is knocking. Err is ErrUnknownPeer
// or ErrReplay. Errors.As finds it in Respond's errors.
type PeerError struct {
	Key PublicKey // the initiator's static public key
	Err error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("handshake message 1 from %v: %v", e.Key, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// InitiatorKey returns the static key of the initiator of msg1 (handshake
// message 1, the bytes after the type byte) addressed to local, whose
// public key is localPub, without checking its timestamp or answering:
// a server serving several peers on one socket uses it to route msg1. It
// costs the two Diffie-Hellman operations of reading message 1. Errors
// are ErrMalformed and ErrAuth, as Respond's.
func InitiatorKey(local PrivateKey, localPub PublicKey, msg1 []byte) (PublicKey, error) {
	if len(msg1) != Message1Size {
		return PublicKey{}, fmt.Errorf("handshake message 1: %d bytes, want %d: %w", len(msg1), Message1Size, ErrMalformed)
	}
	hs, err := noise.NewHandshakeState(handshakeConfig(local, localPub, false))
	if err != nil {
		return PublicKey{}, fmt.Errorf("handshake: %w", err)
	}
	payload, _, _, err := hs.ReadMessage(nil, msg1)
	if err != nil || len(payload) != msg1PayloadSize || len(hs.PeerStatic()) != KeySize {
		return PublicKey{}, fmt.Errorf("handshake message 1: %w", ErrAuth)
	}
	return PublicKey(hs.PeerStatic()), nil
}
