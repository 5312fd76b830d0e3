// Package crypt authenticates wanopt peers and protects tunnel packets.
//
// It is sans-IO like the rest of the tunnel: no sockets, no goroutines, no
// clock reads. Time arrives as a monotime.Time argument, randomness as an
// io.Reader, and the caller moves the bytes.
//
// # Handshake
//
// Peers authenticate with static X25519 keys using the Noise IK pattern,
// Noise_IK_25519_ChaChaPoly_BLAKE2s, through github.com/flynn/noise.
// BLAKE2s is WireGuard's hash for the same DH and AEAD; the X25519
// operations dominate the cost. The prologue is "wanopt tunnel v3", so
// peers speaking another protocol version fail authentication instead of
// misparsing each other.
//
// The initiator knows the responder's static public key beforehand.
// Message 1 carries the initiator's ephemeral key, its static key
// (encrypted) and an encrypted payload: a timestamp, the initiator's
// sender index, the packet cipher suites it offers and flags. The
// responder checks the initiator's key against an injected allow-list and
// the timestamp against the last one it accepted from that key, and only
// then answers with message 2, which names the suite it chose: AES-256-GCM
// when both sides have AES instructions, else ChaCha20-Poly1305, which
// every peer offers. Both sides end with a Session. The offer and the
// choice are inside the Noise payloads, so nobody on the path can
// downgrade them.
//
// The functions here produce and consume the bytes that follow the packet
// type byte; the caller (tunnel/wire) prepends the type. Integers are big
// endian.
//
// Message 1, initiator to responder, Message1Size = 110 bytes:
//
//	offset size  field
//	0      32    ephemeral public key (cleartext, Noise "e")
//	32     48    static public key, encrypted: 32 + 16 tag (Noise "s")
//	80     30    payload, encrypted: 14 + 16 tag
//	              payload[0:8]  timestamp (uint64, must increase per key)
//	              payload[8:12] initiator's sender index (uint32)
//	              payload[12]   suites offered (Suites: bit s-1 for Suite s)
//	              payload[13]   flags: bit 0 resume (the initiator still
//	                            holds an established session with the
//	                            responder), bit 1 rekey (replace that
//	                            session's keys); other bits zero
//
// Message 2, responder to initiator, Message2Size = 58 bytes:
//
//	offset size  field
//	0      4     receiver index: the initiator's sender index (cleartext)
//	4      32    ephemeral public key (cleartext, Noise "e")
//	36     22    payload, encrypted: 6 + 16 tag
//	              payload[0:4] responder's sender index (uint32)
//	              payload[4]   suite chosen (Suite)
//	              payload[5]   flags: bit 0 rekeyed (the responder held
//	                            the session a rekey asked for)
//
// Message 2 is never longer than message 1, and the responder answers only
// a message 1 that authenticates, comes from an allowed key and carries a
// fresh timestamp, so the handshake cannot amplify traffic toward a
// spoofed address (a test asserts it). Initiations also carry mac1 and
// mac2 against floods (cookie.go).
//
// # Packets
//
// After the handshake, Session.Seal and Session.Open protect packets with
// the chosen suite. The nonce is 4 zero bytes followed by the 64-bit
// packet number in little-endian order (Noise's ChaChaPoly layout), for
// either suite; both have 16-byte tags. The additional data is every
// cleartext byte before the ciphertext (type byte, receiver index, packet
// number), so none of it can be altered. Each direction has its own key
// from the Noise split, so a packet reflected to its sender does not
// authenticate.
//
// Open checks the packet number against a sliding replay window
// (ReplayWindow) before decrypting, and marks it seen only after the
// packet has authenticated, so forged packets cannot move the window.
//
// Rekeying is a new handshake with the rekey flag (Initiator.SetRekey).
// A pre-shared key mode (IKpsk2) is not implemented.
package crypt
