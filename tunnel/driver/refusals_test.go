package driver

import (
	"crypto/rand"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// TestRefusalsCount: each refusal is counted by its reason, the last is
// kept with its source and key, and a nil Refusals records nothing.
func TestRefusalsCount(t *testing.T) {
	k, _ := crypt.GenerateKey(rand.Reader)
	src := netip.MustParseAddrPort("192.0.2.7:4000")
	t0 := time.Unix(1e9, 0)
	r := NewRefusals(nil)
	for i, tc := range []struct {
		ev     tunnel.Event
		reason RefusalReason
		key    bool
	}{
		{tunnel.Event{Kind: tunnel.EventHandshakeRefused, Err: &crypt.PeerError{Key: k.PublicKey(), Err: crypt.ErrUnknownPeer}, PeerKey: k.PublicKey()}, RefusedUnknownKey, true},
		{tunnel.Event{Kind: tunnel.EventHandshakeRefused, Err: &crypt.PeerError{Key: k.PublicKey(), Err: crypt.ErrReplay}, PeerKey: k.PublicKey()}, RefusedReplay, true},
		{tunnel.Event{Kind: tunnel.EventHandshakeRefused, Err: fmt.Errorf("handshake message 1: %w", crypt.ErrAuth)}, RefusedUnauthenticated, false},
	} {
		r.addEvent(t0, src, tc.ev)
		s := r.Stats()
		if s.ByReason[tc.reason] != 1 || s.Last.Reason != tc.reason || s.Last.From != src || (s.Last.Key == k.PublicKey()) != tc.key {
			t.Errorf("%d: %+v; want one %v", i, s, tc.reason)
		}
	}
	r.addGate(t0, src, tunnel.GateStats{}, tunnel.GateStats{BadMAC: 1})
	r.addGate(t0, src, tunnel.GateStats{}, tunnel.GateStats{RateLimited: 1})
	r.addGate(t0, src, tunnel.GateStats{}, tunnel.GateStats{CookiesSent: 1}) // not a refusal
	if s := r.Stats(); s.ByReason[RefusedBadMAC] != 1 || s.ByReason[RefusedRateLimited] != 1 {
		t.Errorf("gate refusals: %+v", s)
	}
	var none *Refusals
	none.addEvent(t0, src, tunnel.Event{Err: crypt.ErrAuth}) // must not panic
}

// TestRefusalsLogLimit: a source's refusals are logged at most once a
// minute, and all sources together at most refusalLogBurst times.
func TestRefusalsLogLimit(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	a := netip.MustParseAddr("192.0.2.1")
	for _, tc := range []struct {
		name string
		at   []time.Duration
		srcs int // distinct sources, each at every time
		want int
	}{
		{"one source, once a second", []time.Duration{0, time.Second, 30 * time.Second, 59 * time.Second}, 1, 1},
		{"one source, a minute apart", []time.Duration{0, time.Minute, 2 * time.Minute}, 1, 3},
		{"many sources at once", []time.Duration{0}, 100, refusalLogBurst},
		{"many sources, the next minute", []time.Duration{0, time.Minute}, 100, 2 * refusalLogBurst},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRefusals(nil)
			got := 0
			for _, d := range tc.at {
				for i := range tc.srcs {
					src := a
					if i > 0 {
						src = netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)})
					}
					if r.mayLog(t0.Add(d), src) {
						got++
					}
				}
			}
			if got != tc.want {
				t.Errorf("%d lines logged, want %d", got, tc.want)
			}
		})
	}
}
