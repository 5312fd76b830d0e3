// Unreliable datagrams for the application: SendDatagram queues one for
// the driver goroutine; Config.OnDatagram receives the peer's.

package driver

import (
	"fmt"

	"github.com/wanopt/wanopt/tunnel"
)

// DefaultDatagramQueue is how many datagrams SendDatagram queues for the
// driver goroutine before it refuses more (Config.DatagramQueue): as many
// as the Conn's own queue (tunnel.DefaultMaxDatagramQueue), 200 ms of
// 50 Mbit/s of 1,200-byte packets, to ride out a driver thread the host
// kept off the CPU while the caller's ran (256 refused 8-41 of iperf3's
// datagrams in 5 s at 50 Mbit/s beside CI's tests); a flood beyond it is
// the application's to drop.
const DefaultDatagramQueue = tunnel.DefaultMaxDatagramQueue

// MaxDatagramBytes returns the largest datagram SendDatagram accepts now:
// what one tunnel packet of the path MTU confirmed so far carries beside
// its headers (tunnel.Conn.MaxDatagramBytes; about 1,190 bytes until the
// path MTU search confirms more, about 1,430 at the default
// MaxUDPPayloadBytes). It is safe to call from any goroutine.
func (t *Tunnel) MaxDatagramBytes() int { return int(t.maxDatagram.Load()) }

// SendDatagram sends p to the peer once, unreliably, ahead of stream data
// (a DATAGRAM frame; the peer's Config.OnDatagram receives it). p is copied
// and the call never blocks: it queues the copy for the driver goroutine
// and returns. The errors mean the datagram was dropped (the caller counts
// it): one wrapping tunnel.ErrDatagramTooLarge when p is longer than
// MaxDatagramBytes, tunnel.ErrDatagramQueueFull when Config.DatagramQueue
// datagrams are already waiting (the tunnel is slower than the datagrams
// come), ErrTunnelClosed after the tunnel closed. A datagram queued may
// still be dropped later, when the Conn's own queue is full (counted in
// Stats.Tunnel.DatagramsDropped) or the tunnel closes first.
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
