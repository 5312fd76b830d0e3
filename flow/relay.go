package flow

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// RelayOptions configure Relay. The zero value counts nothing and logs
// nothing.
type RelayOptions struct {
	// LANToWAN and WANToLAN count the bytes written each way.
	LANToWAN, WANToLAN *atomic.Uint64
	// HalfClosed, if set, is called when a direction ends cleanly (its
	// source's FIN passed on): lanToWAN says which.
	HalfClosed func(lanToWAN bool)
	// Log receives the flow's events at Debug level.
	Log *slog.Logger
	// IdleTimeout, if positive, resets the flow once no byte has moved
	// either way for that long while neither direction is blocked
	// writing: a receiver that stopped reading, or a tunnel that is down,
	// holds its flow open; only a flow nobody uses ends. It is checked
	// once per IdleTimeout, so the flow ends between one and two of them
	// after its last byte. Idled, if set, is called when it does.
	IdleTimeout time.Duration
	Idled       func()
	// State, if set, records what each direction waits for (see Why).
	State *RelayState
	// Budget, if set, holds the flow's large buffers: each direction takes
	// a grant before it uses a large copy buffer and grows lan's buffers
	// (if lan is a Resizer), and gives it back when it idles. The flow's
	// floor is the caller's to Admit.
	Budget *Budget
}

// Relay copies lan's bytes to wan and wan's to lan until both directions
// have ended, then closes both ends and returns. lan is the end on this
// edge's side (the client's connection on the near edge, the server's on
// the far edge), wan the tunnel's. The rules, per direction src → dst:
//
//	event                              Relay does
//	src's EOF (its FIN)                dst.CloseWrite (a FIN); the other way goes on
//	dst.CloseWrite fails               reset both ends
//	reading src fails (RST, error)     reset both ends
//	writing dst fails                  reset both ends
//	ctx done                           reset both ends
//	an idle end fails (ResetWatcher)   reset both ends
//	both ways ended with a FIN         close both ends (gracefully)
//
// So a FIN travels end to end one direction at a time (a half-closed flow
// keeps working), and a RST or a failure anywhere becomes a RST at both
// ends at once: a client is never left waiting on a flow whose other half
// is gone. Resetting uses Abort; the tunnel's end is reset first, because
// resetting the LAN end wakes the other direction, and its teardown must
// not pass a FIN into the tunnel ahead of the reset.
func Relay(ctx context.Context, lan, wan Conn, o RelayOptions) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var once sync.Once
	resetBoth := func() {
		once.Do(func() {
			_ = Abort(wan)
			_ = Abort(lan)
		})
	}
	stop := context.AfterFunc(ctx, resetBoth)
	defer stop()
	watch := func(c Conn, name string) (stop func()) {
		w, ok := c.(ResetWatcher)
		if !ok {
			return func() {}
		}
		return w.WatchReset(func() {
			log.Debug(name + " end failed; resetting the flow")
			resetBoth()
		})
	}
	unwatchLAN, unwatchWAN := watch(lan, "lan"), watch(wan, "wan")
	if o.LANToWAN == nil {
		o.LANToWAN = new(atomic.Uint64)
	}
	if o.WANToLAN == nil {
		o.WANToLAN = new(atomic.Uint64)
	}
	var writing atomic.Int32 // directions blocked in a Write now
	if o.IdleTimeout > 0 {
		w := &idleWatch{timeout: o.IdleTimeout, writing: &writing, moved: func() uint64 { return o.LANToWAN.Load() + o.WANToLAN.Load() },
			fire: func() {
				log.Debug("idle timeout; resetting the flow", "after", o.IdleTimeout)
				if o.Idled != nil {
					o.Idled()
				}
				resetBoth()
			}}
		w.start()
		defer w.stop()
	}

	resizer, _ := lan.(Resizer)
	if o.State != nil {
		if l, ok := wan.(SendLimiter); ok {
			o.State.wan.Store(&l)
		}
	}
	direction := func(dst, src Conn, n *atomic.Uint64, lanToWAN bool, name string) {
		var g *grant
		if o.Budget != nil {
			g = newGrant(o.Budget, resizer, lanToWAN)
		}
		var wait *waitState
		if o.State != nil {
			wait = &o.State.wanToLAN
			if lanToWAN {
				wait = &o.State.lanToWAN
			}
		}
		var lend Lender
		if l, ok := dst.(Lender); ok {
			lend = busyLender{l, &writing, wait}
		}
		rerr, werr := copyAdaptive(busyWriter{dst, &writing, wait}, lend, src, n, g, wait)
		wait.set(WaitNone)
		switch {
		case werr != nil:
			log.Debug(name+": write failed; resetting the flow", "err", werr)
			resetBoth()
		case rerr == io.EOF:
			if err := dst.CloseWrite(); err != nil {
				log.Debug(name+": passing the FIN on failed; resetting the flow", "err", err)
				resetBoth()
				return
			}
			if o.HalfClosed != nil {
				o.HalfClosed(lanToWAN)
			}
		default:
			log.Debug(name+": read ended; resetting the flow", "err", rerr)
			resetBoth()
		}
	}
	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		direction(wan, lan, o.LANToWAN, true, "lan to wan")
	}()
	direction(lan, wan, o.WANToLAN, false, "wan to lan")
	<-upDone
	// Both ways ended: a watch that fires now (or its f, running late)
	// must not reset an end that still delivers its last bytes.
	once.Do(func() {})
	unwatchLAN()
	unwatchWAN()
	_ = wan.Close()
	_ = lan.Close()
}

// busyWriter counts the Writes in progress, so the idle watch can tell a
// flow that waits on its receiver from one nobody uses.
type busyWriter struct {
	io.Writer
	writing *atomic.Int32
	wait    *waitState
}

func (w busyWriter) Write(p []byte) (int, error) {
	w.writing.Add(1)
	w.wait.set(WaitWrite)
	defer func() { w.writing.Add(-1); w.wait.set(WaitNone) }()
	return w.Writer.Write(p)
}

// busyLender counts a Lend in progress as a Write (it may wait for room).
type busyLender struct {
	Lender
	writing *atomic.Int32
	wait    *waitState
}

func (l busyLender) Lend(filled, want int) ([][]byte, error) {
	l.writing.Add(1)
	l.wait.set(WaitWrite)
	defer func() { l.writing.Add(-1); l.wait.set(WaitNone) }()
	return l.Lender.Lend(filled, want)
}

// idleWatch fires once a flow has moved no byte for timeout while no Write
// was in progress. It wakes once per timeout, not per byte.
type idleWatch struct {
	timeout time.Duration
	writing *atomic.Int32
	moved   func() uint64
	fire    func()

	mu   sync.Mutex
	t    *time.Timer
	last uint64 // bytes moved at the previous check
	done bool
}

func (w *idleWatch) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = w.moved()
	w.t = time.AfterFunc(w.timeout, w.check)
}

func (w *idleWatch) check() {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return
	}
	now := w.moved()
	if now != w.last || w.writing.Load() > 0 {
		w.last = now
		w.t.Reset(w.timeout)
		w.mu.Unlock()
		return
	}
	w.done = true
	w.mu.Unlock()
	w.fire()
}

func (w *idleWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	w.t.Stop()
}
