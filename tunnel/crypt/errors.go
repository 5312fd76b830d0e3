package crypt

import "errors"

// Sentinel errors. Functions wrap them with context; test with errors.Is.
// None of them ever carries secret key material (a PeerError names the
// initiator's public key).
var (
	// ErrAuth: a handshake message or packet did not authenticate. It was
	// corrupted, forged, sealed for another peer or under another key.
	// Drop it.
	ErrAuth = errors.New("crypt: authentication failed (corrupted, forged or wrong key); drop the message")

	// ErrReplay: a handshake message 1 whose timestamp is not newer than
	// the last one accepted from that key, or a packet whose number was
	// already opened or is older than the replay window. Drop it.
	ErrReplay = errors.New("crypt: replayed or stale message; drop it")

	// ErrUnknownPeer: a handshake from a static key the allow-list rejects.
	// Add the peer's public key to the configuration if it should connect.
	ErrUnknownPeer = errors.New("crypt: peer's static key is not on the allow-list; add its public key to the configuration if it should connect")

	// ErrMalformed: a handshake message has the wrong length. Drop it.
	ErrMalformed = errors.New("crypt: malformed handshake message; drop it")

	// ErrUnknownIndex: a handshake message 2 names a receiver index that
	// is not the pending handshake's. Drop it.
	ErrUnknownIndex = errors.New("crypt: handshake message for an unknown index; drop it")

	// ErrNoHandshake: Initiator.Consume was called with no handshake
	// pending. Call Begin first.
	ErrNoHandshake = errors.New("crypt: no handshake pending; call Begin first")

	// ErrExpired: message 2 arrived more than HandshakeTimeout after
	// Begin. The pending handshake is dropped; call Begin again.
	ErrExpired = errors.New("crypt: handshake expired; start a new one")

	// ErrPacketNumber: Seal was asked to reuse a packet number, or the
	// packet number space is exhausted. Packet numbers must strictly
	// increase; reusing one would reuse a nonce. Rekey before 2^64-1.
	ErrPacketNumber = errors.New("crypt: packet number not above the last sealed one (nonce reuse refused); use strictly increasing packet numbers")

	// ErrBadKey: a configured key cannot be used (for example a low-order
	// X25519 point). Check the configuration.
	ErrBadKey = errors.New("crypt: unusable key; check the configured key")
)
