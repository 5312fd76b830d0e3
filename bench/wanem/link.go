package wanem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// Device is one end of a link: a TUN device or a fake. Each Read returns
// exactly one IP packet and each Write sends one. Read and Write are called
// from different goroutines, never Read (or Write) from two at once. If the
// device has SetReadDeadline and SetWriteDeadline (an *os.File in Go's
// poller does), Link.Run interrupts blocked calls itself when it stops;
// otherwise the caller must close the devices (see Run).
type Device interface {
	Read(pkt []byte) (int, error)
	Write(pkt []byte) (int, error)
}

type readDeadliner interface{ SetReadDeadline(time.Time) error }
type writeDeadliner interface{ SetWriteDeadline(time.Time) error }

// Releaser sleep bounds: the releaser wakes every maxSleep to notice
// cancellation, and every preemptSleep while only reordered packets wait.
const (
	maxSleep     = time.Millisecond
	preemptSleep = 100 * time.Microsecond
)

// EarlyRelease is how far ahead of its release time a Link's releaser
// writes a packet instead of sleeping for it. Each sleep costs a timer and
// two context switches, and the real-time releaser's wake-up preempts
// whatever runs on its CPU, often an edge. At 250 Mbit/s (48 µs a packet)
// 200 µs lets it write four or five per wake; it is below any RTT the lab
// sets and below one packet's time at 50 Mbit/s. Departures, and so queue
// and drops, are not affected; Counters.EarlyMax shows how early packets
// went, and 'wanbench check' verifies the resulting RTT and rate.
const EarlyRelease = 200 * time.Microsecond

// Link forwards packets between two Devices through one Pipe per
// direction. Create it with NewLink and drive it with Run.
type Link struct {
	dirs    [2]*direction // A→B, B→A
	running atomic.Bool
}

// direction is one Pipe with its input and output device.
type direction struct {
	inName, outName string
	in, out         Device
	wake            *waker // the releaser waits on it for the pipe's first packet (set by Run)

	mu          sync.Mutex // guards pipe, writeErrors and waiting
	pipe        *Pipe
	writeErrors uint64
	waiting     bool // the releaser waits on wake: the reader's next packet signals it
}

// NewLink returns a link forwarding from a to b with impairments ab and from
// b to a with ba. The error wraps ErrInvalidConfig and names the direction.
func NewLink(a, b Device, ab, ba Config) (*Link, error) {
	if a == nil || b == nil {
		return nil, errors.New("wanem: NewLink needs two devices, got nil")
	}
	pab, err := NewPipe(ab)
	if err != nil {
		return nil, fmt.Errorf("direction A→B: %w", err)
	}
	pba, err := NewPipe(ba)
	if err != nil {
		return nil, fmt.Errorf("direction B→A: %w", err)
	}
	return &Link{dirs: [2]*direction{
		{inName: "A", outName: "B", in: a, out: b, pipe: pab},
		{inName: "B", outName: "A", in: b, out: a, pipe: pba},
	}}, nil
}

// SetDown takes both directions down (packets read are dropped and counted
// in Counters.OutageDrops) or, with false, up again; packets in the pipes
// are still released. It is safe to call at any time from any goroutine.
func (l *Link) SetDown(down bool) {
	for _, d := range l.dirs {
		d.mu.Lock()
		d.pipe.SetDown(down)
		d.mu.Unlock()
	}
}

// SetMTU sets the largest IP packet both directions carry from now on (see
// Config.MTU); an invalid MTU changes nothing. Safe from any goroutine.
func (l *Link) SetMTU(mtu int) error {
	if err := (Config{MTU: mtu}).Validate(); err != nil {
		return err
	}
	for _, d := range l.dirs {
		d.mu.Lock()
		_ = d.pipe.SetMTU(mtu) // validated above
		d.mu.Unlock()
	}
	return nil
}

// Stats returns a snapshot of both directions' counters, at any time.
func (l *Link) Stats() (ab, ba Counters) {
	return l.dirs[0].counters(), l.dirs[1].counters()
}

func (d *direction) counters() Counters {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.pipe.Counters()
	c.WriteErrors = d.writeErrors
	return c
}

// Run forwards packets until ctx is done (nil) or a device fails (its
// error). Every goroutine it starts has exited when it returns; packets
// still in the pipes wait for a later Run.
//
// When ctx is done, Run interrupts blocked Reads and Writes of devices with
// deadlines by setting a deadline in the past (a later Run clears it). A
// device without deadlines must be closed by the caller after cancelling
// ctx (context.AfterFunc); Run returns once its reader sees the close.
// Errors a device returns after ctx is done are not reported. For the best
// precision give the process more threads than cores and real-time priority.
func (l *Link) Run(ctx context.Context) error {
	if !l.running.CompareAndSwap(false, true) {
		return errors.New("wanem: Link.Run is already running; call it once at a time")
	}
	defer l.running.Store(false)

	for _, d := range l.dirs {
		setDeadlines(d.in, time.Time{})
	}
	caller := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A device closed by the caller's AfterFunc can fail a read before the
	// derived ctx is done (no set order), so check both contexts.
	stopping := func() bool { return ctx.Err() != nil || caller.Err() != nil }
	var (
		once     sync.Once
		firstErr error
	)
	fail := func(err error) {
		once.Do(func() { firstErr = err })
		cancel()
	}
	for i, d := range l.dirs {
		w, err := newWaker()
		if err != nil {
			for _, e := range l.dirs[:i] {
				e.wake.close()
			}
			return err
		}
		d.wake = w
		d.mu.Lock()
		d.waiting = false // a releaser stopped while waiting left it set
		d.mu.Unlock()
	}
	defer func() {
		for _, d := range l.dirs {
			d.wake.close()
		}
	}()
	interrupted := make(chan struct{})
	stopInterrupt := context.AfterFunc(ctx, func() {
		defer close(interrupted)
		for _, d := range l.dirs {
			setDeadlines(d.in, time.Now().Add(-time.Second))
			d.wake.signal()
		}
	})
	var wg sync.WaitGroup
	for _, d := range l.dirs {
		wg.Go(func() { d.readLoop(stopping, fail) })
		wg.Go(func() { d.releaseLoop(ctx, stopping, fail) })
	}
	wg.Wait()
	if !stopInterrupt() {
		<-interrupted // a later Run must not see this interrupt land late
	}
	return firstErr
}

// setDeadlines sets the read and write deadlines of dev if it has them.
func setDeadlines(dev Device, t time.Time) {
	if r, ok := dev.(readDeadliner); ok {
		_ = r.SetReadDeadline(t) // ErrNoDeadline: not interruptible, see Run
	}
	if w, ok := dev.(writeDeadliner); ok {
		_ = w.SetWriteDeadline(t)
	}
}

// readLoop reads packets from d.in into the pipe until Run stops or the
// device fails; an error while stopping reports true is not a failure.
func (d *direction) readLoop(stopping func() bool, fail func(error)) {
	buf := make([]byte, MaxPacketBytes)
	for {
		n, err := d.in.Read(buf)
		if err != nil {
			if !stopping() {
				fail(fmt.Errorf("wanem: read from device %s: %w", d.inName, err))
			}
			return
		}
		if n == 0 {
			if stopping() {
				return
			}
			continue
		}
		now := clockNow()
		d.mu.Lock()
		d.pipe.Enqueue(now, buf[:n])
		wake := d.waiting
		d.waiting = false
		d.mu.Unlock()
		if wake {
			d.wake.signal()
		}
	}
}

// releaseLoop writes packets to d.out at their release time (or up to
// EarlyRelease before) until ctx is done or the device fails, one packet
// per lock so that lateness is measured right before each write.
func (d *direction) releaseLoop(ctx context.Context, stopping func() bool, fail func(error)) {
	// Never unlocked: the thread and its tuning end with the goroutine.
	runtime.LockOSThread()
	prepareReleaserThread()
	done := ctx.Done()
	var written []byte // the last packet written, to hand back to the pool
	var writeErrs uint64
	defer func() {
		d.mu.Lock()
		d.pipe.Release(written)
		d.writeErrors += writeErrs
		d.mu.Unlock()
	}()
	for {
		select {
		case <-done:
			return
		default:
		}
		d.mu.Lock()
		if written != nil {
			d.pipe.Release(written)
			written = nil
		}
		d.writeErrors += writeErrs
		writeErrs = 0
		now := clockNow()
		pkt, due := d.pipe.DequeueEarly(now, EarlyRelease)
		var next monotime.Time
		var pending, preempt bool
		if !due {
			next, pending = d.pipe.Next()
			preempt = d.pipe.Preemptible()
			d.waiting = !pending
		}
		d.mu.Unlock()

		if due {
			if _, err := d.out.Write(pkt); err != nil {
				if stopping() {
					return
				}
				if fatalWriteError(err) {
					fail(fmt.Errorf("wanem: write to device %s: %w", d.outName, err))
					return
				}
				writeErrs++
			}
			written = pkt
			continue
		}
		if !pending {
			d.wake.wait() // the reader's next packet, or Run stopping
			continue
		}
		// Sleep even if a wake is pending: a new packet can be due before
		// next only in the preemptible case, which the short bound covers.
		// Looping on wakes would spin and, under SCHED_FIFO, starve the reader.
		bound := maxSleep
		if preempt {
			bound = preemptSleep
		}
		sleepUntil(min(next, now.Add(bound)))
	}
}

// fatalWriteError reports whether err means the device is gone, rather than
// that it refused this one packet.
func fatalWriteError(err error) bool {
	return errors.Is(err, os.ErrClosed) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.ErrClosedPipe) || errors.Is(err, syscall.EBADF) ||
		errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ENODEV) ||
		errors.Is(err, os.ErrDeadlineExceeded)
}

// clockNow is Go's monotonic clock; sleepUntil translates it to the kernel's.
func clockNow() monotime.Time { return monotime.Now() }
