package crypt

import (
	"errors"
	"testing"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/seed"
)

// TestSharedTimestamps: a responder that shares its timestamp memory with
// the one before it (a new connection in the same process) answers none of
// the initiations the first one accepted, however old, and still answers a
// newer one.
func TestSharedTimestamps(t *testing.T) {
	f := newFixture(t)
	ts := NewTimestamps()
	f.resp.ShareTimestamps(ts)
	_, old := message1(t, f.ikey, f.rkey.PublicKey(), 1, 1000, 1)
	_, older := message1(t, f.ikey, f.rkey.PublicKey(), 2, 900, 2)
	if _, _, err := f.resp.Respond(nil, old, 7, monotime.Time(1)); err != nil {
		t.Fatalf("first initiation: %v", err)
	}
	next, err := NewResponder(f.rkey, allowOnly(f.ikey.PublicKey()), seed.ChaCha8(seedResponderEph))
	if err != nil {
		t.Fatal(err)
	}
	next.ShareTimestamps(ts)
	for _, m := range [][]byte{old, older} {
		if _, _, err := next.Respond(nil, m, 8, monotime.Time(2)); !errors.Is(err, ErrReplay) {
			t.Errorf("replayed initiation to the next responder: %v; want ErrReplay", err)
		}
	}
	_, fresh := message1(t, f.ikey, f.rkey.PublicKey(), 3, 1001, 3)
	if _, _, err := next.Respond(nil, fresh, 9, monotime.Time(3)); err != nil {
		t.Errorf("newer initiation: %v", err)
	}
	if last, ok := ts.Last(f.ikey.PublicKey()); !ok || last != 1001 {
		t.Errorf("shared memory holds %d, %v; want 1001", last, ok)
	}
	// Without sharing, a new responder (a restarted process) answers the
	// replay: what the process-lifetime memory is for.
	fresh2, _ := NewResponder(f.rkey, allowOnly(f.ikey.PublicKey()), seed.ChaCha8(seedResponderEph))
	if _, _, err := fresh2.Respond(nil, old, 10, monotime.Time(4)); err != nil {
		t.Errorf("a responder with its own memory: %v", err)
	}
}

// TestResumeFlag: the initiator's resume flag reaches the responder's
// session, authenticated, and is off by default.
func TestResumeFlag(t *testing.T) {
	for _, resume := range []bool{false, true} {
		f := newFixture(t)
		ini, err := NewInitiator(f.ikey, f.rkey.PublicKey(), seed.ChaCha8(seedInitiatorEph))
		if err != nil {
			t.Fatal(err)
		}
		ini.SetResume(resume)
		m1, err := ini.Begin(nil, 1, 1000, monotime.Time(1))
		if err != nil {
			t.Fatal(err)
		}
		_, s, err := f.resp.Respond(nil, m1, 2, monotime.Time(2))
		if err != nil {
			t.Fatal(err)
		}
		if s.Resume() != resume {
			t.Errorf("SetResume(%v): the responder's session says Resume %v", resume, s.Resume())
		}
	}
}

// TestRekeyFlags: a rekey is confirmed in message 2 only by a responder
// that holds the session; one that restarted answers without the flag.
func TestRekeyFlags(t *testing.T) {
	for _, tc := range []struct {
		name              string
		rekey, held, want bool
	}{
		{"rekey, held", true, true, true},
		{"rekey, not held (responder restarted)", true, false, false},
		{"no rekey, held", false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			ini, err := NewInitiator(f.ikey, f.rkey.PublicKey(), seed.ChaCha8(seedInitiatorEph))
			if err != nil {
				t.Fatal(err)
			}
			ini.SetRekey(tc.rekey)
			m1, _ := ini.Begin(nil, 1, 1000, monotime.Time(1))
			m2, rs, err := f.resp.RespondHeld(nil, m1, 2, monotime.Time(2), tc.held)
			if err != nil {
				t.Fatal(err)
			}
			is, err := ini.Consume(m2, monotime.Time(3))
			if err != nil {
				t.Fatal(err)
			}
			if rs.Rekey() != tc.rekey || is.Rekeyed() != tc.want || rs.Rekeyed() != tc.want {
				t.Errorf("responder Rekey %v Rekeyed %v, initiator Rekeyed %v; want %v, %v, %v", rs.Rekey(), rs.Rekeyed(), is.Rekeyed(), tc.rekey, tc.want, tc.want)
			}
		})
	}
}
