package crypt

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"math"

	"github.com/wanopt/wanopt/internal/monotime"
	"golang.org/x/crypto/chacha20poly1305"
)

// Session holds the keys of one completed handshake and protects packets in
// both directions with the suite the handshake chose (ChaCha20-Poly1305 or
// AES-256-GCM).
//
// Nonce: 4 zero bytes, then the packet number as a little-endian uint64.
// Additional data: the packet's cleartext header. Overhead: TagSize bytes.
//
// Concurrency: Seal uses only send-side state and Open only receive-side
// state, so one goroutine may Seal while another Opens. Calls to Seal must
// not overlap each other, nor calls to Open. The accessors are safe at any
// time.
type Session struct {
	peer        PublicKey
	localIndex  uint32
	remoteIndex uint32
	created     monotime.Time
	initiator   bool
	resume      bool // responder: message 1 carried flagResume
	rekey       bool // responder: message 1 carried flagRekey
	rekeyed     bool // message 2 carried flagRekeyed
	suite       Suite

	// Send side, used only by Seal.
	send      cipher.AEAD
	sendNonce [chacha20poly1305.NonceSize]byte // scratch; a field so it does not escape per call
	nextPN    uint64                           // lowest packet number Seal accepts

	// Receive side, used only by Open.
	recv      cipher.AEAD
	recvNonce [chacha20poly1305.NonceSize]byte
	window    ReplayWindow
}

// newSession builds a Session from the two directional keys of a Noise
// split, for suite (SuiteChaCha20Poly1305 or SuiteAES256GCM).
func newSession(sendKey, recvKey [KeySize]byte, suite Suite) *Session {
	return &Session{send: newAEAD(suite, sendKey), recv: newAEAD(suite, recvKey), suite: suite}
}

// newAEAD returns suite's AEAD with key. Both take 12-byte nonces and
// 16-byte tags, so the packet layout does not depend on the suite.
func newAEAD(suite Suite, key [KeySize]byte) cipher.AEAD {
	var a cipher.AEAD
	var err error
	switch suite {
	case SuiteAES256GCM:
		var b cipher.Block
		if b, err = aes.NewCipher(key[:]); err == nil {
			a, err = cipher.NewGCM(b)
		}
	default:
		a, err = chacha20poly1305.New(key[:])
	}
	if err != nil {
		// Unreachable: keys are always 32 bytes.
		panic("crypt: " + suite.String() + " rejected a 32-byte key: " + err.Error())
	}
	return a
}

// Suite returns the AEAD that protects the session's packets.
func (s *Session) Suite() Suite { return s.suite }

// Peer returns the peer's authenticated static public key.
func (s *Session) Peer() PublicKey { return s.peer }

// LocalIndex returns this side's index: the peer puts it in packets sent
// here, so the receiver can find the Session.
func (s *Session) LocalIndex() uint32 { return s.localIndex }

// RemoteIndex returns the peer's index, to put in packets sent to it.
func (s *Session) RemoteIndex() uint32 { return s.remoteIndex }

// Created returns the now passed to the handshake call that made the
// Session, for rekeying by age.
func (s *Session) Created() monotime.Time { return s.created }

// Resume reports, on the responder's side, that the initiator said it still
// holds an established session with this responder (Initiator.SetResume):
// a handshake prompted by a REJECT, not a restarted initiator.
func (s *Session) Resume() bool { return s.resume }

// Rekey reports, on the responder's side, that the initiator asked to
// rekey its established session (Initiator.SetRekey).
func (s *Session) Rekey() bool { return s.rekey }

// Rekeyed reports that the handshake rekeyed a session both sides held:
// the initiator asked (Initiator.SetRekey) and the responder held the
// session (RespondHeld). An initiator that asked and gets false knows the
// responder lost the connection.
func (s *Session) Rekeyed() bool { return s.rekeyed }

// IsInitiator reports whether this side sent handshake message 1.
func (s *Session) IsInitiator() bool { return s.initiator }

// NextPacketNumber returns the lowest packet number Seal accepts now.
func (s *Session) NextPacketNumber() uint64 { return s.nextPN }

// Seal encrypts and authenticates plaintext with packet number pn, binds
// header as additional data, appends the ciphertext and tag
// (len(plaintext)+TagSize bytes) to dst and returns the result.
//
// In place: pass dst = plaintext[:0] with TagSize bytes of spare capacity
// after plaintext, and the header may sit just before plaintext in the same
// buffer. Otherwise dst's spare capacity must not overlap plaintext. With
// enough capacity Seal does not allocate.
//
// pn must be greater than every packet number sealed before on this Session
// (the first may be 0), and below math.MaxUint64; otherwise Seal returns
// ErrPacketNumber, appends nothing and the Session is unchanged. This makes
// nonce reuse impossible through this API.
func (s *Session) Seal(dst, header, plaintext []byte, pn uint64) ([]byte, error) {
	if pn < s.nextPN || pn == math.MaxUint64 {
		return nil, ErrPacketNumber
	}
	s.nextPN = pn + 1
	binary.LittleEndian.PutUint64(s.sendNonce[4:], pn)
	return s.send.Seal(dst, s.sendNonce[:], plaintext, header), nil
}

// Open authenticates and decrypts ciphertext (which includes the tag) sealed
// by the peer with packet number pn and the same header, appends the
// plaintext to dst and returns it.
//
// In place: pass dst = ciphertext[:0]. Otherwise dst's spare capacity must
// not overlap ciphertext. With enough capacity in dst (always so in place)
// Open does not allocate, not even to reject a forgery.
//
// Errors, all returned without allocating: ErrReplay if pn was already
// opened or is older than the replay window (checked before any
// cryptography); ErrAuth if the packet does not authenticate. On error the
// replay window is unchanged, and with in-place use the bytes of ciphertext
// may have been overwritten. Only an authenticated packet marks pn as seen,
// so forged packets cannot move the window.
func (s *Session) Open(dst, header, ciphertext []byte, pn uint64) ([]byte, error) {
	if !s.window.Check(pn) {
		return nil, ErrReplay
	}
	if len(ciphertext) < TagSize {
		return nil, ErrAuth
	}
	binary.LittleEndian.PutUint64(s.recvNonce[4:], pn)
	out, err := s.recv.Open(dst, s.recvNonce[:], ciphertext, header)
	if err != nil {
		return nil, ErrAuth
	}
	s.window.Accept(pn)
	return out, nil
}
