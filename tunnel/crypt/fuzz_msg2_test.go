package crypt

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/seed"
)

// pendingInitiator returns an initiator with a handshake pending toward the
// fuzz responder (rekey asked), and the genuine message 2 answering it.
func pendingInitiator(tb testing.TB) (*Initiator, []byte) {
	fx := fuzzFixture()
	ini, err := NewInitiator(fx.ikey, fx.rkey.PublicKey(), seed.ChaCha8(seedInitiatorEph))
	if err != nil {
		tb.Fatal(err)
	}
	ini.SetRekey(true)
	m1, err := ini.Begin(nil, 5, 5000, monotime.Time(1))
	if err != nil {
		tb.Fatal(err)
	}
	r, err := NewResponder(fx.rkey, allowOnly(fx.ikey.PublicKey()), seed.ChaCha8(seedResponderEph))
	if err != nil {
		tb.Fatal(err)
	}
	m2, _, err := r.RespondHeld(nil, m1, 6, monotime.Time(2), true)
	if err != nil {
		tb.Fatal(err)
	}
	return ini, m2
}

// FuzzInitiatorConsume feeds arbitrary bytes to an initiator as message 2.
// It must not panic; only the genuine answer (from the seed corpus) makes a
// session, and a refused message leaves the handshake pending so the
// genuine one still completes it.
func FuzzInitiatorConsume(f *testing.F) {
	// Seeds live in testdata/fuzz/FuzzInitiatorConsume.
	f.Fuzz(func(t *testing.T, msg []byte) {
		ini, genuine := pendingInitiator(t)
		s, err := ini.Consume(msg, monotime.Time(3))
		if err == nil {
			if !bytes.Equal(msg, genuine) || !s.Rekeyed() {
				t.Fatalf("a session from a message 2 that is not the genuine one (rekeyed %v)", s.Rekeyed())
			}
			return
		}
		if !isOneOf(err, ErrMalformed, ErrAuth, ErrUnknownIndex) {
			t.Fatalf("error %v is not a documented sentinel", err)
		}
		if _, err := ini.Consume(genuine, monotime.Time(4)); err != nil {
			t.Fatalf("the genuine message 2 after a refused one: %v", err)
		}
	})
}

// TestInitiatorSeedCorpus checks the FuzzInitiatorConsume seeds and keeps
// their files current (-update-corpus rewrites them).
func TestInitiatorSeedCorpus(t *testing.T) {
	_, genuine := pendingInitiator(t)
	tampered := bytes.Clone(genuine)
	tampered[len(tampered)-1] ^= 0x80
	otherIndex := bytes.Clone(genuine)
	otherIndex[0] ^= 1
	for _, s := range []struct {
		name string
		msg  []byte
		want error
	}{
		{"genuine-rekeyed", genuine, nil},
		{"tampered", tampered, ErrAuth},
		{"other-index", otherIndex, ErrUnknownIndex},
		{"truncated", genuine[:Message2Size-1], ErrMalformed},
	} {
		ini, _ := pendingInitiator(t)
		_, err := ini.Consume(s.msg, monotime.Time(3))
		if !errors.Is(err, s.want) || (s.want == nil) != (err == nil) {
			t.Errorf("seed %s: %v; want %v", s.name, err, s.want)
		}
		seedFile(t, filepath.Join("FuzzInitiatorConsume", s.name), fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.msg))
	}
}
