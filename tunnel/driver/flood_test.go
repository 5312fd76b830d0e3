package driver

import (
	"context"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/seed"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// TestHandshakeFlood: a server waiting for its peer takes a flood of
// 20,000 initiations a second from keys it does not allow (with a valid
// mac1) for 10 s (2 s with -short, a tenth of the rate under -race). The
// peer's dial, started into the flood, completes within 1 s: the flood
// is dropped after a hash, and the peer proves its address with a
// cookie.
func TestHandshakeFlood(t *testing.T) {
	leaktest.Check(t)
	rate, length := 20000, 10*time.Second
	if testing.Short() {
		length = 2 * time.Second
	}
	if raceEnabled {
		rate /= 10
	}
	ccfg, scfg := pairConfigs(t, 71)
	sb := listenUDP(t, netip.MustParseAddrPort("127.0.0.1:0"))
	scfg.Bind = sb
	saddr := sb.LocalAddr()
	ctx, cancel := context.WithTimeout(context.Background(), length+20*time.Second)
	defer cancel()
	srvCh := listenAsync(ctx, scfg)

	// Initiations from 64 keys the server does not allow.
	var junk [][]byte
	for i := range 64 {
		k, err := crypt.GenerateKey(seed.ChaCha8(uint64(1000 + i)))
		if err != nil {
			t.Fatal(err)
		}
		cfg := ccfg.Tunnel
		cfg.PrivateKey, cfg.Rand, cfg.HandshakeTimestamp = k, seed.ChaCha8(uint64(2000+i)), 1
		c, err := tunnel.NewClientConn(cfg, monotime.Now())
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 2048)
		n := c.PollTransmit(monotime.Now(), buf)
		junk = append(junk, buf[:n])
	}
	flooder, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer flooder.Close()
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	floodDone := make(chan int, 1)
	go func() {
		sent := 0
		start := time.Now()
		for time.Since(start) < length {
			due := int(time.Since(start).Seconds() * float64(rate))
			for ; sent < due; sent++ {
				flooder.WriteToUDPAddrPort(junk[sent%len(junk)], saddr)
			}
			time.Sleep(time.Millisecond)
		}
		floodDone <- sent
	}()

	time.Sleep(min(length/4, time.Second)) // into the flood
	ccfg.RemoteAddr, ccfg.Network, ccfg.LocalAddr = saddr, "udp4", netip.MustParseAddrPort("127.0.0.1:0")
	start := time.Now()
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	cli, err := Dial(dctx, ccfg)
	dcancel()
	dialTime := time.Since(start)
	if err != nil {
		t.Fatalf("the peer could not dial into the flood: %v", err)
	}
	defer cli.Close()
	r := <-srvCh
	if r.err != nil {
		t.Fatalf("Listen: %v", r.err)
	}
	defer r.t.Close()
	sent := <-floodDone
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime)-syscall.TimevalToNsec(ru0.Utime)) +
		time.Duration(syscall.TimevalToNsec(ru1.Stime)-syscall.TimevalToNsec(ru0.Stime))
	st := r.t.Stats()
	t.Logf("%d initiations in %v (%d/s); the peer's dial took %v; gate %+v; process CPU %v, %.1f µs per flood initiation (flooder's sending included)",
		sent, length, rate, dialTime.Round(time.Millisecond), st.Gate, cpu.Round(time.Millisecond), float64(cpu.Microseconds())/float64(sent))
	if dialTime > time.Second {
		t.Errorf("the peer's dial took %v into the flood; want within 1 s", dialTime)
	}
	// The flood's keys are not allowed: every Diffie-Hellman spent on them
	// is waste. The gate lets through only what arrives before the load
	// shows and a source's small burst.
	if st.Gate.Admitted > 100 {
		t.Errorf("%d initiations reached a Diffie-Hellman; want a few dozen at most", st.Gate.Admitted)
	}
}
