package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// TestEdgeHubLab: one far edge, run from a config file, serves branches
// behind the same emulated WAN (200 Mbit/s, 20 ms): branch a is the lab's
// near edge and client, branches b and c are namespaces behind it, each
// running its near edge and its client. At first the hub lists a and b:
// c's near edge gets no tunnel. During a download of branch a, branch c is
// added to the file and the hub is sent SIGHUP: c's tunnel comes up at
// once, and a's download goes on without a reset or a stall over 1 s; a
// broken file on the next SIGHUP is refused and the branches stay. Then
// the three branches move 20 MB each way at once, hash-checked, and
// branch b is refused a destination branch a may reach.
func TestEdgeHubLab(t *testing.T) {
	needLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	link := wanem.Config{Delay: 10 * time.Millisecond, RateBps: 200_000_000}
	l := newLab(t, ctx, link, link)
	serveIn(t, l.Server.NS, echoPort, tcptest.Echo)
	serveIn(t, l.Server.NS, forbiddenPort, tcptest.Echo) // branch a's only
	serveIn(t, l.Server.NS, sourcePort, handleSource)
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
	procs := map[string]*exec.Cmd{}
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
		procs[name] = cmd
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
			p.Wait()
		}
		if t.Failed() {
			for _, n := range []string{"hub", "a", "b", "c"} {
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
	waitUp := func(name string, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			if s, err := status(name); err == nil && s.Tunnel != nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("branch %s: no tunnel to the hub within %v", name, within)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	hubKey, hubPub := key("hub")
	names := []string{"a", "b", "c"}
	nearHosts := append([]*lab.Host{l.EdgeA}, hosts...)
	nearKeys, pubs := make([]string, len(names)), make([]string, len(names))
	for i, n := range names {
		nearKeys[i], pubs[i] = key(n)
	}
	conf := filepath.Join(dir, "hub.conf")
	writeConf := func(branches int, extra ...string) {
		lines := []string{"key = " + hubKey, "listen = 198.18.0.2:4500", fmt.Sprintf("allow = 198.18.2.2/32:%d,%d", echoPort, sourcePort),
			fmt.Sprintf("branch-allow = a:198.18.2.2/32:%d", forbiddenPort)}
		for i := range branches {
			lines = append(lines, "branch = "+names[i]+":"+pubs[i])
		}
		if err := os.WriteFile(conf, []byte(strings.Join(append(lines, extra...), "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeConf(2)
	start(l.EdgeB, "hub", "--config", conf)
	for i, n := range names {
		start(nearHosts[i], n, "--key", nearKeys[i], "--peer-key", hubPub, "--peer", "198.18.0.2:4500",
			"--tun", "wo0", "--tun-setup", "--route", "198.18.2.0/24")
	}
	waitUp("a", 20*time.Second)
	waitUp("b", 20*time.Second)
	// The lab routes the server's LAN over the link from edgea; branch a's
	// clients now go through its near edge.
	if out, err := exec.CommandContext(ctx, "ip", "-n", l.EdgeA.NS, "route", "replace", "198.18.2.0/24", "dev", "wo0").CombinedOutput(); err != nil {
		t.Fatalf("route the server's LAN into wo0: %v: %s", err, out)
	}
	time.Sleep(2 * time.Second) // c's initiations meanwhile
	if s, err := status("c"); err != nil || s.Tunnel != nil {
		t.Fatalf("branch c before the hub lists it: %v, tunnel %v; want no tunnel", err, s.Tunnel != nil)
	}
	if hub, err := status("hub"); err != nil || hub.Hub == nil || hub.Hub.UnknownKey == 0 {
		t.Fatalf("hub: %v, %+v; want branch c's initiations counted as an unknown key", err, hub.Hub)
	}

	// Branch a downloads; meanwhile c is added by SIGHUP.
	clientNS := []string{l.Client.NS, hosts[0].NS, hosts[1].NS}
	dl, err := dialIn(ctx, clientNS[0], sourcePort, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	const dlSize = 150 << 20
	var req [9]byte
	binary.BigEndian.PutUint64(req[:8], dlSize)
	req[8] = 9
	if _, err := dl.Write(req[:]); err != nil {
		t.Fatal(err)
	}
	type dlResult struct {
		n      int64
		maxGap time.Duration
		ok     bool
		err    error
	}
	dlDone := make(chan dlResult, 1)
	go func() {
		want := mrand.NewChaCha8([32]byte{9})
		buf, exp := make([]byte, 64<<10), make([]byte, 64<<10)
		var r dlResult
		r.ok = true
		last := time.Now()
		for r.n < dlSize {
			k, err := dl.Read(buf)
			if now := time.Now(); r.n > 0 && now.Sub(last) > r.maxGap {
				r.maxGap = now.Sub(last)
			}
			last = time.Now()
			want.Read(exp[:k])
			if !bytes.Equal(buf[:k], exp[:k]) {
				r.ok = false
			}
			r.n += int64(k)
			if err != nil {
				r.err = err
				break
			}
		}
		dlDone <- r
	}()
	time.Sleep(time.Second)
	writeConf(3)
	procs["hub"].Process.Signal(syscall.SIGHUP)
	added := time.Now()
	waitUp("c", 10*time.Second)
	t.Logf("branch c's tunnel up %v after SIGHUP", time.Since(added).Round(time.Millisecond))
	if _, err := echoCheck(ctx, clientNS[2], 1<<20, 3, 20*time.Second); err != nil {
		t.Errorf("branch c right after it was added: %v", err)
	}
	writeConf(3, "bogus-flag = 1")
	procs["hub"].Process.Signal(syscall.SIGHUP)
	r := <-dlDone
	t.Logf("branch a's download across both reloads: %d MB, longest gap between reads %v", r.n>>20, r.maxGap.Round(time.Millisecond))
	if r.err != nil || r.n != dlSize || !r.ok {
		t.Errorf("branch a's download: %d of %d bytes, intact %v, err %v", r.n, dlSize, r.ok, r.err)
	}
	if r.maxGap > time.Second {
		t.Errorf("branch a's download stalled %v across the reloads; want under 1 s", r.maxGap)
	}
	hub, err := status("hub")
	if err != nil {
		t.Fatal(err)
	}
	if len(hub.Peers) != 3 {
		t.Errorf("after a broken config: %d branches; want the 3 of the running config", len(hub.Peers))
	}

	// The three branches at once.
	var wg sync.WaitGroup
	took := make([]time.Duration, len(names))
	for i := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := echoCheck(ctx, clientNS[i], 20<<20, byte(i), time.Minute)
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
	if hub, err = status("hub"); err != nil {
		t.Fatal(err)
	}
	for i, p := range hub.Peers {
		if p.Name != names[i] || p.Tunnel == nil || p.Egress.Connected == 0 {
			t.Errorf("hub's branch %d: %s, up %v, connected %d", i, p.Name, p.Tunnel != nil, p.Egress.Connected)
		}
	}
}
