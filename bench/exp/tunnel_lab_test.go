package exp

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/harness/labtest"
	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/wanem"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// listenIn opens a UDP socket for the tunnel inside a lab namespace.
func listenIn(t *testing.T, ns string, addr netip.AddrPort) bind.Conn {
	t.Helper()
	var c bind.Conn
	err := lab.InNetns(ns, func() error {
		var err error
		c, err = bind.Listen("udp4", addr, bind.Options{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTunnelThroughLabLink runs the real tunnel between two lab namespaces
// over 100 Mbit/s, 100 ms, 1 % loss each way: a stream carries 24 MB each
// way at once, both arriving intact (SHA-256).
func TestTunnelThroughLabLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab creates network namespaces and needs root (run 'sudo make test')")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	link := wanem.Config{Delay: 50 * time.Millisecond, LossPct: 1, RateBps: 100e6, QueueBytes: 2_500_000}
	ba := link
	ba.Seed = 2
	l := labtest.NewLab(t, ctx, lab.Direct, link, ba)
	ck, _ := crypt.GenerateKey(rand.Reader)
	sk, _ := crypt.GenerateKey(rand.Reader)
	srvAddr := netip.AddrPortFrom(l.Server.Addr, 7400)
	type listened struct {
		t   *driver.Tunnel
		err error
	}
	lc := make(chan listened, 1)
	go func() {
		tun, err := driver.Listen(ctx, driver.Config{Tunnel: tunnel.Config{PrivateKey: sk, PeerPublicKey: ck.PublicKey()},
			Bind: listenIn(t, l.Server.NS, srvAddr)})
		lc <- listened{tun, err}
	}()
	cli, err := driver.Dial(ctx, driver.Config{Tunnel: tunnel.Config{PrivateKey: ck, PeerPublicKey: sk.PublicKey()},
		RemoteAddr: srvAddr, Bind: listenIn(t, l.Client.NS, netip.AddrPortFrom(l.Client.Addr, 0))})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ls := <-lc
	if ls.err != nil {
		t.Fatal(ls.err)
	}
	srv := ls.t
	defer srv.Close()

	const size = 24 << 20
	data := make([]byte, size)
	rand.Read(data)
	want := sha256.Sum256(data)
	start := time.Now()
	type got struct {
		sum [32]byte
		n   int
		err error
	}
	serverGot := make(chan got, 1)
	go func() {
		in, err := srv.AcceptStream(ctx)
		if err != nil {
			serverGot <- got{err: err}
			return
		}
		s, err := in.Accept()
		if err != nil {
			serverGot <- got{err: err}
			return
		}
		go func() { s.Write(data); s.CloseWrite() }()
		b, err := io.ReadAll(s)
		serverGot <- got{sha256.Sum256(b), len(b), err}
	}()
	s, err := cli.OpenStream(ctx, netip.MustParseAddrPort("198.18.0.1:40000"), netip.MustParseAddrPort("198.18.0.2:5001"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { s.Write(data); s.CloseWrite() }()
	back, err := io.ReadAll(s)
	if err != nil {
		t.Fatalf("client read: %v", err)
	}
	sg := <-serverGot
	el := time.Since(start)
	if sg.err != nil {
		t.Fatalf("server: %v", sg.err)
	}
	if sg.n != size || sg.sum != want {
		t.Errorf("client→server: %d bytes, hash match %v", sg.n, sg.sum == want)
	}
	if len(back) != size || !bytes.Equal(back, data) {
		t.Errorf("server→client: %d bytes, equal %v", len(back), bytes.Equal(back, data))
	}
	st := cli.Stats()
	t.Logf("24 MB each way over 100 Mbit/s, 100 ms, 1%% loss: %v (%.1f Mbit/s each way); client lost %d packets, retransmitted %d B",
		el, float64(size)*8/el.Seconds()/1e6, st.Tunnel.PacketsLost, st.Tunnel.StreamBytesRetransmitted)
}
