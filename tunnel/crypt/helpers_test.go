package crypt

import (
	"io"
	"sync"
	"testing"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/seed"
)

// lockedReader makes a reader safe for concurrent use.
type lockedReader struct {
	mu sync.Mutex
	r  io.Reader
}

func (l *lockedReader) Read(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Read(p)
}

// testKey derives a deterministic private key from seed.
func testKey(tb testing.TB, sd uint64) PrivateKey {
	tb.Helper()
	k, err := GenerateKey(seed.ChaCha8(sd))
	if err != nil {
		tb.Fatalf("GenerateKey(seed %d): %v", sd, err)
	}
	return k
}

// allowOnly returns a policy allowing exactly keys.
func allowOnly(keys ...PublicKey) func(PublicKey) bool {
	m := make(map[PublicKey]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return func(k PublicKey) bool { return m[k] }
}

// Fixed seeds so failures reproduce; logged by the tests that use them.
const (
	seedInitiatorKey = 1
	seedResponderKey = 2
	seedStrangerKey  = 3
	seedInitiatorEph = 11
	seedResponderEph = 12
)

// fixture is an initiator key, a responder that allows it, and a stranger
// key the responder does not allow.
type fixture struct {
	ikey, rkey, skey PrivateKey
	resp             *Responder
}

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	f := &fixture{
		ikey: testKey(tb, seedInitiatorKey),
		rkey: testKey(tb, seedResponderKey),
		skey: testKey(tb, seedStrangerKey),
	}
	r, err := NewResponder(f.rkey, allowOnly(f.ikey.PublicKey()), seed.ChaCha8(seedResponderEph))
	if err != nil {
		tb.Fatal(err)
	}
	f.resp = r
	return f
}

// message1 builds a message 1 from key to the responder key remote.
func message1(tb testing.TB, key PrivateKey, remote PublicKey, index uint32, stamp Timestamp, seed uint64) (*Initiator, []byte) {
	tb.Helper()
	ini, msg, err := newMessage1(key, remote, index, stamp, seed)
	if err != nil {
		tb.Fatal(err)
	}
	return ini, msg
}

func newMessage1(key PrivateKey, remote PublicKey, index uint32, stamp Timestamp, sd uint64) (*Initiator, []byte, error) {
	ini, err := NewInitiator(key, remote, seed.ChaCha8(sd))
	if err != nil {
		return nil, nil, err
	}
	msg, err := ini.Begin(nil, index, stamp, monotime.Time(1))
	return ini, msg, err
}

// sessionPair runs a full handshake and returns the initiator's and the
// responder's sessions.
func sessionPair(tb testing.TB) (a, b *Session) {
	tb.Helper()
	f := newFixture(tb)
	ini, m1 := message1(tb, f.ikey, f.rkey.PublicKey(), 7, 1000, seedInitiatorEph)
	m2, b, err := f.resp.Respond(nil, m1, 9, monotime.Time(2))
	if err != nil {
		tb.Fatalf("Respond: %v", err)
	}
	a, err = ini.Consume(m2, monotime.Time(3))
	if err != nil {
		tb.Fatalf("Consume: %v", err)
	}
	return a, b
}
