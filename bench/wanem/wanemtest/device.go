// Package wanemtest provides an in-memory wanem.Device so that tests can
// drive a wanem.Link without TUN devices or privileges.
package wanemtest

import (
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// Packet is a packet written to a Device, with the Write's monotime.
type Packet struct {
	Data []byte
	At   monotime.Time
}

// Device is an in-memory packet device: Inject feeds Read, one packet per
// call, and Write feeds Written. It has deadlines like an *os.File in Go's
// poller, and Close. All methods are safe for concurrent use.
type Device struct {
	rx      chan []byte
	tx      chan Packet
	closed  chan struct{}
	once    sync.Once
	dropped atomic.Uint64

	mu        sync.Mutex
	expired   chan struct{} // closed when the read deadline has passed
	isExpired bool
	deadline  *time.Timer
}

// NewDevice returns an open Device of capacity packets in each direction.
func NewDevice(capacity int) *Device {
	return &Device{
		rx:      make(chan []byte, capacity),
		tx:      make(chan Packet, capacity),
		closed:  make(chan struct{}),
		expired: make(chan struct{}),
	}
}

// Inject queues a copy of pkt for Read. It reports false, dropping the
// packet, if the device is closed or its read queue is full.
func (d *Device) Inject(pkt []byte) bool {
	select {
	case <-d.closed:
		return false
	default:
	}
	select {
	case d.rx <- append([]byte(nil), pkt...):
		return true
	default:
		return false
	}
}

// Written delivers the packets written to the device, in order.
func (d *Device) Written() <-chan Packet { return d.tx }

// Dropped returns how many written packets were dropped as Written was full.
func (d *Device) Dropped() uint64 { return d.dropped.Load() }

// Read blocks until an injected packet is available and copies it into
// pkt, truncating it if pkt is short. It returns os.ErrClosed after Close
// and os.ErrDeadlineExceeded once the read deadline has passed.
func (d *Device) Read(pkt []byte) (int, error) {
	d.mu.Lock()
	expired := d.expired
	d.mu.Unlock()
	select {
	case <-d.closed:
		return 0, os.ErrClosed
	case <-expired:
		return 0, os.ErrDeadlineExceeded
	default:
	}
	select {
	case p := <-d.rx:
		return copy(pkt, p), nil
	case <-d.closed:
		return 0, os.ErrClosed
	case <-expired:
		return 0, os.ErrDeadlineExceeded
	}
}

// Write copies pkt to Written, stamped with monotime.Now. It never blocks (a
// full Written drops and counts the packet); after Close, os.ErrClosed.
func (d *Device) Write(pkt []byte) (int, error) {
	select {
	case <-d.closed:
		return 0, os.ErrClosed
	default:
	}
	p := Packet{Data: append([]byte(nil), pkt...), At: monotime.Now()}
	select {
	case d.tx <- p:
	default:
		d.dropped.Add(1)
	}
	return len(pkt), nil
}

// SetReadDeadline makes Read fail with os.ErrDeadlineExceeded from t on,
// also a Read already blocked; the zero t removes the deadline.
func (d *Device) SetReadDeadline(t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.deadline != nil {
		d.deadline.Stop()
		d.deadline = nil
	}
	wait := time.Until(t)
	if !t.IsZero() && wait <= 0 {
		d.expireLocked(d.expired)
		return nil
	}
	if d.isExpired {
		d.expired, d.isExpired = make(chan struct{}), false
	}
	if !t.IsZero() {
		ch := d.expired
		d.deadline = time.AfterFunc(wait, func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			d.expireLocked(ch)
		})
	}
	return nil
}

// expireLocked closes ch if it is still the current, open deadline channel.
func (d *Device) expireLocked(ch chan struct{}) {
	if ch == d.expired && !d.isExpired {
		close(ch)
		d.isExpired = true
	}
}

// SetWriteDeadline has no effect: Write never blocks.
func (d *Device) SetWriteDeadline(time.Time) error { return nil }

// Close makes Read and Write fail with os.ErrClosed; closing twice is harmless.
func (d *Device) Close() error {
	d.once.Do(func() { close(d.closed) })
	return nil
}
