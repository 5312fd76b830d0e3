package crypt

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/wanopt/wanopt/internal/seed"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the seed corpus files in testdata/fuzz")

// Fuzz fixtures are built once: the responder's key R allows the initiator
// key A, and has already accepted a message 1 from A with timestamp
// fuzzAcceptedStamp. S is a key R does not allow.
const fuzzAcceptedStamp = 1000

type fuzzFix struct {
	ikey, rkey, skey PrivateKey
	accepted         []byte
}

var fuzzFixture = sync.OnceValue(func() fuzzFix {
	must := func(err error) {
		if err != nil {
			panic(err) // deterministic inputs: cannot happen
		}
	}
	var fx fuzzFix
	var err error
	fx.ikey, err = GenerateKey(seed.ChaCha8(seedInitiatorKey))
	must(err)
	fx.rkey, err = GenerateKey(seed.ChaCha8(seedResponderKey))
	must(err)
	fx.skey, err = GenerateKey(seed.ChaCha8(seedStrangerKey))
	must(err)
	_, fx.accepted, err = newMessage1(fx.ikey, fx.rkey.PublicKey(), 1, fuzzAcceptedStamp, 300)
	must(err)
	return fx
})

// newFuzzResponder returns a fresh responder in the fuzz start state.
func newFuzzResponder(t *testing.T) *Responder {
	fx := fuzzFixture()
	r, err := NewResponder(fx.rkey, allowOnly(fx.ikey.PublicKey()), seed.ChaCha8(seedResponderEph))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Respond(nil, fx.accepted, 1, 1); err != nil {
		t.Fatalf("accepting the fixture message 1: %v", err)
	}
	return r
}

type responderSeed struct {
	name string
	msg  []byte
	want error // nil: accepted
}

func responderSeeds(t *testing.T) []responderSeed {
	f := fuzzFixture()
	rpub := f.rkey.PublicKey()
	_, fresh := message1(t, f.ikey, rpub, 5, 2000, 301)
	_, older := message1(t, f.ikey, rpub, 5, 999, 302)
	_, stranger := message1(t, f.skey, rpub, 5, 2000, 303)
	_, otherResponder := message1(t, f.ikey, f.skey.PublicKey(), 5, 2000, 304)
	tampered := append([]byte{}, fresh...)
	tampered[Message1Size-1] ^= 0x80
	return []responderSeed{
		{"valid-fresh", fresh, nil},
		{"replay-accepted", f.accepted, ErrReplay},
		{"replay-older", older, ErrReplay},
		{"unknown-peer", stranger, ErrUnknownPeer},
		{"wrong-responder", otherResponder, ErrAuth},
		{"tampered", tampered, ErrAuth},
		{"truncated", fresh[:Message1Size-1], ErrMalformed},
		{"empty", []byte{}, ErrMalformed},
	}
}

// FuzzResponderConsume feeds arbitrary bytes to a responder as message 1.
// It must not panic; on error it must answer nothing and keep its state; it
// may succeed only for a genuine message (from the seed corpus), and then
// the same bytes must be refused as a replay.
func FuzzResponderConsume(f *testing.F) {
	// Seeds live in testdata/fuzz/FuzzResponderConsume.
	f.Fuzz(func(t *testing.T, msg []byte) {
		fx := fuzzFixture()
		r := newFuzzResponder(t)
		keys := []PublicKey{fx.ikey.PublicKey(), fx.skey.PublicKey(), fx.rkey.PublicKey()}
		before := responderState(r, keys)

		m2, s, err := r.Respond(nil, msg, 9, 1)
		if err != nil {
			if m2 != nil || s != nil {
				t.Fatalf("error %v with an answer or a session", err)
			}
			if !isOneOf(err, ErrMalformed, ErrAuth, ErrUnknownPeer, ErrReplay) {
				t.Fatalf("error %v is not a documented sentinel", err)
			}
			if after := responderState(r, keys); after != before {
				t.Fatalf("state changed on error %v: %v -> %v", err, before, after)
			}
			return
		}
		if len(m2) != Message2Size || len(m2) > len(msg) {
			t.Fatalf("answer of %d bytes to %d bytes", len(m2), len(msg))
		}
		if s.Peer() != fx.ikey.PublicKey() {
			t.Fatalf("session with %v, which is not allowed", s.Peer())
		}
		if _, _, err := r.Respond(nil, msg, 9, 1); !errors.Is(err, ErrReplay) {
			t.Fatalf("same message 1 again: error = %v, want ErrReplay", err)
		}
	})
}

func responderState(r *Responder, keys []PublicKey) (st [3]struct {
	t  Timestamp
	ok bool
}) {
	for i, k := range keys {
		st[i].t, st[i].ok = r.LastTimestamp(k)
	}
	return st
}

func isOneOf(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// FuzzOpen keys: fixed, from a seeded reader. The receiver has already
// opened packet fuzzOpenedPN.
const fuzzOpenedPN = 10_000

var fuzzKeys = sync.OnceValue(func() (k [2][KeySize]byte) {
	r := seed.ChaCha8(400)
	r.Read(k[0][:])
	r.Read(k[1][:])
	return k
})

func fuzzSessions(t *testing.T) (sender, receiver *Session) {
	k := fuzzKeys()
	sender, receiver = newSession(k[0], k[1], SuiteChaCha20Poly1305), newSession(k[1], k[0], SuiteChaCha20Poly1305)
	pre, err := newSession(k[0], k[1], SuiteChaCha20Poly1305).Seal(nil, []byte("pre"), []byte("already opened"), fuzzOpenedPN)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := receiver.Open(nil, []byte("pre"), pre, fuzzOpenedPN); err != nil {
		t.Fatal(err)
	}
	return sender, receiver
}

type openSeed struct {
	name       string
	header, ct []byte
	pn         uint64
	want       error
}

func openSeeds(t *testing.T) []openSeed {
	k := fuzzKeys()
	seal := func(header, payload string, pn uint64) []byte {
		ct, err := newSession(k[0], k[1], SuiteChaCha20Poly1305).Seal(nil, []byte(header), []byte(payload), pn)
		if err != nil {
			t.Fatal(err)
		}
		return ct
	}
	valid := seal("hdr", "a payload", fuzzOpenedPN+1)
	tampered := append([]byte{}, valid...)
	tampered[0] ^= 1
	return []openSeed{
		{"valid", []byte("hdr"), valid, fuzzOpenedPN + 1, nil},
		{"valid-reordered", []byte{0x41, 0, 0, 0, 1}, seal("\x41\x00\x00\x00\x01", "late", fuzzOpenedPN-1000), fuzzOpenedPN - 1000, nil},
		{"valid-empty-payload", nil, seal("", "", fuzzOpenedPN+5), fuzzOpenedPN + 5, nil},
		{"replay-opened", []byte("pre"), seal("pre", "already opened", fuzzOpenedPN), fuzzOpenedPN, ErrReplay},
		{"too-old", []byte("hdr"), seal("hdr", "old", 1000), 1000, ErrReplay},
		{"tampered-ciphertext", []byte("hdr"), tampered, fuzzOpenedPN + 1, ErrAuth},
		{"tampered-header", []byte("hdR"), valid, fuzzOpenedPN + 1, ErrAuth},
		{"wrong-pn", []byte("hdr"), valid, fuzzOpenedPN + 2, ErrAuth},
		{"short", []byte("hdr"), valid[:TagSize-1], fuzzOpenedPN + 1, ErrAuth},
	}
}

// FuzzOpen feeds arbitrary packets to Session.Open. It must not panic; it
// may succeed only for what the peer really sealed, and then never twice;
// a rejected packet must not stop the genuine packet with that number.
func FuzzOpen(f *testing.F) {
	// Seeds live in testdata/fuzz/FuzzOpen.
	f.Fuzz(func(t *testing.T, header, ct []byte, pn uint64) {
		sender, receiver := fuzzSessions(t)
		buf := append([]byte{}, ct...)
		pt, err := receiver.Open(buf[:0], header, buf, pn)
		if err == nil {
			if want, _ := sender.Seal(nil, header, pt, pn); !bytes.Equal(want, ct) {
				t.Fatal("opened a packet the sender did not seal")
			}
			if _, err := receiver.Open(nil, header, ct, pn); !errors.Is(err, ErrReplay) {
				t.Fatalf("opening it again: error = %v, want ErrReplay", err)
			}
			return
		}
		replayed := pn == fuzzOpenedPN || fuzzOpenedPN-pn >= ReplayWindowSize && pn < fuzzOpenedPN
		if wantErr := map[bool]error{true: ErrReplay, false: ErrAuth}[replayed]; !errors.Is(err, wantErr) {
			t.Fatalf("Open(pn %d) error = %v, want %v", pn, err, wantErr)
		}
		if pn == 1<<64-1 {
			return // Seal refuses the reserved number
		}
		genuine, err := sender.Seal(nil, header, []byte("genuine"), pn)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := receiver.Open(nil, header, genuine, pn); (err == nil) == replayed {
			t.Fatalf("genuine packet %d after a rejected one: error = %v, replayed %v", pn, err, replayed)
		}
	})
}

// TestFuzzSeedCorpus checks that each seed does what its name says and that
// the files in testdata/fuzz match; -update-corpus rewrites them.
func TestFuzzSeedCorpus(t *testing.T) {
	files := map[string]string{}
	for _, s := range responderSeeds(t) {
		_, _, err := newFuzzResponder(t).Respond(nil, s.msg, 9, 1)
		if !errors.Is(err, s.want) || (s.want == nil) != (err == nil) {
			t.Errorf("responder seed %s: error = %v, want %v", s.name, err, s.want)
		}
		files[filepath.Join("FuzzResponderConsume", s.name)] = fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.msg)
	}
	for _, s := range openSeeds(t) {
		_, receiver := fuzzSessions(t)
		_, err := receiver.Open(nil, s.header, s.ct, s.pn)
		if !errors.Is(err, s.want) || (s.want == nil) != (err == nil) {
			t.Errorf("open seed %s: error = %v, want %v", s.name, err, s.want)
		}
		files[filepath.Join("FuzzOpen", s.name)] = fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n[]byte(%q)\nuint64(%d)\n", s.header, s.ct, s.pn)
	}
	for name, content := range files {
		seedFile(t, name, content)
	}
}

// seedFile checks that testdata/fuzz/name holds content, or writes it
// with -update-corpus.
func seedFile(t *testing.T, name, content string) {
	t.Helper()
	path := filepath.Join("testdata", "fuzz", name)
	if *updateCorpus {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != content {
		t.Errorf("%s is missing or stale (%v); run: go test ./tunnel/crypt -run 'SeedCorpus' -update-corpus", path, err)
	}
}
