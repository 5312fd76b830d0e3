package crypt

import (
	"encoding/binary"
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

	msg1PayloadSize = 8 + 4 // timestamp, sender index
	msg2PayloadSize = 4     // sender index

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

// prologue binds the handshake to this protocol version.
var prologue = []byte("wanopt tunnel v1")

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

func putMsg1Payload(p *[msg1PayloadSize]byte, stamp Timestamp, index uint32) {
	binary.BigEndian.PutUint64(p[0:8], uint64(stamp))
	binary.BigEndian.PutUint32(p[8:12], index)
}

func parseMsg1Payload(p []byte) (stamp Timestamp, index uint32) {
	return Timestamp(binary.BigEndian.Uint64(p[0:8])), binary.BigEndian.Uint32(p[8:12])
}
