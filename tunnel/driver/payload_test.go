package driver

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/tunnel"
)

// TestMixedPayloadSizes connects an edge sized for an IPv6 peer (1,452-byte
// datagrams, tunnel.MaxUDPPayloadBytesFor) with one at the IPv4 default
// (1,472), as a near edge dialling over IPv6 meets a far edge listening
// on every address: both directions must carry full-size packets, so the
// smaller edge hears the larger one's.
func TestMixedPayloadSizes(t *testing.T) {
	small := tunnel.MaxUDPPayloadBytesFor(netip.MustParseAddr("2001:2::2"))
	if small != 1452 {
		t.Fatalf("MaxUDPPayloadBytesFor(an IPv6 address) = %d, want 1452", small)
	}
	cli, srv := memPair(t, 7, func(c, s *Config) { c.Tunnel.MaxUDPPayloadBytes = small })
	c, s := openAccepted(t, cli, srv)
	const size = 2 << 20
	var wg sync.WaitGroup
	type result struct {
		sent, got [32]byte
		n         int64
		err       error
	}
	var up, down result
	wg.Add(2)
	go func() { defer wg.Done(); up.sent, up.err = sendPattern(c, 1, size, 32<<10) }()
	go func() { defer wg.Done(); down.sent, down.err = sendPattern(s, 2, size, 32<<10) }()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var rwg sync.WaitGroup
		rwg.Add(2)
		go func() { defer rwg.Done(); up.n, up.got, _ = recvAll(s, 64<<10) }()
		go func() { defer rwg.Done(); down.n, down.got, _ = recvAll(c, 64<<10) }()
		rwg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		c.Close()
		s.Close()
		<-done
		t.Fatalf("2 MB each way between %d- and %d-byte datagrams did not arrive within 20 s: up %d bytes, down %d (the smaller edge drops the larger one's packets?)",
			small, tunnel.DefaultMaxUDPPayloadBytes, up.n, down.n)
	}
	wg.Wait()
	if up.err != nil || down.err != nil {
		t.Fatalf("send: up %v, down %v", up.err, down.err)
	}
	if up.n != size || down.n != size || up.sent != up.got || down.sent != down.got {
		t.Fatalf("received %d up and %d down of %d bytes each, hashes equal %v/%v", up.n, down.n, size, up.sent == up.got, down.sent == down.got)
	}
}
