// Package drivertest gives tests of the driver's users (the bridge, the
// egress) a connected pair of tunnels, in memory or over any binds.
package drivertest

import (
	"context"
	"crypto/rand"
	"log/slog"
	"testing"
	"time"

	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind/bindtest"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// Pair connects two tunnels over an in-memory bind: near dialled, far
// listening. Both close when the test ends. log may be nil.
func Pair(t testing.TB, log *slog.Logger) (near, far *driver.Tunnel) {
	t.Helper()
	ck, err := crypt.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := crypt.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	a, b := bindtest.NewPair(bindtest.Config{})
	ccfg := driver.Config{Tunnel: tunnel.Config{PrivateKey: ck, PeerPublicKey: sk.PublicKey()}, Bind: a, RemoteAddr: b.LocalAddr(), Logger: log}
	scfg := driver.Config{Tunnel: tunnel.Config{PrivateKey: sk, PeerPublicKey: ck.PublicKey()}, Bind: b, Logger: log}
	return Connect(t, ccfg, scfg)
}

// Connect dials with near's configuration while listening with far's, and
// returns the two tunnels, which close when the test ends; it fails the
// test if either side fails within 10 s.
func Connect(t testing.TB, nearCfg, farCfg driver.Config) (near, far *driver.Tunnel) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		t   *driver.Tunnel
		err error
	}
	ch := make(chan res, 1)
	go func() { s, err := driver.Listen(ctx, farCfg); ch <- res{s, err} }()
	near, err := driver.Dial(ctx, nearCfg)
	r := <-ch
	if err != nil || r.err != nil {
		if near != nil {
			near.Close()
		}
		if r.t != nil {
			r.t.Close()
		}
		t.Fatalf("dial: %v; listen: %v", err, r.err)
	}
	t.Cleanup(func() { near.Close(); r.t.Close() })
	return near, r.t
}
