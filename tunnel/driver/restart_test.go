package driver

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

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
	checkLeaks(t)
	sb, err := bind.Listen("udp4", netip.MustParseAddrPort("127.0.0.1:0"), bind.Options{})
	if err != nil {
		t.Fatal(err)
	}
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
	sb2, err := bind.Listen("udp4", saddr, bind.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, scfg2 := pairConfigs(t, 31)
	scfg2.Tunnel.Rand = seeded(32)
	scfg2.Bind = sb2
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srvCh := make(chan *Tunnel, 1)
	go func() {
		s, err := Listen(ctx, scfg2)
		if err != nil {
			t.Errorf("listen again: %v", err)
		}
		srvCh <- s
	}()

	// The old stream's traffic draws the REJECT; its Read is reset.
	rerr := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 10))
		rerr <- err
	}()
	c.Write([]byte("after the crash"))
	var se *StreamError
	select {
	case err := <-rerr:
		if !errors.As(err, &se) || se.Code != CodePeerRestarted {
			t.Fatalf("read on a stream of the dead session: %v; want a reset with CodePeerRestarted", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream of the dead session not reset within 5 s")
	}
	c.Close()
	srv2 := <-srvCh
	if srv2 == nil {
		return
	}
	defer srv2.Close()
	c, s = openAccepted(t, cli, srv2)
	c.Write([]byte("new session"))
	mustRead(t, s, []byte("new session"))
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("new flows worked again after %v; want under 5 s", d)
	} else {
		t.Logf("new flows work again %v after the restart", d)
	}
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
	checkLeaks(t)
	sb, err := bind.Listen("udp4", netip.MustParseAddrPort("127.0.0.1:0"), bind.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := bind.Listen("udp4", netip.MustParseAddrPort("127.0.0.1:0"), bind.Options{})
	if err != nil {
		t.Fatal(err)
	}
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
