package crypt

import (
	"crypto/ecdh"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// KeySize is the length of X25519 private and public keys in bytes.
const KeySize = 32

// keyTextLen is the length of a key in standard padded base64.
const keyTextLen = 44

// keyEncoding is strict so every key has exactly one text form.
var keyEncoding = base64.StdEncoding.Strict()

// PublicKey is an X25519 public key. Its text form is standard base64 (44
// characters), as WireGuard writes keys. String prints only a short
// fingerprint; use Base64 or MarshalText for the full key.
type PublicKey [KeySize]byte

// PrivateKey is an X25519 private key. It never prints itself: String,
// GoString, every fmt verb and slog all give "<private key>". Base64 is the
// only way to obtain its text form (for the keygen command).
type PrivateKey [KeySize]byte

// GenerateKey reads 32 bytes from rand and returns them as a clamped X25519
// private key. Pass crypto/rand.Reader in production; tests inject a seeded
// reader.
func GenerateKey(rand io.Reader) (PrivateKey, error) {
	var k PrivateKey
	if rand == nil {
		return PrivateKey{}, errors.New("generate key: nil random source; pass crypto/rand.Reader")
	}
	if _, err := io.ReadFull(rand, k[:]); err != nil {
		return PrivateKey{}, fmt.Errorf("generate key: reading randomness: %w", err)
	}
	// Clamp as RFC 7748 does at use, so the stored key is canonical.
	k[0] &= 248
	k[31] = (k[31] & 127) | 64
	return k, nil
}

// PublicKey derives the public key of k.
func (k PrivateKey) PublicKey() PublicKey {
	var pub PublicKey
	priv, err := ecdh.X25519().NewPrivateKey(k[:])
	if err != nil {
		// Unreachable: X25519 accepts any 32-byte scalar.
		return pub
	}
	copy(pub[:], priv.PublicKey().Bytes())
	return pub
}

// IsZero reports whether k is all zeros (unset).
func (k PrivateKey) IsZero() bool { return k == PrivateKey{} }

// Base64 returns the key as 44 characters of standard base64. It exposes the
// secret: write it only to a key file or the keygen output, never to a log.
func (k PrivateKey) Base64() string { return keyEncoding.EncodeToString(k[:]) }

// String returns "<private key>", never the key.
func (PrivateKey) String() string { return "<private key>" }

// GoString returns "<private key>", never the key.
func (PrivateKey) GoString() string { return "<private key>" }

// Format makes every fmt verb (%v, %x, %d, %#v, ...) print "<private key>".
func (PrivateKey) Format(f fmt.State, _ rune) { io.WriteString(f, "<private key>") }

// LogValue makes slog print "<private key>".
func (PrivateKey) LogValue() slog.Value { return slog.StringValue("<private key>") }

// MarshalJSON returns "<private key>", so a configuration struct marshalled
// for display does not leak the key. There is no MarshalText on purpose:
// text encoders (slog's among them) would print the secret.
func (PrivateKey) MarshalJSON() ([]byte, error) { return []byte(`"<private key>"`), nil }

// UnmarshalText parses a base64 key, as ParsePrivateKey does (encoding/json
// uses it for JSON strings too).
func (k *PrivateKey) UnmarshalText(text []byte) error {
	p, err := ParsePrivateKey(string(text))
	if err != nil {
		return err
	}
	*k = p
	return nil
}

// IsZero reports whether k is all zeros (unset).
func (k PublicKey) IsZero() bool { return k == PublicKey{} }

// Base64 returns the full key as 44 characters of standard base64.
func (k PublicKey) Base64() string { return keyEncoding.EncodeToString(k[:]) }

// String returns a fingerprint: the first 8 characters of the base64 form,
// enough to tell configured peers apart in logs.
func (k PublicKey) String() string { return k.Base64()[:8] }

// MarshalText returns the full base64 form.
func (k PublicKey) MarshalText() ([]byte, error) { return []byte(k.Base64()), nil }

// UnmarshalText parses a base64 key, as ParsePublicKey does.
func (k *PublicKey) UnmarshalText(text []byte) error {
	p, err := ParsePublicKey(string(text))
	if err != nil {
		return err
	}
	*k = p
	return nil
}

// ParsePublicKey parses 44 characters of standard base64 (surrounding white
// space is ignored). Errors say what is wrong without echoing the input.
func ParsePublicKey(s string) (PublicKey, error) {
	b, err := parseKey("public key", s)
	return PublicKey(b), err
}

// ParsePrivateKey parses 44 characters of standard base64 (surrounding white
// space is ignored). Errors never echo the input, which is a secret.
func ParsePrivateKey(s string) (PrivateKey, error) {
	b, err := parseKey("private key", s)
	return PrivateKey(b), err
}

func parseKey(what, s string) ([KeySize]byte, error) {
	var k [KeySize]byte
	s = strings.TrimSpace(s)
	if len(s) != keyTextLen {
		return k, fmt.Errorf("%s: want %d base64 characters (%d bytes), got %d characters", what, keyTextLen, KeySize, len(s))
	}
	var buf [keyTextLen / 4 * 3]byte
	n, err := keyEncoding.Decode(buf[:], []byte(s))
	var corrupt base64.CorruptInputError
	switch {
	case errors.As(err, &corrupt):
		return k, fmt.Errorf("%s: invalid standard base64 at character %d (want A-Z a-z 0-9 + / and one trailing =)", what, int64(corrupt)+1)
	case err != nil:
		return k, fmt.Errorf("%s: invalid standard base64", what)
	case n != KeySize:
		return k, fmt.Errorf("%s: want %d bytes, got %d after base64 decoding (a key is 43 characters and one '=')", what, KeySize, n)
	}
	copy(k[:], buf[:n])
	return k, nil
}

// sharedOK reports whether DH(local, remote) gives a usable (not all-zero)
// result, i.e. remote is not a low-order point.
func sharedOK(local PrivateKey, remote PublicKey) bool {
	priv, err := ecdh.X25519().NewPrivateKey(local[:])
	if err != nil {
		return false
	}
	pub, err := ecdh.X25519().NewPublicKey(remote[:])
	if err != nil {
		return false
	}
	_, err = priv.ECDH(pub)
	return err == nil
}
