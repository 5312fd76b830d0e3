package main

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/edge"
	"github.com/wanopt/wanopt/egress"
	"github.com/wanopt/wanopt/internal/sdnotify"
	"github.com/wanopt/wanopt/tunnel/crypt"
)

// edgeState is what a fakeEdge answers.
type edgeState struct {
	ready, serving bool
	reason         string
}

// fakeEdge is a readiness whose answers the test sets.
type fakeEdge struct {
	mu sync.Mutex
	s  edgeState
}

func (f *fakeEdge) Ready() (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s.ready, f.s.reason
}

func (f *fakeEdge) Serving() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s.serving
}

func (f *fakeEdge) set(s edgeState) {
	f.mu.Lock()
	f.s = s
	f.mu.Unlock()
}

// notifySocket listens where systemd would and returns its name and the
// datagrams received, one string each.
func notifySocket(t *testing.T) (string, <-chan string) {
	t.Helper()
	name := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen on %s: %v", name, err)
	}
	ch := make(chan string, 1000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			ch <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return name, ch
}

// await returns the datagrams received until one contains want, failing
// after timeout.
func await(t *testing.T, ch <-chan string, want string, timeout time.Duration) []string {
	t.Helper()
	var got []string
	deadline := time.After(timeout)
	for {
		select {
		case m := <-ch:
			got = append(got, m)
			if strings.Contains(m, want) {
				return got
			}
		case <-deadline:
			t.Fatalf("no %q within %v; received %q", want, timeout, got)
		}
	}
}

func contains(msgs []string, s string) bool {
	for _, m := range msgs {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

func TestNotifyReadiness(t *testing.T) {
	const down = "tunnel to 192.0.2.2:4500 down since 1s: no answer to 2 handshakes"
	tests := []struct {
		name      string
		initiator bool
		wait      time.Duration
		// before is the edge's state at start; after, what it becomes
		// once the loop has reported before.
		before, after edgeState
		// readyBefore: READY=1 while still in before; else only after.
		readyBefore bool
		wantStatus  []string // STATUS= values, in order
	}{
		{
			name: "near edge: ready when the tunnel is up", initiator: true, wait: time.Hour,
			before: edgeState{reason: down, serving: true}, after: edgeState{ready: true, serving: true},
			wantStatus: []string{down, "ready"},
		},
		{
			name: "near edge: ready after the wait without a tunnel", initiator: true, wait: 300 * time.Millisecond,
			before: edgeState{reason: down, serving: true}, after: edgeState{reason: down, serving: true},
			readyBefore: true, wantStatus: []string{down},
		},
		{
			name: "near edge: not ready after the wait while not serving", initiator: true, wait: 10 * time.Millisecond,
			before: edgeState{reason: "edge not running"}, after: edgeState{reason: down, serving: true},
			wantStatus: []string{"edge not running", down},
		},
		{
			name: "far edge: ready when serving, before any peer", initiator: false, wait: time.Hour,
			before: edgeState{reason: "edge not running"}, after: edgeState{reason: "no tunnel up: waiting", serving: true},
			wantStatus: []string{"edge not running", "no tunnel up: waiting"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name, ch := notifySocket(t)
			n, err := sdnotify.New(name)
			if err != nil {
				t.Fatal(err)
			}
			e := &fakeEdge{}
			e.set(tt.before)
			o := notifyOptions{initiator: tt.initiator, wait: tt.wait, poll: 20 * time.Millisecond, every: 20 * time.Millisecond, statusEvery: 50 * time.Millisecond}
			stop := startNotifyLoop(n, e, o)
			defer stop()

			// Before: the first status, and READY=1 only if expected.
			first := await(t, ch, "STATUS="+tt.wantStatus[0], time.Second)
			if tt.readyBefore {
				first = append(first, await(t, ch, sdnotify.Ready, 2*time.Second)...)
			} else {
				time.Sleep(100 * time.Millisecond)
				for len(ch) > 0 {
					first = append(first, <-ch)
				}
			}
			if got := contains(first, sdnotify.Ready); got != tt.readyBefore {
				t.Fatalf("in state %+v, READY=1 sent: %v, want %v (received %q)", tt.before, got, tt.readyBefore, first)
			}

			e.set(tt.after)
			last := tt.wantStatus[len(tt.wantStatus)-1]
			msgs := first
			if !contains(msgs, "STATUS="+last) {
				msgs = append(msgs, await(t, ch, "STATUS="+last, time.Second)...)
			}
			if !contains(msgs, sdnotify.Ready) {
				msgs = append(msgs, await(t, ch, sdnotify.Ready, time.Second)...)
			}
			stop()
			msgs = append(msgs, await(t, ch, sdnotify.Stopping, time.Second)...)

			// Each status once, in order; READY=1 once; nothing after
			// STOPPING=1.
			var statuses []string
			readies := 0
			for _, m := range msgs {
				for _, line := range strings.Split(strings.TrimSpace(m), "\n") {
					if s, ok := strings.CutPrefix(line, "STATUS="); ok && !strings.HasPrefix(s, "stopping") {
						statuses = append(statuses, s)
					}
					if line == sdnotify.Ready {
						readies++
					}
				}
			}
			if strings.Join(statuses, "|") != strings.Join(tt.wantStatus, "|") {
				t.Errorf("STATUS= sent %q, want %q", statuses, tt.wantStatus)
			}
			if readies != 1 {
				t.Errorf("READY=1 sent %d times, want once (received %q)", readies, msgs)
			}
			if len(ch) > 0 {
				t.Errorf("sent %q after STOPPING=1", <-ch)
			}
			t.Logf("received %q", msgs)
		})
	}
}

// TestNotifySystemd: the run path's entry point finds the socket in
// $NOTIFY_SOCKET and pings the watchdog when $WATCHDOG_USEC asks for it;
// without $NOTIFY_SOCKET it does nothing.
func TestNotifySystemd(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	t.Run("no socket", func(t *testing.T) {
		t.Setenv("NOTIFY_SOCKET", "")
		os.Unsetenv("NOTIFY_SOCKET")
		stop := notifySystemd(context.Background(), &fakeEdge{s: edgeState{ready: true, serving: true}}, "initiator", log)
		stop()
	})
	t.Run("socket and watchdog", func(t *testing.T) {
		name, ch := notifySocket(t)
		t.Setenv("NOTIFY_SOCKET", name)
		t.Setenv("WATCHDOG_USEC", "150000") // 150 ms: pings every 50 ms
		t.Setenv("WATCHDOG_PID", "")
		os.Unsetenv("WATCHDOG_PID")
		stop := notifySystemd(context.Background(), &fakeEdge{s: edgeState{ready: true, serving: true}}, "initiator", log)
		msgs := await(t, ch, sdnotify.Ready, time.Second)
		start := time.Now()
		pings := 0
		for pings < 3 {
			msgs = await(t, ch, sdnotify.Watchdog, time.Second)
			pings++
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("3 watchdog pings took %v; want one per 50 ms", d)
		}
		stop()
		await(t, ch, sdnotify.Stopping, time.Second)
		t.Logf("last received %q", msgs)
	})
}

// TestNotifyEdges runs real edges on loopback UDP (no TUN, no root) under
// the notify loop, as wanopt@.service would: the far edge reports ready
// while it waits for its peer, the near edge once its tunnel is up, and
// a near edge whose key the far edge does not know reports ready after
// the bounded wait with the unanswered handshakes as its status. All
// report STOPPING=1 when they stop.
func TestNotifyEdges(t *testing.T) {
	kn, _ := crypt.GenerateKey(rand.Reader)
	kf, _ := crypt.GenerateKey(rand.Reader)
	stranger, _ := crypt.GenerateKey(rand.Reader)
	pol, err := egress.ParsePolicy([]string{"127.0.0.1/32:9"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := c.LocalAddr().(*net.UDPAddr).AddrPort()
	c.Close()
	log := slog.New(slog.DiscardHandler)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// start runs an edge and its notify loop; the loop's messages arrive
	// on the returned channel.
	start := func(name string, cfg edge.Config, wait time.Duration) <-chan string {
		e, err := newEdge(cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sock, ch := notifySocket(t)
		n, err := sdnotify.New(sock)
		if err != nil {
			t.Fatal(err)
		}
		o := notifyOptions{initiator: e.Role() == "initiator", wait: wait, poll: 20 * time.Millisecond, every: 100 * time.Millisecond, statusEvery: time.Hour}
		wg.Add(2)
		go func() {
			defer wg.Done()
			notifyLoop(ctx, n, e, o, log)
		}()
		go func() {
			defer wg.Done()
			if err := e.Run(ctx); err != nil {
				t.Errorf("%s: Run: %v", name, err)
			}
		}()
		return ch
	}

	far := start("far edge", edge.FarConfig{Shared: edge.Shared{PrivateKey: kf, Policy: pol}, PeerKey: kn.PublicKey(), Listen: addr}, time.Hour)
	msgs := await(t, far, sdnotify.Ready, 5*time.Second)
	if !contains(msgs, "STATUS=no tunnel up") {
		t.Errorf("far edge ready before its peer came: received %q; want its status to say no tunnel is up", msgs)
	}
	t.Logf("far edge, no peer yet: %q", msgs)

	near := start("near edge", edge.NearConfig{Shared: edge.Shared{PrivateKey: kn, Policy: pol}, PeerKey: kf.PublicKey(), Peer: addr}, time.Hour)
	msgs = await(t, near, sdnotify.Ready, 10*time.Second)
	if !contains(msgs, "STATUS=ready") {
		t.Errorf("near edge: received %q; want READY=1 with STATUS=ready once its tunnel is up", msgs)
	}
	t.Logf("near edge: %q", msgs)
	t.Logf("far edge, peer up: %q", await(t, far, "STATUS=ready", 5*time.Second))

	// A near edge the far edge does not know: ready after the wait, with
	// the reason.
	lost := start("near edge with an unknown key", edge.NearConfig{Shared: edge.Shared{PrivateKey: stranger, Policy: pol}, PeerKey: kf.PublicKey(), Peer: addr}, time.Second)
	began := time.Now()
	msgs = await(t, lost, sdnotify.Ready, 5*time.Second)
	if d := time.Since(began); d < time.Second-100*time.Millisecond {
		t.Errorf("near edge without a tunnel reported ready after %v; want the wait, 1 s", d)
	}
	if !contains(msgs, addr.String()) {
		t.Errorf("near edge without a tunnel: received %q; want a status naming the far edge's address", msgs)
	}
	t.Logf("near edge with an unknown key: %q", msgs)

	cancel()
	for name, ch := range map[string]<-chan string{"far": far, "near": near, "lost": lost} {
		if msgs := await(t, ch, sdnotify.Stopping, 10*time.Second); len(msgs) == 0 {
			t.Errorf("%s edge: no STOPPING=1", name)
		}
	}
}

// TestNotifyStatusSpacing: while readiness stays the same, a new reason
// waits for statusEvery; a change of readiness is sent at once.
func TestNotifyStatusSpacing(t *testing.T) {
	name, ch := notifySocket(t)
	n, err := sdnotify.New(name)
	if err != nil {
		t.Fatal(err)
	}
	e := &fakeEdge{}
	e.set(edgeState{reason: "down since 1s", serving: true})
	o := notifyOptions{initiator: true, wait: time.Hour, poll: 10 * time.Millisecond, every: 10 * time.Millisecond, statusEvery: time.Hour}
	defer startNotifyLoop(n, e, o)()
	await(t, ch, "STATUS=down since 1s", time.Second)
	e.set(edgeState{reason: "down since 2s", serving: true})
	time.Sleep(200 * time.Millisecond)
	for len(ch) > 0 {
		if m := <-ch; strings.Contains(m, "STATUS=") {
			t.Errorf("sent %q before statusEvery though readiness did not change", m)
		}
	}
	e.set(edgeState{ready: true, serving: true})
	await(t, ch, "STATUS=ready", time.Second)
}

// startNotifyLoop runs notifyLoop for e until the returned stop is called
// (which waits for it; a second call returns at once).
func startNotifyLoop(n *sdnotify.Notifier, e readiness, o notifyOptions) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		notifyLoop(ctx, n, e, o, slog.New(slog.DiscardHandler))
	}()
	return func() { cancel(); <-done }
}
