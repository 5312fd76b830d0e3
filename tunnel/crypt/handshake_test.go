package crypt

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/seed"
)

func TestHandshake(t *testing.T) {
	f := newFixture(t)
	ipub, rpub := f.ikey.PublicKey(), f.rkey.PublicKey()
	ini, err := NewInitiator(f.ikey, rpub, seed.ChaCha8(seedInitiatorEph))
	if err != nil {
		t.Fatal(err)
	}
	prefix := []byte{0xAA} // stands for the type byte the caller writes
	m1, err := ini.Begin(prefix, 0x01020304, 1000, monotime.Time(10))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m1[:1], prefix) || len(m1)-1 != Message1Size {
		t.Fatalf("Begin appended %d bytes after the prefix, want %d", len(m1)-1, Message1Size)
	}
	m1 = m1[1:]
	if !ini.Pending() {
		t.Fatal("no handshake pending after Begin")
	}

	m2, rs, err := f.resp.Respond(prefix, m1, 0x0A0B0C0D, monotime.Time(20))
	if err != nil {
		t.Fatalf("Respond: %v", err)
	}
	m2 = m2[1:]
	if len(m2) != Message2Size {
		t.Fatalf("message 2 is %d bytes, want %d", len(m2), Message2Size)
	}
	if len(m2) > len(m1) {
		t.Fatalf("amplification: message 2 (%d bytes) longer than message 1 (%d)", len(m2), len(m1))
	}
	if stamp, ok := f.resp.LastTimestamp(ipub); !ok || stamp != 1000 {
		t.Fatalf("LastTimestamp = %d, %v; want 1000, true", stamp, ok)
	}

	is, err := ini.Consume(m2, monotime.Time(30))
	if err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if ini.Pending() {
		t.Fatal("handshake still pending after Consume")
	}

	checks := []struct {
		what      string
		got, want any
	}{
		{"initiator's peer", is.Peer(), rpub},
		{"responder's peer", rs.Peer(), ipub},
		{"initiator's local index", is.LocalIndex(), uint32(0x01020304)},
		{"initiator's remote index", is.RemoteIndex(), uint32(0x0A0B0C0D)},
		{"responder's local index", rs.LocalIndex(), uint32(0x0A0B0C0D)},
		{"responder's remote index", rs.RemoteIndex(), uint32(0x01020304)},
		{"initiator's created", is.Created(), monotime.Time(30)},
		{"responder's created", rs.Created(), monotime.Time(20)},
		{"initiator's role", is.IsInitiator(), true},
		{"responder's role", rs.IsInitiator(), false},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	roundTrip(t, is, rs, 0)
	roundTrip(t, rs, is, 0)
}

// roundTrip seals a packet on from and opens it on to.
func roundTrip(t *testing.T, from, to *Session, pn uint64) {
	t.Helper()
	header := []byte("hdr")
	msg := []byte("hello across the WAN")
	ct, err := from.Seal(nil, header, msg, pn)
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	pt, err := to.Open(nil, header, ct, pn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if !bytes.Equal(pt, msg) {
		t.Fatalf("Open = %q, want %q", pt, msg)
	}
}

func TestHandshakeDeterministic(t *testing.T) {
	run := func() (m1, m2 []byte) {
		f := newFixture(t)
		_, m1 = message1(t, f.ikey, f.rkey.PublicKey(), 1, 1, seedInitiatorEph)
		m2, _, err := f.resp.Respond(nil, m1, 2, 1)
		if err != nil {
			t.Fatal(err)
		}
		return m1, m2
	}
	a1, a2 := run()
	b1, b2 := run()
	if !bytes.Equal(a1, b1) || !bytes.Equal(a2, b2) {
		t.Fatal("same seeds gave different handshake bytes")
	}
}

// respondUnchanged asserts that Respond fails with want, answers nothing and
// leaves the responder's record of every key untouched.
func respondUnchanged(t *testing.T, f *fixture, msg1 []byte, want error) {
	t.Helper()
	keys := []PublicKey{f.ikey.PublicKey(), f.skey.PublicKey(), f.rkey.PublicKey()}
	type rec struct {
		t  Timestamp
		ok bool
	}
	var before []rec
	for _, k := range keys {
		ts, ok := f.resp.LastTimestamp(k)
		before = append(before, rec{ts, ok})
	}
	m2, s, err := f.resp.Respond(nil, msg1, 99, 5)
	if !errors.Is(err, want) {
		t.Fatalf("Respond error = %v, want %v", err, want)
	}
	if m2 != nil || s != nil {
		t.Fatal("Respond returned an answer or a session with an error")
	}
	for i, k := range keys {
		if ts, ok := f.resp.LastTimestamp(k); (rec{ts, ok}) != before[i] {
			t.Fatalf("responder state for %v changed on error: %v -> %v", k, before[i], rec{ts, ok})
		}
	}
}

func TestResponderRejects(t *testing.T) {
	f := newFixture(t)
	rpub := f.rkey.PublicKey()
	// Accept one handshake at timestamp 1000 first.
	_, accepted := message1(t, f.ikey, rpub, 1, 1000, 100)
	if _, _, err := f.resp.Respond(nil, accepted, 1, 1); err != nil {
		t.Fatal(err)
	}
	_, fresh := message1(t, f.ikey, rpub, 1, 2000, 101)
	_, older := message1(t, f.ikey, rpub, 1, 999, 102)
	_, same := message1(t, f.ikey, rpub, 1, 1000, 103) // same stamp, new ephemeral
	_, stranger := message1(t, f.skey, rpub, 1, 5000, 104)
	_, otherResponder := message1(t, f.ikey, f.skey.PublicKey(), 1, 5000, 105)

	tests := []struct {
		name string
		msg  []byte
		want error
	}{
		{"replayed message 1", accepted, ErrReplay},
		{"older timestamp", older, ErrReplay},
		{"equal timestamp", same, ErrReplay},
		{"initiator not on allow-list", stranger, ErrUnknownPeer},
		{"for another responder key", otherResponder, ErrAuth},
		{"empty", nil, ErrMalformed},
		{"truncated", fresh[:Message1Size-1], ErrMalformed},
		{"extended", append(append([]byte{}, fresh...), 0), ErrMalformed},
		{"zeros", make([]byte, Message1Size), ErrAuth},
		{"low-order ephemeral", append(make([]byte, KeySize), fresh[KeySize:]...), ErrAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { respondUnchanged(t, f, tt.msg, tt.want) })
	}
	t.Run("every bit flip", func(t *testing.T) {
		for i := range len(fresh) * 8 {
			m := append([]byte{}, fresh...)
			m[i/8] ^= 1 << (i % 8)
			respondUnchanged(t, f, m, ErrAuth)
		}
	})
	// The untouched fresh message is still accepted after all that.
	if _, _, err := f.resp.Respond(nil, fresh, 1, 1); err != nil {
		t.Fatalf("fresh message 1 after rejections: %v", err)
	}
	if ts, _ := f.resp.LastTimestamp(f.ikey.PublicKey()); ts != 2000 {
		t.Fatalf("LastTimestamp = %d, want 2000", ts)
	}
}

func TestHandshakeWrongResponderKey(t *testing.T) {
	f := newFixture(t)
	// The initiator believes the responder's key is the stranger's.
	ini, m1 := message1(t, f.ikey, f.skey.PublicKey(), 1, 1, seedInitiatorEph)
	respondUnchanged(t, f, m1, ErrAuth)
	if !ini.Pending() {
		t.Fatal("initiator lost its pending handshake")
	}
}

func TestInitiatorTimestampNeverRepeats(t *testing.T) {
	f := newFixture(t)
	ini, err := NewInitiator(f.ikey, f.rkey.PublicKey(), seed.ChaCha8(seedInitiatorEph))
	if err != nil {
		t.Fatal(err)
	}
	// The caller's clock steps back between handshakes.
	for i, stamp := range []Timestamp{500, 400, 400, 0} {
		m1, err := ini.Begin(nil, uint32(i), stamp, monotime.Time(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.resp.Respond(nil, m1, 1, 1); err != nil {
			t.Fatalf("handshake %d (stamp %d): %v", i, stamp, err)
		}
	}
	if ts, _ := f.resp.LastTimestamp(f.ikey.PublicKey()); ts != 503 {
		t.Fatalf("LastTimestamp = %d, want 503", ts)
	}
	// A restarted initiator with a clock behind is refused until it passes.
	restarted, m1 := message1(t, f.ikey, f.rkey.PublicKey(), 1, 503, 200)
	respondUnchanged(t, f, m1, ErrReplay)
	if m1, err = restarted.Begin(nil, 1, 504, 2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.resp.Respond(nil, m1, 1, 1); err != nil {
		t.Fatal(err)
	}
}

func TestInitiatorConsumeRejects(t *testing.T) {
	f := newFixture(t)
	ini, m1 := message1(t, f.ikey, f.rkey.PublicKey(), 77, 1, seedInitiatorEph)
	m2, _, err := f.resp.Respond(nil, m1, 88, 1)
	if err != nil {
		t.Fatal(err)
	}
	lowOrderE := append([]byte{}, m2...)
	clear(lowOrderE[4 : 4+KeySize])
	wrongIndex := append([]byte{}, m2...)
	wrongIndex[3] ^= 1

	tests := []struct {
		name string
		msg  []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"message 1 instead", m1, ErrMalformed},
		{"truncated", m2[:Message2Size-1], ErrMalformed},
		{"wrong receiver index", wrongIndex, ErrUnknownIndex},
		{"low-order ephemeral", lowOrderE, ErrAuth},
	}
	for i := 4 * 8; i < Message2Size*8; i++ {
		m := append([]byte{}, m2...)
		m[i/8] ^= 1 << (i % 8)
		tests = append(tests, struct {
			name string
			msg  []byte
			want error
		}{"bit flip", m, ErrAuth})
	}
	for _, tt := range tests {
		s, err := ini.Consume(tt.msg, 2)
		if !errors.Is(err, tt.want) || s != nil {
			t.Fatalf("%s: Consume error = %v, want %v", tt.name, err, tt.want)
		}
		if !ini.Pending() {
			t.Fatalf("%s: the pending handshake was dropped", tt.name)
		}
	}
	// None of that disturbed the handshake: the genuine message 2 works.
	s, err := ini.Consume(m2, 3)
	if err != nil {
		t.Fatalf("genuine message 2 after rejected ones: %v", err)
	}
	if s.RemoteIndex() != 88 {
		t.Fatalf("RemoteIndex = %d, want 88", s.RemoteIndex())
	}
	if _, err := ini.Consume(m2, 4); !errors.Is(err, ErrNoHandshake) {
		t.Fatalf("second Consume: error = %v, want ErrNoHandshake", err)
	}
}

func TestInitiatorExpiry(t *testing.T) {
	f := newFixture(t)
	start := monotime.Time(1_000_000)
	ini, err := NewInitiator(f.ikey, f.rkey.PublicKey(), seed.ChaCha8(seedInitiatorEph))
	if err != nil {
		t.Fatal(err)
	}
	m1, err := ini.Begin(nil, 5, 1, start)
	if err != nil {
		t.Fatal(err)
	}
	m2, _, err := f.resp.Respond(nil, m1, 6, start)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ini.Consume(m2, start.Add(HandshakeTimeout+time.Nanosecond)); !errors.Is(err, ErrExpired) {
		t.Fatalf("late message 2: error = %v, want ErrExpired", err)
	}
	if ini.Pending() {
		t.Fatal("expired handshake still pending")
	}
	// Exactly at the timeout is still in time.
	m1, _ = ini.Begin(nil, 5, 2, start)
	m2, _, _ = f.resp.Respond(nil, m1, 6, start)
	if _, err := ini.Consume(m2, start.Add(HandshakeTimeout)); err != nil {
		t.Fatalf("message 2 at the timeout: %v", err)
	}
}

func TestBeginAbandonsPending(t *testing.T) {
	f := newFixture(t)
	ini, err := NewInitiator(f.ikey, f.rkey.PublicKey(), seed.ChaCha8(seedInitiatorEph))
	if err != nil {
		t.Fatal(err)
	}
	old, _ := ini.Begin(nil, 1, 1, 1)
	cur, _ := ini.Begin(nil, 2, 2, 1)
	oldReply, _, err := f.resp.Respond(nil, old, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ini.Consume(oldReply, 1); !errors.Is(err, ErrUnknownIndex) {
		t.Fatalf("reply to the abandoned handshake: error = %v, want ErrUnknownIndex", err)
	}
	reply, _, err := f.resp.Respond(nil, cur, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ini.Consume(reply, 1); err != nil {
		t.Fatalf("reply to the current handshake: %v", err)
	}
}

func TestConstructorsRejectBadInput(t *testing.T) {
	k := testKey(t, 1)
	if _, err := NewInitiator(k, PublicKey{}, seed.ChaCha8(1)); !errors.Is(err, ErrBadKey) {
		t.Errorf("NewInitiator with a zero peer key: error = %v, want ErrBadKey", err)
	}
	if _, err := NewInitiator(k, k.PublicKey(), nil); err == nil {
		t.Error("NewInitiator with nil rand: want error")
	}
	if _, err := NewResponder(k, nil, seed.ChaCha8(1)); err == nil {
		t.Error("NewResponder with nil policy: want error")
	}
	if _, err := NewResponder(k, allowOnly(), nil); err == nil {
		t.Error("NewResponder with nil rand: want error")
	}
	ini, _ := NewInitiator(k, testKey(t, 2).PublicKey(), &failingReader{})
	if _, err := ini.Begin(nil, 1, 1, 1); err == nil || ini.Pending() {
		t.Errorf("Begin with failing randomness: error %v, pending %v; want error and nothing pending", err, ini.Pending())
	}
}

type failingReader struct{}

func (*failingReader) Read([]byte) (int, error) { return 0, errors.New("entropy unavailable") }

func TestRespondConcurrentReplay(t *testing.T) {
	f := newFixture(t)
	r, err := NewResponder(f.rkey, allowOnly(f.ikey.PublicKey()), &lockedReader{r: seed.ChaCha8(seedResponderEph)})
	if err != nil {
		t.Fatal(err)
	}
	_, m1 := message1(t, f.ikey, f.rkey.PublicKey(), 1, 1, seedInitiatorEph)
	const n = 8
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, _, err := r.Respond(nil, m1, 1, 1)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrReplay):
			t.Errorf("unexpected error %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d of %d concurrent copies of one message 1 were answered, want 1", ok, n)
	}
}

func BenchmarkHandshake(b *testing.B) {
	f := newFixture(b)
	ini, err := NewInitiator(f.ikey, f.rkey.PublicKey(), seed.ChaCha8(seedInitiatorEph))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := range b.N {
		m1, err := ini.Begin(nil, 1, Timestamp(i+1), 1)
		if err != nil {
			b.Fatal(err)
		}
		m2, _, err := f.resp.Respond(nil, m1, 2, 1)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ini.Consume(m2, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSuiteNegotiation: the responder picks AES-256-GCM when both sides
// have it, ChaCha20-Poly1305 otherwise; an offer with nothing in common
// gets no answer. Packets go both ways whichever suite was chosen.
func TestSuiteNegotiation(t *testing.T) {
	chacha, both := suitesOf(SuiteChaCha20Poly1305), suitesOf(SuiteChaCha20Poly1305, SuiteAES256GCM)
	for _, tc := range []struct {
		name       string
		offer, has Suites
		want       Suite
	}{
		{"both have AES", both, both, SuiteAES256GCM},
		{"initiator without AES", chacha, both, SuiteChaCha20Poly1305},
		{"responder without AES", both, chacha, SuiteChaCha20Poly1305},
		{"neither", chacha, chacha, SuiteChaCha20Poly1305},
		{"nothing in common", suitesOf(SuiteAES256GCM), chacha, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.resp.suites = tc.has
			ini, err := NewInitiator(f.ikey, f.rkey.PublicKey(), seed.ChaCha8(seedInitiatorEph))
			if err != nil {
				t.Fatal(err)
			}
			ini.suites = tc.offer
			m1, err := ini.Begin(nil, 7, 1000, monotime.Time(10))
			if err != nil {
				t.Fatal(err)
			}
			m2, rs, err := f.resp.Respond(nil, m1, 8, monotime.Time(20))
			if tc.want == 0 {
				if !errors.Is(err, ErrMalformed) || m2 != nil {
					t.Fatalf("Respond to an offer with nothing in common: %v, %d bytes; want ErrMalformed and no answer", err, len(m2))
				}
				return
			}
			if err != nil {
				t.Fatalf("Respond: %v", err)
			}
			is, err := ini.Consume(m2, monotime.Time(30))
			if err != nil {
				t.Fatalf("Consume: %v", err)
			}
			if is.Suite() != tc.want || rs.Suite() != tc.want {
				t.Fatalf("suites %v and %v, want %v", is.Suite(), rs.Suite(), tc.want)
			}
			ct, err := is.Seal(nil, []byte("h"), []byte("to the responder"), 0)
			if err != nil {
				t.Fatal(err)
			}
			if pt, err := rs.Open(nil, []byte("h"), ct, 0); err != nil || string(pt) != "to the responder" {
				t.Fatalf("responder opened %q, %v", pt, err)
			}
			ct, _ = rs.Seal(nil, []byte("h"), []byte("back"), 0)
			if pt, err := is.Open(nil, []byte("h"), ct, 0); err != nil || string(pt) != "back" {
				t.Fatalf("initiator opened %q, %v", pt, err)
			}
		})
	}
}
