package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wanopt/wanopt/edge"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/driver"
)

// statusEdges runs a far and a near edge in this process on loopback UDP
// (no TUN, no root), each with a control socket in a temporary
// directory. With matching false the far edge knows another key than the
// near edge's. stopFar stops the far edge.
func statusEdges(t *testing.T, matching bool) (nearSock, farSock string, stopFar func()) {
	t.Helper()
	kn, _ := crypt.GenerateKey(rand.Reader)
	kf, _ := crypt.GenerateKey(rand.Reader)
	allowed := kn.PublicKey()
	if !matching {
		other, _ := crypt.GenerateKey(rand.Reader)
		allowed = other.PublicKey()
	}
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := c.LocalAddr().(*net.UDPAddr).AddrPort()
	c.Close()
	pol, _ := egress.ParsePolicy([]string{"127.0.0.1/32:9"})
	dir := t.TempDir()
	nearSock, farSock = filepath.Join(dir, "near.sock"), filepath.Join(dir, "far.sock")
	far, err := edge.NewFar(edge.FarConfig{Shared: edge.Shared{PrivateKey: kf, Policy: pol, Control: farSock}, PeerKey: allowed, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	near, err := edge.NewNear(edge.NearConfig{Shared: edge.Shared{PrivateKey: kn, Policy: pol, Control: nearSock}, PeerKey: kf.PublicKey(), Peer: addr})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	farCtx, cancelFar := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	for _, r := range []struct {
		e   runningEdge
		ctx context.Context
	}{{far, farCtx}, {near, ctx}} {
		go func() {
			defer func() { done <- struct{}{} }()
			if err := r.e.Run(r.ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
	}
	farDone := false
	stopFar = func() {
		if !farDone {
			farDone = true
			cancelFar()
			<-done
		}
	}
	t.Cleanup(func() {
		cancel()
		stopFar()
		<-done
	})
	// Both sockets answer before the test asks.
	for _, sock := range []string{nearSock, farSock} {
		if !waitUntil(5*time.Second, func() bool { var s control.Status; return control.Query(sock, "status", &s) == nil }) {
			t.Fatalf("control socket %s does not answer", sock)
		}
	}
	return nearSock, farSock, stopFar
}

// waitUntil polls cond every 20 ms until it holds or d passes.
func waitUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// TestStatusExitCodes: 'wanopt status' exits 0 with every tunnel up, 3
// with one down (saying why), 1 when the edge cannot be reached; --json
// keeps the exit codes and carries the tunnel's state.
func TestStatusExitCodes(t *testing.T) {
	near, far, stopFar := statusEdges(t, true)
	if !waitUntil(10*time.Second, func() bool { code, _, _ := run("status", "--control", near); return code == 0 }) {
		code, out, errs := run("status", "--control", near)
		t.Fatalf("tunnel not up after 10 s: status %d\n%s%s", code, out, errs)
	}
	code, out, _ := run("status", "--control", near)
	t.Logf("near edge, tunnel up:\n%s", out)
	for _, want := range []string{"tunnel: up for ", "last handshake: ", "rtt: "} {
		if !strings.Contains(out, want) {
			t.Errorf("status with the tunnel up (code %d) lacks %q", code, want)
		}
	}
	stopFar()
	if !waitUntil(5*time.Second, func() bool { code, _, _ := run("status", "--control", near); return code == 3 }) {
		code, out, errs := run("status", "--control", near)
		t.Fatalf("5 s after the far edge stopped: status %d\n%s%s; want 3", code, out, errs)
	}
	code, out, errs := run("status", "--control", near)
	t.Logf("near edge, far edge stopped (code %d):\n%s%s", code, out, errs)
	for _, want := range []string{"tunnel: down for ", "last error: closed by the peer", "attempts: "} {
		if !strings.Contains(out, want) {
			t.Errorf("status with the tunnel down lacks %q", want)
		}
	}
	code, out, _ = run("status", "--json", "--control", near)
	var s control.Status
	if err := json.Unmarshal([]byte(out), &s); err != nil || code != 3 || s.TunnelState == nil || s.TunnelState.State != "down" || s.TunnelState.LastHandshake.IsZero() {
		t.Errorf("status --json with the tunnel down: code %d, %v, state %+v", code, err, s.TunnelState)
	}
	if code, _, errs := run("status", "--control", far); code != 1 || !strings.Contains(errs, "cannot reach") {
		t.Errorf("status of a stopped edge: code %d, %q; want 1", code, errs)
	}
}

// TestStatusWrongKey: with the near edge's key unknown to the far edge,
// the near edge's status exits 3 and counts its unanswered handshakes,
// and the far edge's shows the initiations it refused, with the near
// edge's key.
func TestStatusWrongKey(t *testing.T) {
	near, far, _ := statusEdges(t, false)
	var ns control.Status
	if !waitUntil(10*time.Second, func() bool {
		return control.Query(near, "status", &ns) == nil && ns.TunnelState != nil && ns.TunnelState.HandshakeAttempts >= 3
	}) {
		t.Fatalf("near edge after 10 s: %+v", ns.TunnelState)
	}
	code, out, errs := run("status", "--control", near)
	t.Logf("near edge (code %d):\n%s%s", code, out, errs)
	if code != 3 || !strings.Contains(out, "attempts: ") || !strings.Contains(out, "none answered") {
		t.Errorf("near edge's status: code %d; want 3 and the attempts", code)
	}
	code, out, errs = run("status", "--control", far)
	t.Logf("far edge (code %d):\n%s%s", code, out, errs)
	var fs control.Status
	if err := control.Query(far, "status", &fs); err != nil || fs.Refused == nil || fs.Refused.UnknownKey == 0 || fs.Refused.Last == nil || fs.Refused.Last.Key == "" || !strings.Contains(ns.Config, "public key "+fs.Refused.Last.Key) {
		t.Fatalf("far edge's refusals: %v, %+v; want the near edge's key", err, fs.Refused)
	}
	if code != 3 || !strings.Contains(out, "handshakes refused: ") || !strings.Contains(out, "unknown key from 127.0.0.1:") || !strings.Contains(out, "its key: "+fs.Refused.Last.Key) {
		t.Errorf("far edge's status: code %d; want 3 and the unknown key", code)
	}
}

// TestStatusText: the status for people has no line longer than 100
// characters, says n/a before the tunnel's first RTT sample (never the
// initial 333 ms guess), and names upstreams as upstreams.
func TestStatusText(t *testing.T) {
	now := time.Now()
	tun := &control.Tunnel{Peer: "192.0.2.2:4500", Congestion: "bbr", BBRMode: "startup", Cipher: "aes-256-gcm",
		SmoothedRTT: 333 * time.Millisecond, PacingRateBps: 2_500_000_000, BytesSent: 3 << 30, BytesReceived: 1500, Cwnd: 14720,
		PathMTUBytes: 1232, PathMTUCeiling: 1472, PathMTUSearching: true, BudgetBytes: 96 << 20}
	up := &control.TunnelState{State: "up", Since: now.Add(-time.Minute), LastHandshake: now.Add(-time.Minute)}
	down := &control.TunnelState{State: "down", Since: now.Add(-12 * time.Second), HandshakeAttempts: 12, LastError: "closed by the peer (it stopped or restarted)", Peer: "192.0.2.3:4500", Host: "dc2.example.net"}
	for _, tc := range []struct {
		name      string
		s         control.Status
		want, not []string
	}{
		{"before the first RTT sample", control.Status{Role: "initiator", Config: strings.Repeat("a setting, ", 30), PeerName: "peer", PeerKey: "KEY", Tunnel: tun, TunnelState: up},
			[]string{"tunnel: up for 1m0s", "rtt: n/a", "bandwidth n/a", "pacing 2.50 Gbit/s", "sent: 3.00 GiB", "received: 1.5 KiB"}, []string{"333"}},
		{"upstreams", control.Status{Role: "initiator", Peers: []control.Peer{
			{Name: "dc1", Key: "K1", Routes: []string{"10.1.0.0/16"}, Tunnel: tun, TunnelState: up},
			{Name: "dc2", Key: "K2", Routes: []string{"10.2.0.0/16"}, TunnelState: down}}},
			[]string{"upstream dc1: up for", "upstream dc2: down for 12s", "routes: 10.2.0.0/16", "attempts: 12 handshakes", "last error: closed by the peer", "address: 192.0.2.3:4500 (dc2.example.net)"},
			[]string{"branch ", "policy"}},
		{"hub", control.Status{Role: "responder", Hub: &driver.HubStats{UnknownKey: 4}, Refused: &control.Refused{UnknownKey: 4, Last: &control.Refusal{At: now, From: "192.0.2.9:1234", Reason: "unknown_key", Key: "kv8m3AHK1lIZZoCWdvQXULcRxSwK5Yg+DMY+JgMzUBI="}},
			Peers: []control.Peer{{Name: "paris", Key: "K3", Policy: "10.0.0.0/8", TunnelState: &control.TunnelState{State: "down", Since: now}}}},
			[]string{"branch paris: down", "policy: 10.0.0.0/8", "waiting: for the peer's handshake", "handshakes refused: 4", "unknown key from 192.0.2.9:1234, 0s ago", "its key: kv8m3AHK1lIZZoCWdvQXULcRxSwK5Yg+DMY+JgMzUBI="},
			[]string{"upstream "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printStatus(&b, tc.s, now)
			out := b.String()
			for _, l := range strings.Split(out, "\n") {
				if len(l) > 100 {
					t.Errorf("a line of %d characters: %q", len(l), l)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in:\n%s", w, out)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(out, w) {
					t.Errorf("%q in:\n%s", w, out)
				}
			}
			if got := downTunnels(tc.s); (tc.name == "before the first RTT sample") != (len(got) == 0) {
				t.Errorf("down tunnels: %v", got)
			}
		})
	}
}

// TestDefaultControl: without --control the edge takes the default
// socket when its directory can be made and nobody answers there, and
// otherwise goes on without one.
func TestDefaultControl(t *testing.T) {
	dir := t.TempDir()
	busy := filepath.Join(dir, "busy.sock")
	ln, err := net.Listen("unix", busy)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"directory made", filepath.Join(dir, "run", "wanopt", "wanopt.sock"), filepath.Join(dir, "run", "wanopt", "wanopt.sock")},
		{"another edge answers", busy, ""},
		{"directory cannot be made", filepath.Join(file, "wanopt.sock"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := defaultControl(tc.path, slog.New(slog.DiscardHandler)); got != tc.want {
				t.Errorf("defaultControl(%s) = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}
