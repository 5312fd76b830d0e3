// Tests of the idle timeout: a dead path ends the tunnel at both ends,
// and a server that waits longer than it for its client still accepts it.

package driver

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind/bindtest"
)

// TestIdleTimeout: when the path goes dead, both ends close with
// tunnel.ErrIdleTimeout and blocked calls return.
func TestIdleTimeout(t *testing.T) {
	leaktest.Check(t)
	var dead atomic.Bool
	a, b := bindtest.NewPair(bindtest.Config{Drop: func(_, _ netip.AddrPort, _ []byte) bool { return dead.Load() }})
	ccfg, scfg := pairConfigs(t, 23)
	ccfg.Bind, ccfg.RemoteAddr, scfg.Bind = a, b.LocalAddr(), b
	ccfg.Tunnel.IdleTimeout = 300 * time.Millisecond
	scfg.Tunnel.IdleTimeout = 300 * time.Millisecond
	cli, srv := connect(t, ccfg, scfg)
	c, _ := openAccepted(t, cli, srv)
	dead.Store(true)
	start := time.Now()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, ErrTunnelClosed) || !errors.Is(err, tunnel.ErrIdleTimeout) {
		t.Fatalf("read on a dead path: %v, want ErrTunnelClosed wrapping tunnel.ErrIdleTimeout", err)
	}
	t.Logf("idle timeout noticed after %v", time.Since(start))
	<-srv.Done()
	if !errors.Is(srv.Err(), tunnel.ErrIdleTimeout) {
		t.Fatalf("server: %v", srv.Err())
	}
}

// TestListenRestarts: a server waiting longer than IdleTimeout for its
// client still accepts it.
func TestListenRestarts(t *testing.T) {
	leaktest.Check(t)
	a, b := bindtest.NewPair(bindtest.Config{})
	ccfg, scfg := pairConfigs(t, 24)
	ccfg.Bind, ccfg.RemoteAddr, scfg.Bind = a, b.LocalAddr(), b
	scfg.Tunnel.IdleTimeout = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch := make(chan *Tunnel, 1)
	go func() {
		s, err := Listen(ctx, scfg)
		if err != nil {
			t.Error(err)
		}
		ch <- s
	}()
	time.Sleep(350 * time.Millisecond) // several server restarts
	cli, err := Dial(ctx, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	srv := <-ch
	if srv == nil {
		return
	}
	defer srv.Close()
	c, s := openAccepted(t, cli, srv)
	c.Write([]byte("late"))
	mustRead(t, s, []byte("late"))
	c.Close()
	s.Close()
}
