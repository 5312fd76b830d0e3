package dgram

import (
	"bytes"
	"crypto/rand"
	"net/netip"
	"testing"
	"time"

	"github.com/wanopt/wanopt/dgram/internal/pkttest"
	"github.com/wanopt/wanopt/dgram/packet"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind/bindtest"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/driver"
	"github.com/wanopt/wanopt/tunnel/driver/drivertest"
)

// TestThroughTunnel carries a client's UDP packets from a Near through a
// real tunnel pair (in memory) to a Far and a UDP echo server on
// 127.0.0.1, and the answers back to what the Near writes to its TUN.
func TestThroughTunnel(t *testing.T) {
	srv := udpEcho(t)
	written := make(chan []byte, 16)
	var near *Near
	far := NewFar(FarConfig{Check: func(netip.AddrPort) string { return "" }})
	defer far.Close()
	ck, _ := crypt.GenerateKey(rand.Reader)
	sk, _ := crypt.GenerateKey(rand.Reader)
	a, b := bindtest.NewPair(bindtest.Config{})
	nt, ft := drivertest.Connect(t,
		driver.Config{Tunnel: tunnel.Config{PrivateKey: ck, PeerPublicKey: sk.PublicKey()}, Bind: a, RemoteAddr: b.LocalAddr(),
			OnDatagram: func(p []byte) { Demux(p, near, nil) }},
		driver.Config{Tunnel: tunnel.Config{PrivateKey: sk, PeerPublicKey: ck.PublicKey()}, Bind: b,
			OnDatagram: func(p []byte) { Demux(p, nil, far) }})
	near = NewNear(NearConfig{Route: func(netip.Addr) packet.Sender { return nt }, Write: func(p []byte) error { written <- bytes.Clone(p); return nil }})
	far.SetTunnel(ft)

	client := netip.MustParseAddrPort("198.18.1.2:33333")
	for i := range 10 {
		msg := bytes.Repeat([]byte{byte(i)}, 100+i)
		if !near.Divert(pkttest.UDP(t, client.String(), srv.String(), msg)) {
			t.Fatal("Divert left a UDP packet to the netstack")
		}
		select {
		case w := <-written:
			p, err := packet.Parse(w)
			if err != nil || p.SrcAddrPort() != srv || p.DstAddrPort() != client || !bytes.Equal(p.Payload, msg) {
				t.Fatalf("answer %d: %+v, %v", i, p, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("answer %d: none within 5 s; near %+v, far %+v", i, near.Stats(), far.Stats())
		}
	}
	// Each side counts a packet after handing it on (the near after
	// writing it, the far after the tunnel took it), so the answer can
	// arrive before its count: wait for all four.
	waitFor(t, "both sides' count of the last packet", func() bool {
		fs, ns := far.Stats().UDP, near.Stats().UDP
		return fs.PacketsUp == 10 && fs.PacketsDown == 10 && ns.PacketsUp == 10 && ns.PacketsDown == 10
	})
	ns, fs := near.Stats(), far.Stats()
	if ns.UDP.PacketsUp != 10 || ns.UDP.PacketsDown != 10 || fs.UDP.PacketsUp != 10 || fs.UDP.PacketsDown != 10 || fs.Flows != 1 {
		t.Errorf("near %+v, far %+v", ns, fs)
	}
	if ns.UDP.BytesUp != fs.UDP.BytesUp || ns.UDP.BytesDown != fs.UDP.BytesDown {
		t.Errorf("bytes differ between the ends: near %+v, far %+v", ns.UDP, fs.UDP)
	}
}
