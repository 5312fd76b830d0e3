package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/wanopt/wanopt/internal/sdnotify"
)

// readyWait bounds how long a near edge (initiator) holds systemd's start
// job waiting for its first tunnel. A far edge that is down must not get
// the near edge killed for a start timeout and restarted in a loop: after
// readyWait the edge reports ready anyway, with the reason the tunnel is
// down as its status, and keeps trying. wanopt@.service's TimeoutStartSec=
// must exceed it.
const readyWait = 30 * time.Second

// readiness is what the service manager's readiness follows: the edge's.
type readiness interface {
	// Ready reports whether the edge carries flows, and if not, why.
	Ready() (bool, string)
	// Serving reports whether the edge has set up everything that comes
	// before its tunnels.
	Serving() bool
}

// notifyOptions are notifyLoop's: the edge's role and how often it looks.
type notifyOptions struct {
	// initiator waits for Ready (up to wait); a responder is ready when
	// it serves, since its peer may come much later.
	initiator bool
	wait      time.Duration
	// poll is the interval until READY=1, every the interval after it;
	// with a watchdog, every pings it too.
	poll, every time.Duration
	// statusEvery spaces STATUS= updates while readiness stays the same:
	// Ready's reason counts the seconds down ("down since 12s"), and
	// each update is a D-Bus signal from systemd.
	statusEvery time.Duration
	watchdog    bool
}

// notifySystemd tells systemd, when the edge runs as a Type=notify service
// ($NOTIFY_SOCKET set), when it is ready (READY=1), why it is not
// (STATUS=), that it is stopping (STOPPING=1) once ctx ends, and that it
// is alive (WATCHDOG=1) if the unit sets WatchdogSec=. Without
// $NOTIFY_SOCKET it does nothing. Call it after the edge is made and before
// it runs, and call the returned stop function once Run has returned; it
// waits for the goroutine that notifies.
func notifySystemd(ctx context.Context, e readiness, role string, log *slog.Logger) (stop func()) {
	log = log.With("sub", "systemd")
	n, err := sdnotify.FromEnv()
	if err != nil {
		log.Warn("not telling systemd the edge's state", "err", err)
	}
	if n == nil {
		return func() {}
	}
	o := notifyOptions{initiator: role == "initiator", wait: readyWait, poll: 250 * time.Millisecond, every: time.Second, statusEvery: 10 * time.Second}
	wd, err := sdnotify.WatchdogInterval()
	if err != nil {
		log.Warn("no watchdog pings", "err", err)
	}
	if wd > 0 {
		o.watchdog = true
		o.every = min(o.every, max(wd/3, 10*time.Millisecond))
		o.poll = min(o.poll, o.every)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		notifyLoop(ctx, n, e, o, log)
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// notifyLoop reports e's state through n until ctx ends, then reports
// that the edge is stopping.
func notifyLoop(ctx context.Context, n *sdnotify.Notifier, e readiness, o notifyOptions, log *slog.Logger) {
	warned := false
	send := func(assignments ...string) {
		if err := n.Notify(assignments...); err != nil && !warned {
			warned = true // systemd is gone or busy; the edge carries on
			log.Warn("could not tell systemd the edge's state", "err", err)
		}
	}
	defer send(sdnotify.Stopping, sdnotify.Status("stopping: closing flows and the tunnel"))
	start := time.Now()
	readySent := false
	var (
		status     string
		statusOK   bool
		statusSent time.Time
	)
	tk := time.NewTicker(o.poll)
	defer tk.Stop()
	for {
		ok, reason := e.Ready()
		var msg []string
		becameReady := false
		if !readySent && (ok || e.Serving() && (!o.initiator || time.Since(start) >= o.wait)) {
			becameReady = true
			readySent = true
			msg = append(msg, sdnotify.Ready)
			if ok {
				log.Info("told systemd the edge is ready")
			} else {
				log.Info("told systemd the edge has started; its tunnel is not up yet", "reason", reason)
			}
			tk.Reset(o.every)
		}
		if s := statusLine(ok, reason); s != status && (becameReady || ok != statusOK || statusSent.IsZero() || time.Since(statusSent) >= o.statusEvery) {
			status, statusOK, statusSent = s, ok, time.Now()
			msg = append(msg, sdnotify.Status(s))
		}
		if o.watchdog {
			// Only a loop that got Ready's answer pings: an edge wedged
			// on its own lock is restarted by the watchdog.
			msg = append(msg, sdnotify.Watchdog)
		}
		send(msg...)
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// statusLine is the STATUS= text: Ready's reason, or "ready".
func statusLine(ok bool, reason string) string {
	switch {
	case reason != "":
		return reason
	case ok:
		return "ready"
	default:
		return "not ready"
	}
}
