package crypt

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/seed"
)

// initiation returns a datagram standing for an initiation: a 5-byte
// header and a message 1 (any bytes: the MACs do not look inside).
func initiation(seed byte) []byte {
	d := make([]byte, 5+Message1Size)
	for i := range d {
		d[i] = seed + byte(i)
	}
	return d
}

func TestCookieMACs(t *testing.T) {
	f := newFixture(t)
	rpub := f.rkey.PublicKey()
	chk := NewCookieChecker(rpub, seed.ChaCha8(1))
	gen := NewCookieGenerator(rpub)
	src := netip.MustParseAddrPort("198.51.100.1:4500")
	now := monotime.Time(time.Second)

	d := gen.AppendMACs(initiation(1), now)
	if len(d) != 5+Message1Size+MACsSize {
		t.Fatalf("AppendMACs: %d bytes", len(d))
	}
	if !chk.CheckMAC1(d) {
		t.Fatal("mac1 of a genuine initiation does not check")
	}
	if chk.CheckMAC2(d, src, now) {
		t.Fatal("mac2 checks without a cookie")
	}
	// mac1 binds the bytes and the responder's key.
	bad := bytes.Clone(d)
	bad[10] ^= 1
	if chk.CheckMAC1(bad) {
		t.Error("mac1 checks after a byte changed")
	}
	if other := NewCookieChecker(f.skey.PublicKey(), seed.ChaCha8(2)); other.CheckMAC1(d) {
		t.Error("mac1 checks at another responder")
	}

	// Under load: the cookie reply goes back; the next initiation has mac2.
	body, err := chk.AppendReply(nil, d, src, now)
	if err != nil || len(body) != CookieReplySize {
		t.Fatalf("AppendReply: %d bytes, %v", len(body), err)
	}
	if 5+len(body) >= len(d) {
		t.Errorf("a cookie reply (%d bytes) is not smaller than the initiation (%d)", 5+len(body), len(d))
	}
	if err := gen.ConsumeReply(body, now); err != nil {
		t.Fatalf("ConsumeReply: %v", err)
	}
	d2 := gen.AppendMACs(initiation(2), now.Add(time.Millisecond))
	if !chk.CheckMAC1(d2) || !chk.CheckMAC2(d2, src, now.Add(time.Millisecond)) {
		t.Fatal("the initiation after the cookie: mac2 does not check")
	}
	// The cookie is bound to the source address and port.
	if chk.CheckMAC2(d2, netip.MustParseAddrPort("198.51.100.1:4501"), now) || chk.CheckMAC2(d2, netip.MustParseAddrPort("198.51.100.2:4500"), now) {
		t.Error("mac2 checks from another source")
	}
	// It lasts as long as the secret.
	if chk.CheckMAC2(d2, src, now.Add(CookieSecretLife)) {
		t.Error("mac2 checks after the secret's life")
	}
	if gen.HasCookie(now.Add(CookieSecretLife)) {
		t.Error("the initiator still uses a cookie after the secret's life")
	}

	// A reply is bound to the initiation it answers (its mac1).
	stale, _ := chk.AppendReply(nil, d, src, now)
	gen.AppendMACs(initiation(3), now) // a newer initiation went out
	if err := gen.ConsumeReply(stale, now); !errors.Is(err, ErrCookie) {
		t.Errorf("a reply to an older initiation: %v; want ErrCookie", err)
	}
	if err := gen.ConsumeReply(stale[:10], now); !errors.Is(err, ErrMalformed) {
		t.Errorf("a truncated reply: %v; want ErrMalformed", err)
	}
}

// FuzzCookieReply: any bytes as a cookie reply body are refused without a
// panic unless they decrypt, and then a cookie is set.
func FuzzCookieReply(f *testing.F) {
	// Seeds live in testdata/fuzz/FuzzCookieReply.
	f.Fuzz(func(t *testing.T, body []byte) {
		gen, _, _ := cookieFixture()
		err := gen.ConsumeReply(body, 1)
		if err == nil && !gen.HasCookie(1) {
			t.Fatal("a reply was taken but no cookie is set")
		}
		if err != nil && !errors.Is(err, ErrCookie) && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v is neither ErrCookie nor ErrMalformed", err)
		}
	})
}

// cookieFixture returns a generator that sent one initiation, and a valid
// reply to it.
func cookieFixture() (*CookieGenerator, []byte, []byte) {
	rkey, _ := GenerateKey(seed.ChaCha8(seedResponderKey))
	gen := NewCookieGenerator(rkey.PublicKey())
	d := gen.AppendMACs(initiation(7), 1)
	chk := NewCookieChecker(rkey.PublicKey(), seed.ChaCha8(3))
	body, err := chk.AppendReply(nil, d, netip.MustParseAddrPort("198.51.100.1:4500"), 1)
	if err != nil {
		panic(err)
	}
	return gen, d, body
}

// TestCookieSeedCorpus checks the FuzzCookieReply seeds and keeps their
// files current (-update-corpus rewrites them).
func TestCookieSeedCorpus(t *testing.T) {
	_, _, valid := cookieFixture()
	flipped := bytes.Clone(valid)
	flipped[30] ^= 0x80
	for _, s := range []struct {
		name string
		body []byte
		want error
	}{
		{"valid", valid, nil},
		{"tampered", flipped, ErrCookie},
		{"truncated", valid[:CookieReplySize-1], ErrMalformed},
		{"empty", nil, ErrMalformed},
	} {
		gen, _, _ := cookieFixture()
		err := gen.ConsumeReply(s.body, 1)
		if !errors.Is(err, s.want) || (s.want == nil) != (err == nil) {
			t.Errorf("seed %s: %v; want %v", s.name, err, s.want)
		}
		seedFile(t, filepath.Join("FuzzCookieReply", s.name), fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.body))
	}
}

// BenchmarkCheckMAC1 is the cost of refusing junk that lacks mac1.
func BenchmarkCheckMAC1(b *testing.B) {
	rkey, _ := GenerateKey(seed.ChaCha8(seedResponderKey))
	chk := NewCookieChecker(rkey.PublicKey(), seed.ChaCha8(1))
	d := NewCookieGenerator(rkey.PublicKey()).AppendMACs(initiation(1), 1)
	b.ReportAllocs()
	for b.Loop() {
		chk.CheckMAC1(d)
	}
}
