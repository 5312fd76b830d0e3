// Unreliable datagrams for the application: SendDatagram queues one for
// the driver goroutine; Config.OnDatagram receives the peer's.

package driver

import (
	"fmt"

	"github.com/wanopt/wanopt/tunnel"
)

// DefaultDatagramQueue is how many datagrams SendDatagram queues for the
// driver goroutine before it refuses more (Config.DatagramQueue): as many
// as the Conn's own queue, to ride out a driver thread the host kept off
// the CPU; a flood beyond it is the application's to drop.
const DefaultDatagramQueue = tunnel.DefaultMaxDatagramQueue

// MaxDatagramBytes returns the largest datagram SendDatagram accepts now:
// what one packet of the path MTU confirmed so far carries beside its
// headers (tunnel.Conn.MaxDatagramBytes). Safe from any goroutine.
func (t *Tunnel) MaxDatagramBytes() int { return int(t.maxDatagram.Load()) }

// SendDatagram sends p to the peer once, unreliably, ahead of stream data
// (a DATAGRAM frame; the peer's Config.OnDatagram receives it). p is
// copied and the call never blocks. An error means the datagram was
// dropped: one wrapping tunnel.ErrDatagramTooLarge when p is longer than
// MaxDatagramBytes, tunnel.ErrDatagramQueueFull when Config.DatagramQueue
// datagrams already wait, ErrTunnelClosed after the tunnel closed. A
// queued datagram may still be dropped when the Conn's own queue is full
// (Stats.Tunnel.DatagramsDropped) or the tunnel closes first.
func (t *Tunnel) SendDatagram(p []byte) error {
	if limit := t.MaxDatagramBytes(); len(p) > limit {
		return fmt.Errorf("driver: datagram of %d bytes, at most %d (the path MTU now): %w", len(p), limit, tunnel.ErrDatagramTooLarge)
	}
	select {
	case <-t.done:
		return fmt.Errorf("driver: send datagram: %w", t.err)
	default:
	}
	var b []byte
	select {
	case b = <-t.dgFree:
	default:
		b = make([]byte, 0, max(t.dgBufCap, len(p)))
	}
	b = append(b[:0], p...)
	select {
	case t.dgq <- b:
		return nil
	default:
		t.dgQueueDrops.Add(1)
		t.recycleDatagram(b)
		return fmt.Errorf("driver: %d datagrams wait for the tunnel: %w", cap(t.dgq), tunnel.ErrDatagramQueueFull)
	}
}

// recycleDatagram returns a queue buffer to the free list (or drops it
// when the list is full).
func (t *Tunnel) recycleDatagram(b []byte) {
	select {
	case t.dgFree <- b[:0]:
	default:
	}
}

// sendDatagram hands one queued datagram to the Conn (driver goroutine).
func (d *driverState) sendDatagram(b []byte) {
	if err := d.conn.SendDatagram(b); err != nil {
		d.t.dgNotSent.Add(1)
	}
	d.t.recycleDatagram(b)
}

// deliverDatagram passes a datagram from the peer to Config.OnDatagram
// (driver goroutine); without one it is counted and dropped.
func (d *driverState) deliverDatagram(p []byte) {
	if f := d.t.cfg.OnDatagram; f != nil {
		f(p)
		return
	}
	d.t.dgUnclaimed.Add(1)
}
