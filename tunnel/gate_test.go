package tunnel

import (
	"net/netip"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/seed"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// gateInit builds an initiation datagram to server from a client Conn's
// cookie generator state: header, any message 1 bytes, MACs.
func gateInit(gen *crypt.CookieGenerator, now monotime.Time, seed byte) []byte {
	d := wire.AppendHeader(nil, &wire.Header{Type: wire.PacketHandshakeInit, SenderIndex: 0x0a0b0c0d})
	for i := range crypt.Message1Size {
		d = append(d, seed+byte(i))
	}
	return gen.AppendMACs(d, now)
}

func TestHandshakeGate(t *testing.T) {
	_, server := testKeys(t, 1)
	g := NewHandshakeGate(server, seed.ChaCha8(2))
	gen := crypt.NewCookieGenerator(server.PublicKey())
	peer := netip.MustParseAddrPort("198.51.100.1:4500")
	now := monotime.Time(time.Hour)

	t.Run("junk without mac1 is dropped", func(t *testing.T) {
		junk := make([]byte, InitiationSize)
		junk[0] = byte(wire.PacketHandshakeInit)
		if v, _ := g.Admit(now, junk, peer, nil); v != GateDrop || g.Stats().BadMAC != 1 {
			t.Errorf("verdict %v, stats %+v; want a drop counted as bad mac", v, g.Stats())
		}
	})
	t.Run("a quiet server admits", func(t *testing.T) {
		if v, _ := g.Admit(now, gateInit(gen, now, 1), peer, nil); v != GateAdmit {
			t.Errorf("verdict %v; want admit", v)
		}
	})

	// A flood from one source of initiations that carry mac1 (the
	// attacker knows the public key) but no cookie.
	flooder := netip.MustParseAddrPort("203.0.113.9:1000")
	floodGen := crypt.NewCookieGenerator(server.PublicKey())
	d := gateInit(floodGen, now, 9)
	var cookies, admitted int
	for i := range 20000 { // one second at 20k a second
		at := now.Add(time.Duration(i) * 50 * time.Microsecond)
		switch v, _ := g.Admit(at, d, flooder, nil); v {
		case GateCookie:
			cookies++
		case GateAdmit:
			admitted++
		}
	}
	if admitted > gateLoadRate || cookies > int(gateCookieBurst)+2 {
		t.Errorf("a second of flood from one source: %d admitted, %d cookies; want at most %d admitted (before the load shows) and a few cookies", admitted, cookies, gateLoadRate)
	}
	now = now.Add(time.Second)

	t.Run("under load a new source gets a cookie, then gets in", func(t *testing.T) {
		g.Admit(now, d, flooder, nil) // the flood goes on
		v, reply := g.Admit(now, gateInit(gen, now, 2), peer, nil)
		if v != GateCookie {
			t.Fatalf("verdict %v; want a cookie reply", v)
		}
		hdr, off, err := wire.ParseHeader(reply)
		if err != nil || hdr.Type != wire.PacketCookie || hdr.ReceiverIndex != 0x0a0b0c0d {
			t.Fatalf("reply header %+v, %v", hdr, err)
		}
		if err := gen.ConsumeReply(reply[off:], now); err != nil {
			t.Fatalf("the peer cannot take the cookie: %v", err)
		}
		if v, _ := g.Admit(now, gateInit(gen, now, 3), peer, nil); v != GateAdmit {
			t.Errorf("with the cookie: verdict %v; want admit", v)
		}
		// The cookie proves the address: from elsewhere it is no good.
		if v, _ := g.Admit(now, gateInit(gen, now, 4), netip.MustParseAddrPort("198.51.100.1:4501"), nil); v == GateAdmit {
			t.Error("a cookie for one source admitted another")
		}
	})
	t.Run("a source with a cookie is still rate limited", func(t *testing.T) {
		var ok int
		for range 100 {
			if v, _ := g.Admit(now, gateInit(gen, now, 5), peer, nil); v == GateAdmit {
				ok++
			}
		}
		if ok > int(gateSourceBurst) {
			t.Errorf("%d admitted in an instant from one source; want at most %v", ok, gateSourceBurst)
		}
	})
	t.Run("the load passes", func(t *testing.T) {
		later := now.Add(10 * time.Second)
		if g.UnderLoad(later) {
			t.Fatal("still under load 10 s after the flood")
		}
		other := crypt.NewCookieGenerator(server.PublicKey())
		if v, _ := g.Admit(later, gateInit(other, later, 6), netip.MustParseAddrPort("198.51.100.7:4500"), nil); v != GateAdmit {
			t.Errorf("verdict %v; want admit once the flood is over", v)
		}
	})
}

// BenchmarkGateFlood is a responder's cost for one initiation of a flood
// from a source that does not answer cookies: mac1 checked, over the
// source's cookie budget, dropped, with no Diffie-Hellman.
func BenchmarkGateFlood(b *testing.B) {
	_, server := testKeys(b, 1)
	g := NewHandshakeGate(server, seed.ChaCha8(2))
	gen := crypt.NewCookieGenerator(server.PublicKey())
	d := gateInit(gen, 1, 9)
	src := netip.MustParseAddrPort("203.0.113.9:1000")
	now := monotime.Time(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(50 * time.Microsecond)
		g.Admit(now, d, src, nil)
	}
	b.ReportMetric(float64(g.Stats().Admitted), "admitted")
}

// FuzzGate: whatever datagram arrives as an initiation, the gate never
// panics, and nothing without a valid mac1 gets past it or an answer.
func FuzzGate(f *testing.F) {
	_, server := testKeys(f, 1)
	genuine := gateInit(crypt.NewCookieGenerator(server.PublicKey()), 1, 1)
	f.Add(genuine)
	f.Add(genuine[:len(genuine)-1])
	f.Add(make([]byte, InitiationSize))
	f.Add([]byte{byte(wire.PacketHandshakeInit)})
	f.Fuzz(func(t *testing.T, d []byte) {
		g := NewHandshakeGate(server, seed.ChaCha8(2))
		chk := crypt.NewCookieChecker(server.PublicKey(), seed.ChaCha8(3))
		src := netip.MustParseAddrPort("198.51.100.1:4500")
		for i := range 40 { // enough to put the gate under load
			now := monotime.Time(time.Hour) + monotime.Time(i)*monotime.Time(time.Millisecond)
			v, reply := g.Admit(now, d, src, nil)
			if v != GateDrop && !chk.CheckMAC1(d) {
				t.Fatalf("verdict %v for a datagram without a valid mac1", v)
			}
			if v == GateCookie && len(reply) >= len(d) {
				t.Fatalf("a cookie reply of %d bytes to %d", len(reply), len(d))
			}
		}
	})
}
