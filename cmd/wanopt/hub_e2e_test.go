package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/wanem"
	"github.com/wanopt/wanopt/edge/control"
	"github.com/wanopt/wanopt/internal/tcptest"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// TestEdgeHubLab: one far edge serves three branches behind the same
// emulated WAN (200 Mbit/s, 20 ms): branch a is the lab's near edge and
// client, branches b and c are namespaces behind it, each running its
// near edge and its client. Each branch moves 20 MB each way at once,
// hash-checked; branch b is refused a destination branch a may reach; a
// near edge with a key the hub does not list gets no tunnel.
func TestEdgeHubLab(t *testing.T) {
	needLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	link := wanem.Config{Delay: 10 * time.Millisecond, RateBps: 200_000_000}
	l := newLab(t, ctx, link, link)
	serveIn(t, l.Server.NS, echoPort, tcptest.Echo)
	serveIn(t, l.Server.NS, forbiddenPort, tcptest.Echo) // branch a's only
	var hosts []*lab.Host
	for k := 1; k <= 2; k++ {
		h, err := l.AddBranch(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, h)
	}

	dir := t.TempDir()
	wanopt := filepath.Join(dir, "wanopt")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", wanopt, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build wanopt: %v\n%s", err, out)
	}
	key := func(name string) (path, pub string) {
		k, err := crypt.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(dir, name+".key")
		if err := os.WriteFile(path, []byte(k.Base64()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path, k.PublicKey().Base64()
	}
	var procs []*exec.Cmd
	start := func(h *lab.Host, name string, args ...string) {
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := l.Command(ctx, h, append([]string{wanopt, "run", "--log-level", "debug", "--control", filepath.Join(dir, name+".sock")}, args...)...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
			p.Wait()
		}
		if t.Failed() {
			for _, n := range []string{"hub", "a", "b", "c", "stranger"} {
				b, _ := os.ReadFile(filepath.Join(dir, n+".log"))
				if len(b) > 3000 {
					b = b[len(b)-3000:]
				}
				t.Logf("%s's log (tail):\n%s", n, b)
			}
		}
	})
	status := func(name string) (control.Status, error) {
		var r control.Status
		err := control.Query(filepath.Join(dir, name+".sock"), "status", &r)
		return r, err
	}

	hubKey, hubPub := key("hub")
	names := []string{"a", "b", "c"}
	hubArgs := []string{"--key", hubKey, "--listen", "198.18.0.2:4500", "--allow", fmt.Sprintf("198.18.2.2/32:%d", echoPort),
		"--branch-allow", fmt.Sprintf("a:198.18.2.2/32:%d", forbiddenPort)}
	nearHosts := append([]*lab.Host{l.EdgeA}, hosts...)
	nearKeys := make([]string, len(names))
	for i, n := range names {
		var pub string
		nearKeys[i], pub = key(n)
		hubArgs = append(hubArgs, "--branch", n+":"+pub)
	}
	start(l.EdgeB, "hub", hubArgs...)
	for i, n := range names {
		start(nearHosts[i], n, "--key", nearKeys[i], "--peer-key", hubPub, "--peer", "198.18.0.2:4500",
			"--tun", "wo0", "--tun-setup", "--route", "198.18.2.0/24")
	}
	strangerKey, _ := key("stranger")
	start(hosts[1], "stranger", "--key", strangerKey, "--peer-key", hubPub, "--peer", "198.18.0.2:4500", "--allow", "192.0.2.1/32")

	for _, n := range names {
		deadline := time.Now().Add(20 * time.Second)
		for {
			if s, err := status(n); err == nil && s.Tunnel != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("branch %s: no tunnel to the hub within 20 s", n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The lab routes the server's LAN over the link from edgea; branch a's
	// clients now go through its near edge.
	if out, err := exec.CommandContext(ctx, "ip", "-n", l.EdgeA.NS, "route", "replace", "198.18.2.0/24", "dev", "wo0").CombinedOutput(); err != nil {
		t.Fatalf("route the server's LAN into wo0: %v: %s", err, out)
	}

	clientNS := []string{l.Client.NS, hosts[0].NS, hosts[1].NS}
	const size = 20 << 20
	var wg sync.WaitGroup
	took := make([]time.Duration, len(names))
	for i := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := echoCheck(ctx, clientNS[i], size, byte(i), time.Minute)
			if err != nil {
				t.Errorf("branch %s: %v", names[i], err)
			}
			took[i] = d
		}()
	}
	wg.Wait()
	t.Logf("20 MB each way at once: branch a %v, b %v, c %v", took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), took[2].Round(time.Millisecond))

	if c, err := dialIn(ctx, clientNS[0], forbiddenPort, 5*time.Second); err != nil {
		t.Errorf("branch a to its own destination: %v", err)
	} else {
		c.Close()
	}
	if c, err := dialIn(ctx, clientNS[1], forbiddenPort, 5*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Errorf("branch b to branch a's destination: %v; want refused", err)
	}

	hub, err := status("hub")
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range hub.Peers {
		if p.Name != names[i] || p.Tunnel == nil || p.Egress.Connected == 0 {
			t.Errorf("hub's branch %d: %s, up %v, connected %d", i, p.Name, p.Tunnel != nil, p.Egress.Connected)
		}
	}
	if s, err := status("stranger"); err != nil || s.Tunnel != nil {
		t.Errorf("the stranger: %v, tunnel %v; want no tunnel", err, s.Tunnel != nil)
	}
	if hub.Hub == nil || hub.Hub.UnknownKey == 0 {
		t.Errorf("hub: %+v; want the stranger's initiations counted", hub.Hub)
	}
}
