package driver

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind/bindtest"
)

// TestDatagrams sends datagrams both ways between a tunnel pair: every one
// arrives intact (the in-memory bind loses nothing), through OnDatagram on
// the driver goroutine, and the counters agree.
func TestDatagrams(t *testing.T) {
	const n = 200
	got := [2]chan []byte{make(chan []byte, n), make(chan []byte, n)}
	cli, srv := memPair(t, 41, func(c, s *Config) {
		c.OnDatagram = func(p []byte) { got[0] <- bytes.Clone(p) }
		s.OnDatagram = func(p []byte) { got[1] <- bytes.Clone(p) }
	})
	if cli.MaxDatagramBytes() < 1200 || cli.MaxDatagramBytes() > tunnel.DefaultMaxUDPPayloadBytes {
		t.Fatalf("MaxDatagramBytes %d: want room for a 1,200-byte packet within one UDP payload", cli.MaxDatagramBytes())
	}
	payload := func(i int) []byte {
		b := bytes.Repeat([]byte{byte(i)}, 1+i*7%cli.MaxDatagramBytes())
		copy(b, fmt.Sprint(i))
		return b
	}
	for side, pair := range [][2]*Tunnel{{cli, srv}, {srv, cli}} {
		from := pair[0]
		buf := make([]byte, cli.MaxDatagramBytes())
		for i := range n {
			p := append(buf[:0], payload(i)...)
			// Pace the sender a little, in case its queue fills.
			for {
				err := from.SendDatagram(p)
				if err == nil {
					break
				}
				if !errors.Is(err, tunnel.ErrDatagramQueueFull) {
					t.Fatalf("side %d: SendDatagram %d: %v", side, i, err)
				}
				time.Sleep(time.Millisecond)
			}
			clear(p) // SendDatagram copied it
			if i%32 == 31 {
				time.Sleep(2 * time.Millisecond)
			}
		}
		recv := got[1-side]
		seen := map[string]bool{}
		for i := range n {
			select {
			case p := <-recv:
				seen[string(p)] = true
			case <-time.After(5 * time.Second):
				t.Fatalf("side %d: %d of %d datagrams arrived", side, i, n)
			}
		}
		for i := range n {
			if !seen[string(payload(i))] {
				t.Fatalf("side %d: datagram %d did not arrive intact", side, i)
			}
		}
	}
	cs, ss := cli.Stats(), srv.Stats()
	if cs.Tunnel.DatagramsReceived != n || ss.Tunnel.DatagramsReceived != n {
		t.Errorf("datagrams received: client %d, server %d; want %d each", cs.Tunnel.DatagramsReceived, ss.Tunnel.DatagramsReceived, n)
	}
	if cs.Tunnel.DatagramsSent < n || ss.Tunnel.DatagramsSent < n {
		t.Errorf("datagrams sent: client %d, server %d; want at least %d", cs.Tunnel.DatagramsSent, ss.Tunnel.DatagramsSent, n)
	}

	big := make([]byte, cli.MaxDatagramBytes()+1)
	if err := cli.SendDatagram(big); !errors.Is(err, tunnel.ErrDatagramTooLarge) {
		t.Errorf("SendDatagram of %d bytes: %v, want ErrDatagramTooLarge", len(big), err)
	}
	cli.Close()
	if err := cli.SendDatagram([]byte("x")); !errors.Is(err, ErrTunnelClosed) {
		t.Errorf("SendDatagram after Close: %v, want ErrTunnelClosed", err)
	}
}

// TestDatagramsAfterStall: datagrams that arrive while the driver is busy
// (stuck in OnDatagram, as a starved edge is off the CPU) wait in the
// receive batches and are all delivered afterwards, even when they far
// outnumber the Conn's queue of received datagrams: the driver hands
// each one on as it decodes it.
func TestDatagramsAfterStall(t *testing.T) {
	// n fits the client's initial window (10 packets): the server sends
	// no acknowledgement while it is held.
	const n, queue = 8, 2
	gate := make(chan struct{})
	got := make(chan []byte, n)
	cli, srv := memPair(t, 44, func(c, s *Config) {
		s.Tunnel.MaxDatagramQueue = queue
		s.OnDatagram = func(p []byte) {
			<-gate
			got <- bytes.Clone(p)
		}
	})
	var release sync.Once
	open := func() { release.Do(func() { close(gate) }) }
	t.Cleanup(open) // before the tunnels close (cleanups run last first)
	// 1,000 bytes: one datagram per packet.
	dg := make([]byte, 1000)
	for i := range n {
		dg[0] = byte(i)
		if err := cli.SendDatagram(dg); err != nil {
			t.Fatalf("SendDatagram %d: %v", i, err)
		}
	}
	// Wait until the client has sent them all, while the server's driver
	// is held in the first OnDatagram.
	deadline := time.Now().Add(5 * time.Second)
	for cli.Stats().Tunnel.DatagramsSent < n {
		if time.Now().After(deadline) {
			t.Fatalf("the client sent %d of %d datagrams", cli.Stats().Tunnel.DatagramsSent, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let them reach the server's reader
	open()
	for i := range n {
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			st := srv.Stats()
			t.Fatalf("%d of %d datagrams delivered; the server dropped %d (queue of %d)", i, n, st.Tunnel.DatagramsDropped, queue)
		}
	}
	if d := srv.Stats().Tunnel.DatagramsDropped; d != 0 {
		t.Errorf("the server dropped %d datagrams", d)
	}
}

// TestDatagramsUnclaimed: without OnDatagram the peer's datagrams are
// counted and dropped.
func TestDatagramsUnclaimed(t *testing.T) {
	cli, srv := memPair(t, 42, nil)
	for range 5 {
		if err := cli.SendDatagram([]byte("nobody listens")); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for srv.Stats().DatagramsUnclaimed < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("unclaimed datagrams: %+v", srv.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDatagramQueueFull: SendDatagram never blocks; with the driver not
// taking datagrams (it is not running here), the queue fills at
// Config.DatagramQueue and the rest are refused and counted.
func TestDatagramQueueFull(t *testing.T) {
	ccfg, _ := pairConfigs(t, 43)
	a, b := bindtest.NewPair(bindtest.Config{})
	defer b.Close()
	ccfg.Bind, ccfg.RemoteAddr, ccfg.DatagramQueue = a, b.LocalAddr(), 4
	cfg, err := ccfg.resolve(true)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tunnel.NewClientConn(cfg.Tunnel, monotime.Now())
	if err != nil {
		t.Fatal(err)
	}
	tn := newTunnel(cfg, a, conn, true)
	defer a.Close()
	for i := range 4 {
		if err := tn.SendDatagram([]byte{byte(i)}); err != nil {
			t.Fatalf("datagram %d of a queue of 4: %v", i, err)
		}
	}
	start := time.Now()
	err = tn.SendDatagram([]byte{4})
	if !errors.Is(err, tunnel.ErrDatagramQueueFull) {
		t.Fatalf("fifth datagram: %v, want ErrDatagramQueueFull", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("a refused SendDatagram took %v", d)
	}
	if got := tn.dgQueueDrops.Load(); got != 1 {
		t.Errorf("queue drops %d, want 1", got)
	}
}

// TestMaxDatagramFollowsPathMTU: the datagram limit callers see is what
// one packet of the path MTU found carries: over a path that drops
// client datagrams above 1,272 bytes it settles there, while the other
// direction, which carries the ceiling, allows more.
func TestMaxDatagramFollowsPathMTU(t *testing.T) {
	const pathMTU = 1300 - 28
	got := make(chan []byte, 4)
	var a netip.AddrPort
	var bindA, bindB *bindtest.Conn
	bindA, bindB = bindtest.NewPair(bindtest.Config{Drop: func(from, _ netip.AddrPort, b []byte) bool {
		return from == a && len(b) > pathMTU
	}})
	a = bindA.LocalAddr()
	ccfg, scfg := pairConfigs(t, 43)
	ccfg.Bind, ccfg.RemoteAddr = bindA, bindB.LocalAddr()
	scfg.Bind = bindB
	scfg.OnDatagram = func(p []byte) { got <- bytes.Clone(p) }
	cli, srv := connect(t, ccfg, scfg)
	before := cli.MaxDatagramBytes()
	deadline := time.Now().Add(10 * time.Second)
	for cli.Stats().Tunnel.PathMTUSearching || srv.Stats().Tunnel.PathMTUSearching || cli.Stats().Tunnel.PMTUProbesSent == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("path MTU search not done in 10 s: client %+v, server %+v", cli.Stats().Tunnel.PathMTUStats, srv.Stats().Tunnel.PathMTUStats)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cs, ss := cli.Stats().Tunnel, srv.Stats().Tunnel
	if cs.PathMTUBytes != pathMTU || ss.PathMTUBytes != tunnel.DefaultMaxUDPPayloadBytes {
		t.Fatalf("path MTU client %d, server %d; want %d, %d", cs.PathMTUBytes, ss.PathMTUBytes, pathMTU, tunnel.DefaultMaxUDPPayloadBytes)
	}
	limit := cli.MaxDatagramBytes()
	t.Logf("client's datagram limit %d B before the search, %d after; server's %d", before, limit, srv.MaxDatagramBytes())
	if limit <= before || limit >= srv.MaxDatagramBytes() || limit > pathMTU-20 {
		t.Errorf("client's datagram limit %d (before %d, server's %d): want it grown to what a %d-byte packet carries, below the server's",
			limit, before, srv.MaxDatagramBytes(), pathMTU)
	}
	if err := cli.SendDatagram(make([]byte, limit+1)); !errors.Is(err, tunnel.ErrDatagramTooLarge) {
		t.Errorf("a datagram one byte over the limit: %v, want ErrDatagramTooLarge", err)
	}
	p := bytes.Repeat([]byte{7}, limit)
	if err := cli.SendDatagram(p); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, p) {
			t.Errorf("got %d bytes, want the %d sent", len(b), len(p))
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("a datagram of the limit (%d B) did not arrive over the %d-byte path", limit, pathMTU)
	}
}
