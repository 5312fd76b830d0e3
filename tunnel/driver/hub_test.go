package driver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/seed"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// served is a server tunnel a hubServe runs, with its socket.
type served struct {
	t  *Tunnel
	bc interface{ Close() error }
}

// hubServe runs Listen for peer on the hub over and over until ctx ends,
// echoing every stream, and sends each established tunnel on up.
func hubServe(ctx context.Context, t *testing.T, h *Hub, sk crypt.PrivateKey, peer crypt.PublicKey, stamps *crypt.Timestamps, up chan<- served, wg *sync.WaitGroup) {
	defer wg.Done()
	for ctx.Err() == nil {
		bc, err := h.Bind(peer)
		if err != nil {
			t.Errorf("hub bind: %v", err)
			return
		}
		srv, err := Listen(ctx, Config{Bind: bc, NoGate: true, Logger: testLogger(t),
			Tunnel: tunnel.Config{PrivateKey: sk, PeerPublicKey: peer, Timestamps: stamps}})
		if err != nil {
			return // ctx ended
		}
		up <- served{srv, bc}
		for {
			in, err := srv.AcceptStream(ctx)
			if err != nil {
				break
			}
			s, err := in.Accept()
			if err != nil {
				continue
			}
			go func() { io.Copy(s, s); s.CloseWrite() }()
		}
		srv.Close()
	}
}

// echoThrough sends 256 KiB on a new stream of cli and checks the echo.
func echoThrough(t *testing.T, ctx context.Context, cli *Tunnel, sd uint64) error {
	s, err := cli.OpenStream(ctx, netip.MustParseAddrPort("198.18.1.2:40000"), netip.MustParseAddrPort("198.18.2.2:7"))
	if err != nil {
		return err
	}
	defer s.Close()
	data := make([]byte, 256<<10)
	seed.ChaCha8(sd).Read(data)
	go func() { s.Write(data); s.CloseWrite() }()
	got, err := io.ReadAll(s)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return errors.New("echo differs")
	}
	return nil
}

// TestHub: three peers' tunnels share one server socket through a Hub.
// Each client reaches its own tunnel, a key with no Bind gets nothing,
// and when one peer's server tunnel is replaced, the hub answers that
// client's data with a REJECT and the client handshakes with the new one
// while the others go on.
func TestHub(t *testing.T) {
	leaktest.Check(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sk, _ := crypt.GenerateKey(seed.ChaCha8(100))
	h := NewHub(listenUDP(t, netip.MustParseAddrPort("127.0.0.1:0")), sk, HubOptions{Logger: testLogger(t)})
	defer h.Close()
	stamps := crypt.NewTimestamps()
	const peers = 3
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	keys := make([]crypt.PrivateKey, peers)
	servers := make([]chan served, peers)
	for i := range keys {
		keys[i], _ = crypt.GenerateKey(seed.ChaCha8(uint64(200 + i)))
		servers[i] = make(chan served, 4)
		wg.Add(1)
		go hubServe(ctx, t, h, sk, keys[i].PublicKey(), stamps, servers[i], &wg)
	}
	dial := func(k crypt.PrivateKey, within time.Duration) (*Tunnel, error) {
		dctx, dcancel := context.WithTimeout(ctx, within)
		defer dcancel()
		return Dial(dctx, Config{RemoteAddr: h.LocalAddr(), Bind: listenUDP(t, netip.MustParseAddrPort("127.0.0.1:0")), Logger: testLogger(t),
			Tunnel: tunnel.Config{PrivateKey: k, PeerPublicKey: sk.PublicKey()}})
	}
	clients := make([]*Tunnel, peers)
	var dwg sync.WaitGroup
	for i := range clients {
		dwg.Add(1)
		go func() {
			defer dwg.Done()
			c, err := dial(keys[i], 10*time.Second)
			if err != nil {
				t.Errorf("client %d: dial: %v", i, err)
				return
			}
			clients[i] = c
		}()
	}
	dwg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, c := range clients {
		defer c.Close()
	}
	first := make([]*Tunnel, peers)
	var firstBind interface{ Close() error }
	for i := range first {
		sv := <-servers[i]
		first[i] = sv.t
		if i == 0 {
			firstBind = sv.bc
		}
	}
	var ewg sync.WaitGroup
	for i, c := range clients {
		ewg.Add(1)
		go func() {
			defer ewg.Done()
			if err := echoThrough(t, ctx, c, uint64(i)); err != nil {
				t.Errorf("client %d: echo: %v", i, err)
			}
		}()
	}
	ewg.Wait()
	for i, s := range first {
		if got := s.Stats().Tunnel.StreamsAccepted; got != 1 {
			t.Errorf("server tunnel %d accepted %d streams; want its client's one", i, got)
		}
	}

	stranger, _ := crypt.GenerateKey(seed.ChaCha8(999))
	if c, err := dial(stranger, time.Second); err == nil {
		c.Close()
		t.Error("a key the hub serves no Bind for got a tunnel")
	}
	if n := h.Stats().UnknownKey; n == 0 {
		t.Error("the stranger's initiations were not counted")
	}

	// Peer 0's server tunnel vanishes without a word to its client (its
	// socket closes first, as in a crash); a new Listen takes its place.
	firstBind.Close()
	first[0].Close()
	select {
	case <-servers[0]:
		t.Fatal("a new server tunnel came before its client handshook")
	case <-time.After(100 * time.Millisecond):
	}
	// The first stream after the loss meets the REJECT and fails with the
	// old session; the next ones go through the new tunnel.
	start := time.Now()
	for err := echoThrough(t, ctx, clients[0], 7); err != nil; err = echoThrough(t, ctx, clients[0], 7) {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("client 0 after its server tunnel was replaced: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("client 0 echoes through its new server tunnel %v after the loss", time.Since(start).Round(time.Millisecond))
	second := (<-servers[0]).t
	if h.Stats().Rejects == 0 || clients[0].Stats().Rehandshakes == 0 {
		t.Errorf("hub sent %d REJECTs, client 0 handshook again %d times; want both", h.Stats().Rejects, clients[0].Stats().Rehandshakes)
	}
	if second.Stats().Tunnel.StreamsAccepted != 1 {
		t.Errorf("the new server tunnel accepted %d streams", second.Stats().Tunnel.StreamsAccepted)
	}
	if err := echoThrough(t, ctx, clients[1], 8); err != nil {
		t.Errorf("client 1 meanwhile: %v", err)
	}
}

// TestHubDeliveryAllocs: handing a datagram to a peer's socket and reading
// it there allocates nothing (the buffers come from a pool).
func TestHubDeliveryAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates; run without -race")
	}
	c := &hubConn{h: &Hub{}, q: make(chan hubDatagram, 4), closed: make(chan struct{})}
	p := make([]byte, 1400)
	ep := netip.MustParseAddrPort("198.18.0.1:4500")
	bufs, sizes, eps := [][]byte{make([]byte, hubBufLen)}, make([]int, 1), make([]netip.AddrPort, 1)
	if n := testing.AllocsPerRun(1000, func() {
		c.deliver(p, ep)
		if k, err := c.ReadBatch(bufs, sizes, eps); k != 1 || err != nil || sizes[0] != len(p) {
			t.Fatalf("ReadBatch: %d, %v, size %d", k, err, sizes[0])
		}
	}); n != 0 {
		t.Errorf("%.1f allocations per datagram; want 0", n)
	}
}

// TestHubConnReadWait: a peer's socket tells its reader's waits
// (bind.WaitNotifier) when nothing is queued for it, not when a
// datagram is.
func TestHubConnReadWait(t *testing.T) {
	c := &hubConn{h: &Hub{}, q: make(chan hubDatagram, 4), closed: make(chan struct{})}
	waits := make(chan struct{}, 4)
	c.OnReadWait(func() { waits <- struct{}{} })
	p := make([]byte, 100)
	ep := netip.MustParseAddrPort("198.18.0.1:4500")
	bufs, sizes, eps := [][]byte{make([]byte, hubBufLen)}, make([]int, 1), make([]netip.AddrPort, 1)

	c.deliver(p, ep)
	if k, err := c.ReadBatch(bufs, sizes, eps); k != 1 || err != nil {
		t.Fatalf("ReadBatch of a queued datagram: %d, %v", k, err)
	}
	if len(waits) != 0 {
		t.Fatal("a wait was told with a datagram queued")
	}
	got := make(chan int, 1)
	go func() {
		k, _ := c.ReadBatch(bufs, sizes, eps)
		got <- k
	}()
	select { // the read found nothing: it says so before it waits
	case <-waits:
	case <-time.After(5 * time.Second):
		t.Fatal("a read of an empty socket did not tell its wait")
	}
	c.deliver(p, ep)
	if k := <-got; k != 1 {
		t.Fatalf("the waiting read returned %d datagrams, want 1", k)
	}
}
