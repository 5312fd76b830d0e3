package crypt

import (
	"crypto/cipher"
	"crypto/subtle"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/netip"
	"time"

	"golang.org/x/crypto/blake2s"
	"golang.org/x/crypto/chacha20poly1305"

	"github.com/wanopt/wanopt/internal/monotime"
)

// Handshake denial-of-service protection, after WireGuard's (section 5.4.4
// of its paper): an initiation datagram ends with two MACs.
//
//	mac1 = BLAKE2s-128(key: BLAKE2s-256("mac1----" || responder's public key),
//	                   the datagram up to mac1)
//	mac2 = BLAKE2s-128(key: the cookie, the datagram up to mac2), or 16 zero
//	       bytes without a fresh cookie
//
// mac1 costs a responder a hash, not a Diffie-Hellman, to drop datagrams
// from anyone who does not know its public key. Under load a responder
// also wants mac2: an initiation without a valid one gets a cookie reply
// instead of an answer. The cookie is a MAC of the initiation's source
// address and port under a secret that changes every two minutes, so
// only a sender that receives datagrams at that address can use it. The
// reply carries the cookie encrypted (XChaCha20-Poly1305, key
// BLAKE2s-256("cookie--" || responder's public key), the initiation's
// mac1 as additional data), so only the initiator of that initiation can
// read it.
//
// A cookie reply, after its 5-byte header, is CookieReplySize bytes:
//
//	offset size  field
//	0      24    nonce (random)
//	24     32    cookie, encrypted: 16 + 16 tag
const (
	// MACSize is the length of mac1 and of mac2.
	MACSize = 16
	// MACsSize is what the MACs add to an initiation datagram.
	MACsSize = 2 * MACSize
	// CookieReplySize is the length of a cookie reply after its header.
	CookieReplySize = chacha20poly1305.NonceSizeX + MACSize + TagSize

	// CookieSecretLife is how long a responder's cookie secret lasts, and
	// so a cookie. An initiator uses a cookie for a little less, so that a
	// cookie made just before the secret changed is not sent after it.
	CookieSecretLife = 2 * time.Minute
	cookieUseLife    = CookieSecretLife - 5*time.Second
)

var (
	labelMAC1   = []byte("mac1----")
	labelCookie = []byte("cookie--")
)

// ErrCookie reports a cookie reply that does not decrypt: forged, corrupted
// or for another initiation.
var ErrCookie = errors.New("cookie reply does not authenticate")

// keyFor returns BLAKE2s-256(label || pub).
func keyFor(label []byte, pub PublicKey) [32]byte {
	h, _ := blake2s.New256(nil)
	h.Write(label)
	h.Write(pub[:])
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// mac writes BLAKE2s-128(key, msg) into out.
func mac(out *[MACSize]byte, key []byte, msg []byte) {
	k := newKeyedMAC(key)
	k.sum(out, msg)
}

// keyedMAC is BLAKE2s-128 under one key, kept for reuse (with its output
// buffer): the MACs checked for every initiation of a flood cost no
// allocation.
type keyedMAC struct {
	h   hash.Hash
	out [MACSize]byte
}

func newKeyedMAC(key []byte) keyedMAC {
	h, err := blake2s.New128(key)
	if err != nil { // only for a key longer than 32 bytes: a bug
		panic(err)
	}
	return keyedMAC{h: h}
}

// sum writes the MAC of msg into out.
func (k *keyedMAC) sum(out *[MACSize]byte, msg []byte) {
	k.h.Reset()
	k.h.Write(msg)
	*out = [MACSize]byte(k.h.Sum(k.out[:0]))
}

// CookieChecker is a responder's side: it checks the MACs of initiations
// and makes cookie replies. It is not safe for concurrent use.
type CookieChecker struct {
	mac1     keyedMAC
	aead     cipher.AEAD // seals cookie replies
	rand     io.Reader
	secret   [32]byte
	cookies  keyedMAC      // keyed by secret
	secretAt monotime.Time // when secret was drawn; zero: never
	src      [18]byte      // a source address and port, as the cookie covers it
}

// NewCookieChecker returns the checker of the responder whose public key is
// local. rand supplies the cookie secrets and reply nonces.
func NewCookieChecker(local PublicKey, rand io.Reader) *CookieChecker {
	mac1Key, cookieKey := keyFor(labelMAC1, local), keyFor(labelCookie, local)
	aead, _ := chacha20poly1305.NewX(cookieKey[:])
	return &CookieChecker{mac1: newKeyedMAC(mac1Key[:]), aead: aead, rand: rand}
}

// CheckMAC1 reports whether the initiation datagram d (ending with mac1 and
// mac2) carries a valid mac1: its sender knows this responder's public key.
func (c *CookieChecker) CheckMAC1(d []byte) bool {
	if len(d) < MACsSize {
		return false
	}
	var want [MACSize]byte
	c.mac1.sum(&want, d[:len(d)-MACsSize])
	return subtle.ConstantTimeCompare(want[:], d[len(d)-MACsSize:len(d)-MACSize]) == 1
}

// CheckMAC2 reports whether d carries a valid mac2 for a cookie made for
// src under the current secret. Check mac1 first.
func (c *CookieChecker) CheckMAC2(d []byte, src netip.AddrPort, now monotime.Time) bool {
	if len(d) < MACsSize || c.secretAt == 0 || now.Sub(c.secretAt) >= CookieSecretLife {
		return false
	}
	var cookie, want [MACSize]byte
	c.cookie(&cookie, src)
	mac(&want, cookie[:], d[:len(d)-MACSize])
	return subtle.ConstantTimeCompare(want[:], d[len(d)-MACSize:]) == 1
}

// cookie computes the cookie of src under the current secret.
func (c *CookieChecker) cookie(out *[MACSize]byte, src netip.AddrPort) {
	a := src.Addr().Unmap().As16()
	copy(c.src[:16], a[:])
	c.src[16], c.src[17] = byte(src.Port()>>8), byte(src.Port())
	c.cookies.sum(out, c.src[:])
}

// AppendReply appends to dst the body of a cookie reply (CookieReplySize
// bytes, after the header the caller writes) to the initiation d from src.
func (c *CookieChecker) AppendReply(dst, d []byte, src netip.AddrPort, now monotime.Time) ([]byte, error) {
	if len(d) < MACsSize {
		return dst, fmt.Errorf("cookie reply: initiation of %d bytes: %w", len(d), ErrMalformed)
	}
	if c.secretAt == 0 || now.Sub(c.secretAt) >= CookieSecretLife {
		if _, err := io.ReadFull(c.rand, c.secret[:]); err != nil {
			return dst, fmt.Errorf("cookie reply: reading randomness: %w", err)
		}
		c.cookies, c.secretAt = newKeyedMAC(c.secret[:]), now
	}
	var cookie [MACSize]byte
	c.cookie(&cookie, src)
	var nonce [chacha20poly1305.NonceSizeX]byte
	if _, err := io.ReadFull(c.rand, nonce[:]); err != nil {
		return dst, fmt.Errorf("cookie reply: reading randomness: %w", err)
	}
	dst = append(dst, nonce[:]...)
	return c.aead.Seal(dst, nonce[:], cookie[:], d[len(d)-MACsSize:len(d)-MACSize]), nil
}

// CookieGenerator is an initiator's side: it appends the MACs to its
// initiations and takes the cookies the responder sends. It is not safe for
// concurrent use.
type CookieGenerator struct {
	mac1     keyedMAC
	aead     cipher.AEAD   // opens cookie replies
	lastMAC1 [MACSize]byte // of the last initiation sent: a reply's AD
	sentAny  bool
	cookie   [MACSize]byte
	cookieAt monotime.Time // zero: none
}

// NewCookieGenerator returns the generator for initiations to the
// responder whose public key is remote.
func NewCookieGenerator(remote PublicKey) *CookieGenerator {
	mac1Key, cookieKey := keyFor(labelMAC1, remote), keyFor(labelCookie, remote)
	aead, _ := chacha20poly1305.NewX(cookieKey[:])
	return &CookieGenerator{mac1: newKeyedMAC(mac1Key[:]), aead: aead}
}

// AppendMACs appends mac1 and mac2 to the initiation datagram d (header and
// message 1) and returns it: mac2 is zero without a cookie younger than
// the responder's secret.
func (g *CookieGenerator) AppendMACs(d []byte, now monotime.Time) []byte {
	var m1, m2 [MACSize]byte
	g.mac1.sum(&m1, d)
	g.lastMAC1, g.sentAny = m1, true
	d = append(d, m1[:]...)
	if g.HasCookie(now) {
		mac(&m2, g.cookie[:], d)
	}
	return append(d, m2[:]...)
}

// ConsumeReply takes the body of a cookie reply (after its header). It
// fails with ErrMalformed for a wrong length and ErrCookie for a reply that
// does not decrypt against the last initiation sent; it never panics.
func (g *CookieGenerator) ConsumeReply(body []byte, now monotime.Time) error {
	if len(body) != CookieReplySize {
		return fmt.Errorf("cookie reply: %d bytes, want %d: %w", len(body), CookieReplySize, ErrMalformed)
	}
	if !g.sentAny {
		return fmt.Errorf("cookie reply before any initiation: %w", ErrCookie)
	}
	nonce, sealed := body[:chacha20poly1305.NonceSizeX], body[chacha20poly1305.NonceSizeX:]
	var cookie [MACSize]byte
	if _, err := g.aead.Open(cookie[:0], nonce, sealed, g.lastMAC1[:]); err != nil {
		return fmt.Errorf("cookie reply: %w", ErrCookie)
	}
	g.cookie, g.cookieAt = cookie, now
	return nil
}

// HasCookie reports whether the next initiation will carry a mac2.
func (g *CookieGenerator) HasCookie(now monotime.Time) bool {
	return g.cookieAt != 0 && now.Sub(g.cookieAt) < cookieUseLife
}
