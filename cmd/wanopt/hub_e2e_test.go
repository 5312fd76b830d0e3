package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/wanem"
	"github.com/wanopt/wanopt/internal/tcptest"
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
// branch b is refused a destination branch a may reach. Last, UDP: branch
// a's client gets its answer through the hub (its --branch-allow holds
// the port), branch b's request is dropped and counted as not allowed in
// b's datagram counters.
func TestEdgeHubLab(t *testing.T) {
	needLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	link := wanem.Config{Delay: 10 * time.Millisecond, RateBps: 200_000_000}
	l := newLab(t, ctx, link, link)
	serveIn(t, l.Server.NS, echoPort, tcptest.Echo)
	serveIn(t, l.Server.NS, forbiddenPort, tcptest.Echo) // branch a's only
	serveIn(t, l.Server.NS, sourcePort, handleSource)
	serveUDPEcho(t, l.Server.NS, udpEchoPort) // branch a's only
	hub := startHub(t, ctx, l, harness.HubOptions{Branches: 3, Listed: 2,
		Lines: []string{fmt.Sprintf("allow = 198.18.2.2/32:%d,%d", echoPort, sourcePort), fmt.Sprintf("branch-allow = a:198.18.2.2/32:%d", forbiddenPort),
			fmt.Sprintf("branch-allow = a:198.18.2.2/32:%d", udpEchoPort)}})
	names := []string{"a", "b", "c"}
	time.Sleep(2 * time.Second) // c's initiations meanwhile
	if s, err := hub.Status("c"); err != nil || s.Tunnel != nil {
		t.Fatalf("branch c before the hub lists it: %v, tunnel %v; want no tunnel", err, s.Tunnel != nil)
	}
	if hs, err := hub.Status("hub"); err != nil || hs.Hub == nil || hs.Hub.UnknownKey == 0 {
		t.Fatalf("hub: %v, %+v; want branch c's initiations counted as an unknown key", err, hs.Hub)
	}
	clientNS := []string{hub.ClientNS(0), hub.ClientNS(1), hub.ClientNS(2)}

	// Branch a downloads; meanwhile c is added by SIGHUP.
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
	if err := hub.Configure(3); err != nil {
		t.Fatal(err)
	}
	hub.Reload()
	added := time.Now()
	if err := hub.WaitUp(ctx, "c", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("branch c's tunnel up %v after SIGHUP", time.Since(added).Round(time.Millisecond))
	if _, err := echoCheck(ctx, clientNS[2], 1<<20, 3, 20*time.Second); err != nil {
		t.Errorf("branch c right after it was added: %v", err)
	}
	if err := hub.Configure(3, "bogus-flag = 1"); err != nil {
		t.Fatal(err)
	}
	hub.Reload()
	r := <-dlDone
	t.Logf("branch a's download across both reloads: %d MB, longest gap between reads %v", r.n>>20, r.maxGap.Round(time.Millisecond))
	if r.err != nil || r.n != dlSize || !r.ok {
		t.Errorf("branch a's download: %d of %d bytes, intact %v, err %v", r.n, dlSize, r.ok, r.err)
	}
	if r.maxGap > time.Second {
		t.Errorf("branch a's download stalled %v across the reloads; want under 1 s", r.maxGap)
	}
	hs, err := hub.Status("hub")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs.Peers) != 3 {
		t.Errorf("after a broken config: %d branches; want the 3 of the running config", len(hs.Peers))
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
	if hs, err = hub.Status("hub"); err != nil {
		t.Fatal(err)
	}
	for i, p := range hs.Peers {
		if p.Name != names[i] || p.Tunnel == nil || p.Egress.Connected == 0 {
			t.Errorf("hub's branch %d: %s, up %v, connected %d", i, p.Name, p.Tunnel != nil, p.Egress.Connected)
		}
	}

	// UDP through the hub: a's request is answered, b's dropped.
	query := []byte("branch a asks")
	ca := dialUDPIn(t, clientNS[0], udpEchoPort)
	if answer, el, err := udpAsk(ca, query); err != nil || !bytes.Equal(answer, query) {
		t.Errorf("branch a's UDP request through the hub: %q, %v; want it echoed", answer, err)
	} else {
		t.Logf("branch a's UDP answer through the hub after %v", el.Round(100*time.Microsecond))
		if el < 2*link.Delay {
			t.Errorf("the answer came after %v, under the link's %v round trip: it did not cross the link", el, 2*link.Delay)
		}
	}
	cb := dialUDPIn(t, clientNS[1], udpEchoPort)
	cb.Write([]byte("branch b asks"))
	cb.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 2048)
	if n, err := cb.Read(buf); err == nil {
		t.Errorf("branch b reached a UDP port only a may: %q", buf[:n])
	}
	if hs, err = hub.Status("hub"); err != nil {
		t.Fatal(err)
	}
	for _, p := range hs.Peers {
		d := p.Datagrams
		switch {
		case d == nil:
			t.Errorf("hub's branch %s: no datagram counters", p.Name)
		case p.Name == "a" && (d.UDP.PacketsUp < 1 || d.UDP.PacketsDown < 1 || d.Flows < 1):
			t.Errorf("hub's branch a after a UDP exchange: %+v", *d)
		case p.Name == "b" && (d.UDP.PacketsUp != 0 || d.Drops.NotAllowed < 1):
			t.Errorf("hub's branch b after a refused UDP request: %+v", *d)
		}
	}
	if code, out, _ := run("status", "--control", hub.Socket("hub")); code != 0 || !bytes.Contains([]byte(out), []byte("datagrams: udp 1 up, 1 down")) {
		t.Errorf("wanopt status of the hub (code %d) shows no branch datagrams:\n%s", code, out)
	}
}
