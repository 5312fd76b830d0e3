package driver

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/seed"
	"github.com/wanopt/wanopt/tunnel/bind"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// crashBind is a socket that can die silently: once dead, nothing it
// sends leaves (as when the far edge's process is killed: no CLOSE).
type crashBind struct {
	bind.Conn
	dead atomic.Bool
}

func (c *crashBind) WriteBatch(bufs [][]byte, ep netip.AddrPort) error {
	if c.dead.Load() {
		return nil
	}
	return c.Conn.WriteBatch(bufs, ep)
}

// indexBind records the receiver index of the last data packet sent.
type indexBind struct {
	bind.Conn
	remote atomic.Uint32
}

func (c *indexBind) WriteBatch(bufs [][]byte, ep netip.AddrPort) error {
	for _, b := range bufs {
		if h, _, err := wire.ParseHeader(b); err == nil && h.Type == wire.PacketData {
			c.remote.Store(h.ReceiverIndex)
		}
	}
	return c.Conn.WriteBatch(bufs, ep)
}

// TestFarEdgeRestart: the server dies without a word and a new one listens
// on its address. The client's next packets draw a REJECT, the client
// handshakes again while keeping the old session, switches once the new
// session authenticates, resets the old session's streams, and new streams
// work again, all far within 5 s (not after the 30 s idle timeout).
func TestFarEdgeRestart(t *testing.T) {
	leaktest.Check(t)
	sb := listenUDP(t, netip.MustParseAddrPort("127.0.0.1:0"))
	saddr := sb.LocalAddr()
	crash := &crashBind{Conn: sb}
	ccfg, scfg := pairConfigs(t, 31)
	scfg.Bind = crash
	ccfg.RemoteAddr, ccfg.Network, ccfg.LocalAddr = saddr, "udp4", netip.MustParseAddrPort("127.0.0.1:0")
	cli, srv := connect(t, ccfg, scfg)
	c, s := openAccepted(t, cli, srv)
	c.Write([]byte("before"))
	mustRead(t, s, []byte("before"))

	// The far edge dies: its CLOSE never leaves.
	crash.dead.Store(true)
	srv.Close()
	start := time.Now()

	// It restarts on the same address, with fresh state.
	sb2 := listenUDP(t, saddr)
	_, scfg2 := pairConfigs(t, 31)
	scfg2.Tunnel.Rand = seed.ChaCha8(32)
	scfg2.Bind = sb2
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srvCh := listenAgain(t, ctx, scfg2)

	// The old stream's traffic draws the REJECT; its Read is reset.
	rerr := readOnce(c)
	c.Write([]byte("after the crash"))
	wantPeerRestarted(t, rerr, "the client's stream from before the crash")
	c.Close()
	srv2 := <-srvCh
	if srv2 == nil {
		return
	}
	defer srv2.Close()
	c, s = servedWithin(t, cli, srv2, start, 5*time.Second, "new flows worked again")
	st, st2 := cli.Stats(), srv2.Stats()
	if st.Rehandshakes != 1 || st2.RejectsSent == 0 {
		t.Errorf("client rehandshakes %d, server REJECTs %d; want 1 and some", st.Rehandshakes, st2.RejectsSent)
	}
	c.Close()
	s.Close()
}

// TestForgedReject: a REJECT naming the session while the server is alive
// (anyone on the path can forge one) starts a handshake the server
// ignores, and the session and its streams go on untouched.
func TestForgedReject(t *testing.T) {
	leaktest.Check(t)
	sb := listenUDP(t, netip.MustParseAddrPort("127.0.0.1:0"))
	cb := listenUDP(t, netip.MustParseAddrPort("127.0.0.1:0"))
	ib := &indexBind{Conn: cb}
	ccfg, scfg := pairConfigs(t, 33)
	scfg.Bind = sb
	ccfg.RemoteAddr, ccfg.Bind = sb.LocalAddr(), ib
	cli, srv := connect(t, ccfg, scfg)
	c, s := openAccepted(t, cli, srv)
	c.Write([]byte("x"))
	mustRead(t, s, []byte("x"))

	forger, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	rej := wire.AppendHeader(nil, &wire.Header{Type: wire.PacketReject, SenderIndex: ib.remote.Load()})
	if _, err := forger.WriteToUDPAddrPort(rej, cb.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return cli.Stats().Rehandshakes == 1 })
	waitFor(t, func() bool { return srv.Stats().ResumesDeclined >= 1 })
	time.Sleep(200 * time.Millisecond) // the server would have answered by now
	for i := range 3 {
		msg := []byte{'a' + byte(i)}
		if _, err := c.Write(msg); err != nil {
			t.Fatalf("write after a forged REJECT: %v", err)
		}
		mustRead(t, s, msg)
		s.Write(msg)
		mustRead(t, c, msg)
	}
	c.Close()
	s.Close()
}

// initBind records the first handshake initiation it sends.
type initBind struct {
	crashBind
	first atomic.Pointer[[]byte]
}

func (c *initBind) WriteBatch(bufs [][]byte, ep netip.AddrPort) error {
	for _, b := range bufs {
		if h, _, err := wire.ParseHeader(b); err == nil && h.Type == wire.PacketHandshakeInit && c.first.Load() == nil {
			p := append([]byte(nil), b...)
			c.first.Store(&p)
		}
	}
	return c.crashBind.WriteBatch(bufs, ep)
}

// TestNearEdgeRestart: the client dies without a word while the server's
// session is established, and a new client process (same key, newer
// handshake timestamp) dials from another port. The server answers at
// once, without waiting for its idle timeout, resets the old session's
// streams and serves the new one; a replay of the old client's initiation
// afterwards changes nothing.
func TestNearEdgeRestart(t *testing.T) {
	leaktest.Check(t)
	cb := listenUDP(t, netip.MustParseAddrPort("127.0.0.1:0"))
	sb := listenUDP(t, netip.MustParseAddrPort("127.0.0.1:0"))
	ib := &initBind{crashBind: crashBind{Conn: cb}}
	ccfg, scfg := pairConfigs(t, 41)
	ccfg.RemoteAddr, ccfg.Bind = sb.LocalAddr(), ib
	scfg.Bind = sb
	cli, srv := connect(t, ccfg, scfg)
	c, s := openAccepted(t, cli, srv)
	c.Write([]byte("before"))
	mustRead(t, s, []byte("before"))

	// The near edge dies: its CLOSE never leaves.
	ib.dead.Store(true)
	cli.Close()
	rerr := readOnce(s)
	start := time.Now()

	// A new process: same key, a later handshake timestamp, a new port.
	ccfg2, _ := pairConfigs(t, 41)
	ccfg2.Tunnel.Rand = seed.ChaCha8(42)
	ccfg2.RemoteAddr, ccfg2.Network, ccfg2.LocalAddr = sb.LocalAddr(), "udp4", netip.MustParseAddrPort("127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cli2, err := Dial(ctx, ccfg2)
	if err != nil {
		t.Fatalf("the restarted client could not dial the established server: %v", err)
	}
	defer cli2.Close()
	wantPeerRestarted(t, rerr, "the server's stream from before the crash")
	s.Close()
	// Well under the idle timeout.
	c2, s2 := servedWithin(t, cli2, srv, start, 2*time.Second, "the restarted client was served")
	if st := srv.Stats(); st.ClientRestarts != 1 || st.PeerAddr != cli2.LocalAddr() {
		t.Errorf("server: ClientRestarts %d, peer %v; want 1 and %v", st.ClientRestarts, st.PeerAddr, cli2.LocalAddr())
	}

	// A replay of the dead client's initiation, from anywhere, is refused.
	old := ib.first.Load()
	if old == nil {
		t.Fatal("no initiation recorded")
	}
	replayer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer replayer.Close()
	for range 3 {
		if _, err := replayer.WriteToUDPAddrPort(*old, sb.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	for i := range 3 {
		msg := []byte{'a' + byte(i)}
		c2.Write(msg)
		mustRead(t, s2, msg)
	}
	if st := srv.Stats(); st.ClientRestarts != 1 || st.PeerAddr != cli2.LocalAddr() {
		t.Errorf("after the replay: ClientRestarts %d, peer %v; want 1 and %v", st.ClientRestarts, st.PeerAddr, cli2.LocalAddr())
	}
	c2.Close()
	s2.Close()
}
