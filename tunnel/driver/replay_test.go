package driver

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/seed"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// replayer sends captured datagrams from a socket of its own and reports
// whether anything came back.
type replayer struct{ c *net.UDPConn }

func newReplayer(t *testing.T) *replayer {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &replayer{c}
}

func (r *replayer) send(t *testing.T, p []byte, to netip.AddrPort) {
	t.Helper()
	if _, err := r.c.WriteToUDPAddrPort(p, to); err != nil {
		t.Fatal(err)
	}
}

// listenAgain runs Listen(ctx, cfg) in the background, as a restarted
// server does; the channel gets the tunnel (nil if Listen failed).
func listenAgain(t *testing.T, ctx context.Context, cfg Config) <-chan *Tunnel {
	ch := make(chan *Tunnel, 1)
	go func() {
		s, err := Listen(ctx, cfg)
		if err != nil {
			t.Errorf("listen again: %v", err)
		}
		ch <- s
	}()
	return ch
}

// answered reports whether a datagram arrives within d.
func (r *replayer) answered(d time.Duration) bool {
	r.c.SetReadDeadline(time.Now().Add(d))
	_, _, err := r.c.ReadFromUDPAddrPort(make([]byte, 2048))
	return err == nil
}

// TestReplayAfterTeardown: a server process keeps its handshake memory
// across the connections it accepts (Config.Tunnel.Timestamps), so an
// initiation captured from an earlier connection and replayed after it
// ended gets no answer; the real client, whose initiations carry fresh
// timestamps, connects at once.
func TestReplayAfterTeardown(t *testing.T) {
	leaktest.Check(t)
	stamps := crypt.NewTimestamps()
	cb := listenUDP(t, netip.MustParseAddrPort("127.0.0.1:0"))
	sb := listenUDP(t, netip.MustParseAddrPort("127.0.0.1:0"))
	saddr := sb.LocalAddr()
	ib := &initBind{crashBind: crashBind{Conn: cb}}
	ccfg, scfg := pairConfigs(t, 51)
	ccfg.RemoteAddr, ccfg.Bind = saddr, ib
	scfg.Bind, scfg.Tunnel.Timestamps = sb, stamps
	cli, srv := connect(t, ccfg, scfg)
	c, s := openAccepted(t, cli, srv)
	c.Write([]byte("x"))
	mustRead(t, s, []byte("x"))
	old := ib.first.Load()
	if old == nil {
		t.Fatal("no initiation recorded")
	}
	cli.Close()
	srv.Close()

	// The next connection of the same server process.
	sb2 := listenUDP(t, saddr)
	_, scfg2 := pairConfigs(t, 51)
	scfg2.Bind, scfg2.Tunnel.Timestamps, scfg2.Tunnel.Rand = sb2, stamps, seed.ChaCha8(52)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srvCh := listenAgain(t, ctx, scfg2)
	r := newReplayer(t)
	for range 3 {
		r.send(t, *old, saddr)
	}
	if r.answered(300 * time.Millisecond) {
		t.Error("the replayed initiation was answered")
	}
	select {
	case <-srvCh:
		t.Fatal("Listen completed on a replay")
	default:
	}

	// The real client dials again: answered at once.
	ccfg2, _ := pairConfigs(t, 51)
	ccfg2.Tunnel.Rand = seed.ChaCha8(53)
	ccfg2.RemoteAddr, ccfg2.Network, ccfg2.LocalAddr = saddr, "udp4", netip.MustParseAddrPort("127.0.0.1:0")
	start := time.Now()
	cli2, err := Dial(ctx, ccfg2)
	if err != nil {
		t.Fatalf("the client could not dial again: %v", err)
	}
	defer cli2.Close()
	srv2 := <-srvCh
	if srv2 == nil {
		return
	}
	defer srv2.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("dial took %v", d)
	}
	if st := srv2.Stats(); st.PeerAddr != cli2.LocalAddr() {
		t.Errorf("server's peer %v; want the real client %v (a replay moved it?)", st.PeerAddr, cli2.LocalAddr())
	}
}

// TestFarRestartWithReplay: the server process restarts (its handshake
// memory is gone) and an attacker replays a captured initiation. The
// restarted server answers it, but that session is useless without the
// client's ephemeral key, and the client's own newer handshake replaces
// it within 2 s of the restart.
func TestFarRestartWithReplay(t *testing.T) {
	leaktest.Check(t)
	cb := listenUDP(t, netip.MustParseAddrPort("127.0.0.1:0"))
	sb := listenUDP(t, netip.MustParseAddrPort("127.0.0.1:0"))
	saddr := sb.LocalAddr()
	ib := &initBind{crashBind: crashBind{Conn: cb}}
	crash := &crashBind{Conn: sb}
	ccfg, scfg := pairConfigs(t, 61)
	ccfg.RemoteAddr, ccfg.Bind = saddr, ib
	scfg.Bind, scfg.Tunnel.Timestamps = crash, crypt.NewTimestamps()
	cli, srv := connect(t, ccfg, scfg)
	c, s := openAccepted(t, cli, srv)
	c.Write([]byte("x"))
	mustRead(t, s, []byte("x"))
	old := ib.first.Load()

	// The far edge dies without a word and comes back with empty memory.
	crash.dead.Store(true)
	srv.Close()
	start := time.Now()
	sb2 := listenUDP(t, saddr)
	_, scfg2 := pairConfigs(t, 61)
	scfg2.Bind, scfg2.Tunnel.Timestamps, scfg2.Tunnel.Rand = sb2, crypt.NewTimestamps(), seed.ChaCha8(62)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srvCh := listenAgain(t, ctx, scfg2)
	r := newReplayer(t)
	time.Sleep(50 * time.Millisecond) // the new server listens
	r.send(t, *old, saddr)

	// The client's traffic draws a REJECT; its new handshake wins.
	c.Write([]byte("after the restart"))
	srv2 := <-srvCh
	if srv2 == nil {
		return
	}
	defer srv2.Close()
	c.Close()
	c2, s2 := servedWithin(t, cli, srv2, start, 2*time.Second, "tunnel back after the restart, a replay injected,")
	if st := srv2.Stats(); st.PeerAddr != cli.LocalAddr() {
		t.Errorf("server's peer %v; want the client %v", st.PeerAddr, cli.LocalAddr())
	}
	c2.Close()
	s2.Close()
}
