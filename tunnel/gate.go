package tunnel

import (
	"io"
	"net/netip"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// GateVerdict is what a server does with a handshake initiation.
type GateVerdict uint8

const (
	// GateDrop: drop it unanswered (bad mac1, or over a rate limit).
	GateDrop GateVerdict = iota
	// GateCookie: send the cookie reply Admit returned, and drop it.
	GateCookie
	// GateAdmit: hand it to the Conn, which spends a Diffie-Hellman on it.
	GateAdmit
)

// The gate's limits. An initiation costs its responder two X25519
// operations (BenchmarkHandshake), so an unchecked flood saturates a
// core. Legitimate initiations are rare (a peer dials, restarts, or
// retransmits once a second): the limits are far above what peers need
// and far below what hurts.
const (
	// gateLoadRate: above this many initiations a second (over all
	// sources) the server is under load and wants mac2; it stays so for
	// gateLoadHold after the rate falls.
	gateLoadRate = 32
	gateLoadHold = time.Second
	// gateSourceRate and gateSourceBurst bound the initiations one source
	// (address and port: many branches may share a NAT's address) gets
	// processed; gateCookieRate the cookie replies it gets.
	gateSourceRate  = 4.0
	gateSourceBurst = 8.0
	gateCookieRate  = 2.0
	gateCookieBurst = 4.0
	// gateGlobalRate bounds the Diffie-Hellmans a second over all sources,
	// gateGlobalCookies the cookie replies.
	gateGlobalRate    = 500.0
	gateGlobalCookies = 5000.0
	// gateMaxSources bounds the sources remembered; when full the table
	// starts over (a spoofing flood fills it; a real peer then just gets a
	// cookie again).
	gateMaxSources = 4096
)

// GateStats counts the gate's verdicts.
type GateStats struct {
	BadMAC      uint64 // dropped: no valid mac1 (the sender lacks our public key)
	CookiesSent uint64 // cookie replies sent under load
	RateLimited uint64 // dropped by a rate limit
	Admitted    uint64 // handed on to a handshake
}

// bucket is a token bucket.
type bucket struct {
	tokens float64
	at     monotime.Time
}

// take refills b at rate (burst at most) up to now and takes one token if
// there is one.
func (b *bucket) take(now monotime.Time, rate, burst float64) bool {
	if b.at == 0 {
		b.tokens = burst
	} else if now > b.at {
		b.tokens = min(burst, b.tokens+now.Sub(b.at).Seconds()*rate)
	}
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

type gateSource struct{ hs, cookies bucket }

// HandshakeGate decides, before any Diffie-Hellman, what a server does with
// each handshake initiation datagram (crypt's mac1, mac2 and cookies, with
// per-source and global rate limits). Like a Conn it is sans-IO: the driver
// passes every initiation with its source and the time, sends the cookie
// replies it returns, and gives the admitted ones to the Conn. Not safe for
// concurrent use.
type HandshakeGate struct {
	checker   *crypt.CookieChecker
	winStart  monotime.Time
	winCount  int
	loadUntil monotime.Time
	sources   map[netip.AddrPort]*gateSource
	global    bucket
	cookieCap bucket
	stats     GateStats
}

// NewHandshakeGate returns the gate of the server whose static key is
// local; rand supplies cookie secrets and nonces (crypto/rand.Reader).
func NewHandshakeGate(local crypt.PrivateKey, rand io.Reader) *HandshakeGate {
	return &HandshakeGate{
		checker: crypt.NewCookieChecker(local.PublicKey(), rand),
		sources: make(map[netip.AddrPort]*gateSource),
	}
}

// Admit decides on the initiation datagram d (header, message 1, MACs)
// from src at now. For GateCookie it returns the cookie reply, appended to
// reply.
func (g *HandshakeGate) Admit(now monotime.Time, d []byte, src netip.AddrPort, reply []byte) (GateVerdict, []byte) {
	if !g.checker.CheckMAC1(d) {
		g.stats.BadMAC++
		return GateDrop, reply
	}
	if now.Sub(g.winStart) >= time.Second {
		g.winStart, g.winCount = now, 0
	}
	g.winCount++
	if g.winCount > gateLoadRate {
		g.loadUntil = now.Add(gateLoadHold)
	}
	s := g.sources[src]
	if s == nil {
		if len(g.sources) >= gateMaxSources {
			clear(g.sources)
		}
		s = &gateSource{}
		g.sources[src] = s
	}
	if g.UnderLoad(now) && !g.checker.CheckMAC2(d, src, now) {
		if !s.cookies.take(now, gateCookieRate, gateCookieBurst) || !g.cookieCap.take(now, gateGlobalCookies, gateGlobalCookies) {
			g.stats.RateLimited++
			return GateDrop, reply
		}
		hdr, _, err := wire.ParseHeader(d)
		if err != nil {
			g.stats.BadMAC++ // unreachable: mac1 covers the header
			return GateDrop, reply
		}
		start := len(reply)
		reply = wire.AppendHeader(reply, &wire.Header{Type: wire.PacketCookie, ReceiverIndex: hdr.SenderIndex})
		out, err := g.checker.AppendReply(reply, d, src, now)
		if err != nil {
			return GateDrop, reply[:start]
		}
		g.stats.CookiesSent++
		return GateCookie, out
	}
	if !s.hs.take(now, gateSourceRate, gateSourceBurst) || !g.global.take(now, gateGlobalRate, gateGlobalRate) {
		g.stats.RateLimited++
		return GateDrop, reply
	}
	g.stats.Admitted++
	return GateAdmit, reply
}

// UnderLoad reports whether the gate wants mac2 at now.
func (g *HandshakeGate) UnderLoad(now monotime.Time) bool { return now < g.loadUntil }

// Stats returns the gate's counters.
func (g *HandshakeGate) Stats() GateStats { return g.stats }
