package crypt

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"golang.org/x/crypto/curve25519"
)

func TestGenerateKeyDeterministicAndClamped(t *testing.T) {
	a, b := testKey(t, 42), testKey(t, 42)
	if a != b {
		t.Fatal("same seed gave different keys")
	}
	if c := testKey(t, 43); c == a {
		t.Fatal("different seeds gave the same key")
	}
	if a[0]&7 != 0 || a[31]&128 != 0 || a[31]&64 == 0 {
		t.Fatalf("key not clamped: first byte %#x, last byte %#x", a[0], a[31])
	}
	if _, err := GenerateKey(strings.NewReader("short")); err == nil {
		t.Fatal("GenerateKey with a short random source: want error")
	}
	if _, err := GenerateKey(nil); err == nil {
		t.Fatal("GenerateKey(nil): want error")
	}
}

func TestPublicKeyDerivation(t *testing.T) {
	// RFC 7748 section 6.1, Alice.
	priv := mustHex(t, "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
	want := mustHex(t, "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
	if got := PrivateKey(priv).PublicKey(); got != PublicKey(want) {
		t.Fatalf("RFC 7748 vector: got %x, want %x", got[:], want)
	}
	// Cross-check against x/crypto for generated keys.
	for seed := uint64(0); seed < 8; seed++ {
		k := testKey(t, seed)
		ref, err := curve25519.X25519(k[:], curve25519.Basepoint)
		if err != nil {
			t.Fatal(err)
		}
		if got := k.PublicKey(); !bytes.Equal(got[:], ref) {
			t.Fatalf("seed %d: PublicKey differs from curve25519.X25519", seed)
		}
	}
}

func mustHex(t *testing.T, s string) [KeySize]byte {
	t.Helper()
	var k [KeySize]byte
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKeyTextRoundTrip(t *testing.T) {
	priv := testKey(t, 5)
	pub := priv.PublicKey()

	gotPriv, err := ParsePrivateKey(priv.Base64())
	if err != nil || gotPriv != priv {
		t.Fatalf("ParsePrivateKey(Base64()) = ok %v, err %v", gotPriv == priv, err)
	}
	gotPub, err := ParsePublicKey(" " + pub.Base64() + "\n")
	if err != nil || gotPub != pub {
		t.Fatalf("ParsePublicKey(Base64() with white space) = %v, %v", gotPub, err)
	}

	var viaText PublicKey
	text, _ := pub.MarshalText()
	if err := viaText.UnmarshalText(text); err != nil || viaText != pub {
		t.Fatalf("PublicKey text round trip: %v", err)
	}
	var cfg struct {
		Private PrivateKey
		Public  PublicKey
	}
	in := fmt.Sprintf(`{"Private": %q, "Public": %q}`, priv.Base64(), pub.Base64())
	if err := json.Unmarshal([]byte(in), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Private != priv || cfg.Public != pub {
		t.Fatal("JSON decoding gave different keys")
	}
}

func TestParseKeyErrors(t *testing.T) {
	pub := testKey(t, 6).PublicKey().Base64()
	// The last character of a 32-byte key carries 2 unused bits; a
	// non-zero value there is a second spelling of the same key.
	last := strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", pub[42])
	nonCanonical := pub[:42] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[last|1]) + "="

	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "public key: want 44 base64 characters (32 bytes), got 0 characters"},
		{"short", pub[:43], "got 43 characters"},
		{"long", pub + "A", "got 45 characters"},
		{"hex", strings.Repeat("ab", 32), "got 64 characters"},
		{"bad character", "!" + pub[1:], "invalid standard base64 at character 1"},
		{"url alphabet", pub[:10] + "-" + pub[11:], "invalid standard base64 at character 11"},
		{"no padding", pub[:43] + "A", "want 32 bytes, got 33 after base64 decoding"},
		{"non-canonical", nonCanonical, "invalid standard base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePublicKey(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParsePublicKey(%q) error = %v, want it to contain %q", tt.in, err, tt.want)
			}
			_, err = ParsePrivateKey(tt.in)
			if err == nil || !strings.HasPrefix(err.Error(), "private key: ") {
				t.Fatalf("ParsePrivateKey error = %v, want a private key error", err)
			}
			if len(tt.in) > 8 && strings.Contains(err.Error(), tt.in[:8]) {
				t.Fatalf("error %q echoes the input", err)
			}
		})
	}
}

func TestPrivateKeyNeverPrints(t *testing.T) {
	priv := testKey(t, 7)
	secret := []string{priv.Base64(), hex.EncodeToString(priv[:]), fmt.Sprint(priv[:4])[1:8]}

	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("text", "key", priv)
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("json", "key", priv)
	js, _ := json.Marshal(struct{ Key PrivateKey }{priv})

	outputs := map[string]string{"slog": logs.String(), "json.Marshal": string(js)}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%b", "%o"} {
		outputs[verb] = fmt.Sprintf(verb, priv)
		outputs["struct "+verb] = fmt.Sprintf(verb, struct{ K PrivateKey }{priv})
	}
	for what, out := range outputs {
		for _, s := range secret {
			if strings.Contains(out, s) {
				t.Errorf("%s prints the private key: %s", what, out)
			}
		}
		if !strings.Contains(out, "private key") {
			t.Errorf("%s = %q, want it to say <private key>", what, out)
		}
	}
}

func TestPublicKeyStringIsFingerprint(t *testing.T) {
	pub := testKey(t, 8).PublicKey()
	if got, want := pub.String(), pub.Base64()[:8]; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	if got := fmt.Sprintf("%v", pub); got != pub.Base64()[:8] {
		t.Fatalf("%%v = %q, want the fingerprint", got)
	}
}
