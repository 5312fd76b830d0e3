package crypt

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/flynn/noise"
)

// ProtocolName is the Noise protocol the handshake runs.
const ProtocolName = "Noise_IK_25519_ChaChaPoly_BLAKE2s"

// Sizes of the handshake messages, excluding the packet type byte the
// caller prepends. See the package documentation for the layouts.
const (
	// TagSize is the Poly1305 authentication tag length.
	TagSize = 16

	msg1PayloadSize = 8 + 4 + 1 + 1 // timestamp, sender index, suites offered, flags
	msg2PayloadSize = 4 + 1 + 1     // sender index, suite chosen, flags

	// Message1Size is the exact length of handshake message 1.
	Message1Size = KeySize + (KeySize + TagSize) + (msg1PayloadSize + TagSize)

	// Message2Size is the exact length of handshake message 2. It is
	// never more than Message1Size (anti-amplification).
	Message2Size = 4 + KeySize + (msg2PayloadSize + TagSize)
)

// Anti-amplification, checked at compile time: the array length would be
// negative if message 2 grew longer than message 1.
var _ [Message1Size - Message2Size]struct{}

// HandshakeTimeout is how long after Begin the initiator accepts message 2.
// It bounds the life of the ephemeral secret; on a 600 ms path it leaves
// room for many retransmissions of message 1.
const HandshakeTimeout = 10 * time.Second

// Timestamp orders handshakes from one initiator key: the responder accepts
// message 1 only if its Timestamp is greater than the last one it accepted
// from that key. It must keep increasing across initiator restarts, so the
// driver passes wall-clock Unix nanoseconds (time.Now().UnixNano()); a
// counter persisted to disk works too. A monotime.Time does not: it restarts
// with the process. Like TAI64N it is a big-endian time, here in one uint64.
type Timestamp uint64

// prologue binds the handshake to this protocol version (v2 added the suite
// negotiation, v3 the flags of message 1).
var prologue = []byte("wanopt tunnel v3")

// Message 1's flags. flagResume says the initiator still holds an
// established session with this responder: it is handshaking again (its
// peer sent a REJECT), not starting a new connection after a restart.
// flagRekey asks to replace the keys of the established session, keeping
// the connection.
const (
	flagResume = 1
	flagRekey  = 2
)

// Message 2's flags. flagRekeyed says the responder held the session and
// rekeyed it: without it, an initiator that asked for a rekey knows the
// responder lost the connection (it restarted).
const flagRekeyed = 1

var suite = noise.NewCipherSuite(noise.DH25519, noise.CipherChaChaPoly, noise.HashBLAKE2s)

// handshakeConfig is the Noise configuration both roles share.
func handshakeConfig(local PrivateKey, localPub PublicKey, initiator bool) noise.Config {
	return noise.Config{
		CipherSuite:   suite,
		Pattern:       noise.HandshakeIK,
		Initiator:     initiator,
		Prologue:      prologue,
		StaticKeypair: noise.DHKey{Private: local[:], Public: localPub[:]},
	}
}

func putMsg1Payload(p *[msg1PayloadSize]byte, stamp Timestamp, index uint32, offer Suites, flags byte) {
	binary.BigEndian.PutUint64(p[0:8], uint64(stamp))
	binary.BigEndian.PutUint32(p[8:12], index)
	p[12] = byte(offer)
	p[13] = flags
}

func parseMsg1Payload(p []byte) (stamp Timestamp, index uint32, offer Suites, flags byte) {
	return Timestamp(binary.BigEndian.Uint64(p[0:8])), binary.BigEndian.Uint32(p[8:12]), Suites(p[12]), p[13]
}

// Suite is the AEAD that protects a session's packets, chosen in the
// handshake.
type Suite uint8

const (
	// SuiteChaCha20Poly1305 is fast in software everywhere; every peer
	// offers it.
	SuiteChaCha20Poly1305 Suite = 1
	// SuiteAES256GCM is about twice as fast where the CPU has AES and
	// carry-less multiply instructions (x86-64 AES-NI, ARMv8 crypto
	// extensions); BenchmarkSeal measures the suite this host picks.
	SuiteAES256GCM Suite = 2
)

func (s Suite) String() string {
	switch s {
	case SuiteChaCha20Poly1305:
		return "chacha20-poly1305"
	case SuiteAES256GCM:
		return "aes-256-gcm"
	}
	return fmt.Sprintf("suite(%d)", uint8(s))
}

// Suites is a set of suites, as offered in message 1: bit s-1 for suite s.
type Suites uint8

func (ss Suites) has(s Suite) bool { return s >= 1 && s <= 8 && ss&(1<<(s-1)) != 0 }

// suitesOf returns the set holding suites.
func suitesOf(suites ...Suite) Suites {
	var ss Suites
	for _, s := range suites {
		ss |= 1 << (s - 1)
	}
	return ss
}

// localSuites is what this host offers and accepts: AES-256-GCM only with
// the instructions that make it fast (and constant-time).
func localSuites() Suites {
	if hasAESHardware() {
		return suitesOf(SuiteChaCha20Poly1305, SuiteAES256GCM)
	}
	return suitesOf(SuiteChaCha20Poly1305)
}

// choose is the responder's pick: AES-256-GCM when both sides have it,
// else ChaCha20-Poly1305; 0 when the offer holds neither.
func choose(offer, local Suites) Suite {
	both := offer & local
	switch {
	case both.has(SuiteAES256GCM):
		return SuiteAES256GCM
	case both.has(SuiteChaCha20Poly1305):
		return SuiteChaCha20Poly1305
	}
	return 0
}
