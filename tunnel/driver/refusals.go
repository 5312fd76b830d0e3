package driver

import (
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// RefusalReason says why a server refused a handshake initiation.
type RefusalReason uint8

// Refusal reasons.
const (
	// RefusedBadMAC: no valid mac1. The sender does not have this
	// server's public key: its configuration names another peer.
	RefusedBadMAC RefusalReason = iota
	// RefusedUnauthenticated: mac1 was right but message 1 did not
	// decrypt (corrupted or forged).
	RefusedUnauthenticated
	// RefusedUnknownKey: message 1 decrypted, but its key is not one this
	// server serves.
	RefusedUnknownKey
	// RefusedReplay: message 1 is not newer than one accepted before from
	// its key (a replay, or a peer whose clock went back).
	RefusedReplay
	// RefusedRateLimited: over the handshake gate's rate limits.
	RefusedRateLimited
)

// String returns the reason's name, as metrics label it.
func (r RefusalReason) String() string {
	switch r {
	case RefusedBadMAC:
		return "bad_mac"
	case RefusedUnauthenticated:
		return "unauthenticated"
	case RefusedUnknownKey:
		return "unknown_key"
	case RefusedReplay:
		return "replay"
	case RefusedRateLimited:
		return "rate_limited"
	}
	return "unknown"
}

// hint is what the operator should check for a refusal.
func (r RefusalReason) hint() string {
	switch r {
	case RefusedBadMAC:
		return "the initiator does not have this edge's public key: check the peer key it was given ('wanopt pubkey < this edge's key' prints the right one)"
	case RefusedUnauthenticated:
		return "message 1 did not decrypt: corrupted or forged"
	case RefusedUnknownKey:
		return "the initiator's key is not configured here: if it should connect, make this key the peer key (or a branch's key)"
	case RefusedReplay:
		return "an initiation not newer than one accepted before: a replay, or the initiator's clock went back"
	}
	return ""
}

// Refusal is one refused initiation.
type Refusal struct {
	At     time.Time
	From   netip.AddrPort
	Reason RefusalReason
	// Key is the initiator's static key when message 1 decrypted
	// (RefusedUnknownKey, RefusedReplay); zero otherwise.
	Key crypt.PublicKey
}

// RefusalStats counts refused initiations by reason.
type RefusalStats struct {
	ByReason [RefusedRateLimited + 1]uint64
	// Last is the latest refusal (Last.At is zero before the first).
	Last Refusal
}

// Refusals records the handshake initiations a server refused, and logs
// them: at most one line per source address per refusalLogEvery (and at
// most refusalLogBurst lines in that time over all sources, so a flood
// from many addresses cannot flood the log). A server's tunnels come and
// go; one Refusals given to each Listen (Config.Refusals) and to a Hub
// outlives them, so its counts hold while no tunnel is up, when they
// matter most. Safe for concurrent use; the zero value is not: use
// NewRefusals.
type Refusals struct {
	log *slog.Logger

	mu       sync.Mutex
	stats    RefusalStats
	logged   map[netip.Addr]time.Time // when each source was last logged
	winStart time.Time
	winLines int
}

// How often a source's refusals are logged, and how many lines all
// sources get per interval.
const (
	refusalLogEvery = time.Minute
	refusalLogBurst = 16
	// refusalLogSources bounds the sources remembered: a spoofed flood
	// fills the table, which then starts over.
	refusalLogSources = 1024
)

// NewRefusals returns an empty record that logs to log (nil: it only
// counts).
func NewRefusals(log *slog.Logger) *Refusals {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Refusals{log: log, logged: make(map[netip.Addr]time.Time)}
}

// Stats returns the counts so far.
func (r *Refusals) Stats() RefusalStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// add records a refusal at now.
func (r *Refusals) add(now time.Time, from netip.AddrPort, reason RefusalReason, key crypt.PublicKey) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.stats.ByReason[reason]++
	n := r.stats.ByReason[reason]
	r.stats.Last = Refusal{At: now, From: from, Reason: reason, Key: key}
	log := reason != RefusedRateLimited && r.mayLog(now, from.Addr())
	r.mu.Unlock()
	if !log {
		return
	}
	attrs := []any{"from", from, "reason", reason.String(), "refused", n}
	if !key.IsZero() {
		attrs = append(attrs, "key", key.Base64())
	}
	attrs = append(attrs, "hint", reason.hint())
	r.log.Warn("handshake refused", attrs...)
}

// mayLog reports whether a refusal from src may be logged at now (under
// mu).
func (r *Refusals) mayLog(now time.Time, src netip.Addr) bool {
	if last, ok := r.logged[src]; ok && now.Sub(last) < refusalLogEvery {
		return false
	}
	if now.Sub(r.winStart) >= refusalLogEvery {
		r.winStart, r.winLines = now, 0
	}
	if r.winLines >= refusalLogBurst {
		return false
	}
	r.winLines++
	if len(r.logged) >= refusalLogSources {
		clear(r.logged)
	}
	r.logged[src] = now
	return true
}

// addEvent records the Conn's EventHandshakeRefused for an initiation
// from src.
func (r *Refusals) addEvent(now time.Time, src netip.AddrPort, ev tunnel.Event) {
	reason := RefusedUnauthenticated
	switch {
	case errors.Is(ev.Err, crypt.ErrUnknownPeer):
		reason = RefusedUnknownKey
	case errors.Is(ev.Err, crypt.ErrReplay):
		reason = RefusedReplay
	}
	r.add(now, src, reason, ev.PeerKey)
}

// addGate records what the handshake gate refused of one initiation from
// src: before and after are its counts around the verdict.
func (r *Refusals) addGate(now time.Time, src netip.AddrPort, before, after tunnel.GateStats) {
	switch {
	case after.BadMAC > before.BadMAC:
		r.add(now, src, RefusedBadMAC, crypt.PublicKey{})
	case after.RateLimited > before.RateLimited:
		r.add(now, src, RefusedRateLimited, crypt.PublicKey{})
	}
}
