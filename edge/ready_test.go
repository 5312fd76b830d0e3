package edge

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/internal/leaktest"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// freeUDP returns a loopback UDP address free a moment ago.
func freeUDP(t *testing.T) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// loopbackEdges makes a far edge listening on loopback UDP and a near edge
// dialling it, with real sockets (no root: no TUN). nearKnowsFar and
// farKnowsNear choose whether each has the other's key or a stranger's.
func loopbackEdges(t *testing.T, nearKnowsFar, farKnowsNear bool) (near *Near, far *Far) {
	t.Helper()
	kn, _ := crypt.GenerateKey(rand.Reader)
	kf, _ := crypt.GenerateKey(rand.Reader)
	stranger, _ := crypt.GenerateKey(rand.Reader)
	pol, _ := egress.ParsePolicy([]string{"127.0.0.1/32:9"})
	addr := freeUDP(t)
	farPeer, nearPeer := kn.PublicKey(), kf.PublicKey()
	if !farKnowsNear {
		farPeer = stranger.PublicKey()
	}
	if !nearKnowsFar {
		nearPeer = stranger.PublicKey()
	}
	far, err := NewFar(FarConfig{Shared: Shared{PrivateKey: kf, Policy: pol, Metrics: "127.0.0.1:0"}, PeerKey: farPeer, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	near, err = NewNear(NearConfig{Shared: Shared{PrivateKey: kn, Policy: pol, Metrics: "127.0.0.1:0"}, PeerKey: nearPeer, Peer: addr})
	if err != nil {
		t.Fatal(err)
	}
	return near, far
}

// waitFor polls cond every 10 ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// readyz is the status code and body of the edge's /readyz.
func readyz(t *testing.T, e served) (int, string) {
	t.Helper()
	addr := e.metricsAt()
	if addr == "" {
		return 0, "metrics server not started"
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestReadyz: with matching keys both edges become ready and /readyz
// answers 200; when the far edge stops, the near edge's /readyz answers
// 503 within 5 s, with the reason, and its status says the tunnel is
// down since then.
func TestReadyz(t *testing.T) {
	leaktest.Check(t)
	near, far := loopbackEdges(t, true, true)
	if ok, why := near.Ready(); ok || why != "edge not running" {
		t.Errorf("before Run: Ready() = %v, %q", ok, why)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	farCtx, stopFar := context.WithCancel(ctx)
	run, wait := edgeRunner(t, ctx)
	defer wait()
	defer cancel()
	farDone := make(chan struct{})
	go func() {
		defer close(farDone)
		if err := far.Run(farCtx); err != nil {
			t.Errorf("far Run: %v", err)
		}
	}()
	run(near)
	if !waitFor(5*time.Second, far.Serving) {
		t.Fatal("far edge not serving after 5 s")
	}
	for _, e := range []served{near, far} {
		if !waitFor(10*time.Second, func() bool { code, _ := readyz(t, e); return code == http.StatusOK }) {
			code, body := readyz(t, e)
			t.Fatalf("%s: /readyz = %d %q after 10 s; want 200", e.Role(), code, body)
		}
	}
	if s := near.Status().TunnelState; s == nil || s.State != "up" || s.LastHandshake.IsZero() || s.HandshakeAttempts != 0 {
		t.Errorf("near edge up: tunnel state %+v", s)
	}
	stopFar()
	<-farDone
	if far.Serving() {
		t.Error("a stopped far edge is serving")
	}
	start := time.Now()
	if !waitFor(5*time.Second, func() bool { code, _ := readyz(t, near); return code == http.StatusServiceUnavailable }) {
		code, body := readyz(t, near)
		t.Fatalf("near edge: /readyz = %d %q 5 s after the far edge stopped; want 503", code, body)
	}
	code, body := readyz(t, near)
	t.Logf("near edge %v after the far edge stopped: /readyz %d %q", time.Since(start).Round(time.Millisecond), code, body)
	if !strings.Contains(body, "down since") || !strings.Contains(body, far.cfg.Listen.String()) {
		t.Errorf("/readyz reason %q: want the peer's address and since when", body)
	}
	if s := near.Status().TunnelState; s == nil || s.State != "down" || s.LastError == "" || s.LastHandshake.IsZero() {
		t.Errorf("near edge down: tunnel state %+v; want down, the last handshake and the error", s)
	}
}

// TestWrongKeys: an edge pair whose keys do not match never comes up;
// the near edge counts its unanswered handshakes and says so, and the far
// edge counts what it refused, with the initiator's key where the
// handshake reveals it, though no tunnel is up.
func TestWrongKeys(t *testing.T) {
	leaktest.Check(t)
	for _, tc := range []struct {
		name                       string
		nearKnowsFar, farKnowsNear bool
		reason                     string // of the far edge's last refusal
		wantKey                    bool
	}{
		{"far edge lacks the near edge's key", true, false, "unknown_key", true},
		{"near edge has another far edge's key", false, true, "bad_mac", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			near, far := loopbackEdges(t, tc.nearKnowsFar, tc.farKnowsNear)
			ctx, cancel := context.WithCancel(context.Background())
			run, wait := edgeRunner(t, ctx)
			defer wait()
			defer cancel()
			run(far)
			run(near)
			if !waitFor(10*time.Second, func() bool {
				r := far.Status().Refused
				return r != nil && r.Total() > 0 && near.Status().TunnelState.HandshakeAttempts >= 2
			}) {
				t.Fatalf("after 10 s: far edge refused %+v, near edge %+v", far.Status().Refused, near.Status().TunnelState)
			}
			r := far.Status().Refused
			if r.Last == nil || r.Last.Reason != tc.reason || (r.Last.Key != "") != tc.wantKey {
				t.Errorf("far edge's last refusal %+v; want reason %s, key shown %v", r.Last, tc.reason, tc.wantKey)
			}
			if tc.wantKey && r.Last.Key != near.sh.PrivateKey.PublicKey().Base64() {
				t.Errorf("refused key %s; want the near edge's %s", r.Last.Key, near.sh.PrivateKey.PublicKey().Base64())
			}
			if tc.reason == "unknown_key" && r.UnknownKey == 0 || tc.reason == "bad_mac" && r.BadMAC == 0 {
				t.Errorf("far edge's counts %+v", r)
			}
			ns := near.Status()
			if ns.Tunnel != nil || ns.TunnelState.State != "down" || ns.TunnelState.Peer != far.cfg.Listen.String() {
				t.Errorf("near edge: tunnel %v, state %+v", ns.Tunnel, ns.TunnelState)
			}
			for _, e := range []served{near, far} {
				if code, body := readyz(t, e); code != http.StatusServiceUnavailable {
					t.Errorf("%s: /readyz = %d %q; want 503", e.Role(), code, body)
				}
			}
			if ok, why := near.Ready(); ok || !strings.Contains(why, "no answer to") || !strings.Contains(why, far.cfg.Listen.String()) {
				t.Errorf("near edge: Ready() = %v, %q; want the address and the unanswered handshakes", ok, why)
			}
			if ok, why := far.Ready(); ok || !strings.HasPrefix(why, "no tunnel up") {
				t.Errorf("far edge: Ready() = %v, %q; want no tunnel up", ok, why)
			}
		})
	}
}

// TestLinkWarnings: the near edge's down warnings come after 5 s, then
// at intervals doubling up to a minute; coming up stops them, going down
// starts the schedule again.
func TestLinkWarnings(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	l := newLink(true, "192.0.2.2:4500", t0)
	l.handshakesSent(3)
	var at []time.Duration
	for s := time.Duration(0); s <= 4*time.Minute; s += time.Second {
		if due, n, down := l.warnDue(t0.Add(s)); due {
			if n != 3 || down != s {
				t.Errorf("warning at %v: %d attempts, down %v", s, n, down)
			}
			at = append(at, s)
		}
	}
	want := []time.Duration{5 * time.Second, 15 * time.Second, 35 * time.Second, 75 * time.Second, 135 * time.Second, 195 * time.Second}
	if len(at) < len(want) || !equalDurations(at[:len(want)], want) {
		t.Errorf("warnings at %v; want %v, then every minute", at, want)
	}
	if got := l.downReason(t0.Add(12 * time.Second)); got != "tunnel to 192.0.2.2:4500 down since 12s: no answer to 3 handshakes" {
		t.Errorf("downReason = %q", got)
	}
	up := t0.Add(5 * time.Minute)
	l.cameUp(up, "192.0.2.2:4500", 0)
	if due, _, _ := l.warnDue(up.Add(time.Hour)); due {
		t.Error("a warning while up")
	}
	if s := l.snapshot(up, 0); s.State != "up" || s.HandshakeAttempts != 0 || !s.LastHandshake.Equal(up) {
		t.Errorf("up: %+v", s)
	}
	down := up.Add(time.Hour)
	l.wentDownAt(down, io.ErrUnexpectedEOF)
	if due, _, _ := l.warnDue(down.Add(4 * time.Second)); due {
		t.Error("a warning within 5 s of going down")
	}
	if due, _, _ := l.warnDue(down.Add(5 * time.Second)); !due {
		t.Error("no warning 5 s after going down")
	}
	if s := l.snapshot(down, 0); s.State != "down" || s.LastError != io.ErrUnexpectedEOF.Error() || !s.Since.Equal(down) {
		t.Errorf("down: %+v", s)
	}
	l.wentDownAt(down, fmt.Errorf("driver: tunnel closed: %w: no error", tunnel.ErrPeerClosed))
	if s := l.snapshot(down, 0); s.LastError != "closed by the peer (it stopped or restarted)" {
		t.Errorf("down: %+v", s)
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
