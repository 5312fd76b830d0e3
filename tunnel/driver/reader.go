// The receive path: the reader goroutine (readLoop) that fills pooled
// batches from the socket, its receive moderation (rxHolder), and the
// driver's handling of a received batch (handleRx).

package driver

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind"
)

// rxStallLimit is how long the reader waits for a free batch before it
// drops what it reads: 5 ms is 625 KB at 1 Gbit/s, well within the
// default 4 MiB socket buffer.
const rxStallLimit = 5 * time.Millisecond

// rxHoldDatagrams is how many datagrams a held read aims to gather
// (Config.RxHold): at 250 Mbit/s, 48 lets a read take what a whole 2 ms
// hold brings; below about 380 Mbit/s the hold's length binds instead.
// minRxHold is the shortest hold worth a sleep (a sleep costs about as
// much as the wake-up it saves).
const (
	rxHoldDatagrams = 48
	minRxHold       = 100 * time.Microsecond
	rxHoldMinBytes  = 1000
)

// rxHoldRTTShare and rxHoldGrowth let the hold grow on a long path: to
// a 32nd of its RTT (3 % added to a packet's trip), at most 2 × the
// configured hold, and the datagrams a hold aims at grow with it (see
// rxHolder.target). Fewer reads mean fewer ACKs (at most one per read)
// and less CPU per GB on both edges
// (`wanbench cisco --rtt 200ms --edge-cpu 0.25`).
const (
	rxHoldRTTShare = 32
	rxHoldGrowth   = 2
)

// rxHoldCap is the reader's longest hold for the configured hold and
// the path's minimum RTT (0: not measured yet).
func rxHoldCap(hold, minRTT time.Duration) time.Duration {
	return growWithRTT(hold, minRTT, rxHoldRTTShare, rxHoldGrowth)
}

// growWithRTT stretches d on a long path: to minRTT/share, at most
// growth × d, never below d; d <= 0 (off) stays as it is.
func growWithRTT(d, minRTT time.Duration, share, growth time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return max(d, min(minRTT/share, growth*d))
}

// bulk reports whether the datagrams of a read average at least
// rxHoldMinBytes: data of a bulk transfer, not ACKs.
func bulk(sizes []int) bool {
	total := 0
	for _, n := range sizes {
		total += n
	}
	return total >= rxHoldMinBytes*len(sizes)
}

// rxBatch is one ReadBatch worth of datagrams, pooled between the reader
// and the driver (Tunnel.rxFree and Tunnel.rxq).
type rxBatch struct {
	bufs  [][]byte
	sizes []int
	eps   []netip.AddrPort
	n     int
}

func newRxBatch(batch, bufLen int) *rxBatch {
	b := &rxBatch{
		bufs:  make([][]byte, batch),
		sizes: make([]int, batch),
		eps:   make([]netip.AddrPort, batch),
	}
	mem := make([]byte, batch*bufLen)
	for i := range b.bufs {
		b.bufs[i] = mem[i*bufLen : (i+1)*bufLen : (i+1)*bufLen]
	}
	return b
}

// readLoop is the reader goroutine: it fills pooled batches from the
// socket and hands them to the driver. When every batch is in use it
// waits up to rxStallLimit for one, then reads into a spare batch and
// drops it, as a full socket buffer would, so two drivers blocked in
// WriteBatch on each other's in-memory queues (bindtest) cannot
// deadlock. It stops when the socket is closed or the context ends.
func (t *Tunnel) readLoop() {
	defer close(t.readerDone)
	spare := newRxBatch(t.bc.BatchSize(), rxBufLen(t.cfg))
	stall := time.NewTimer(time.Hour)
	stall.Stop()
	defer stall.Stop()
	var lastErr string
	hold := rxHolder{batch: t.bc.BatchSize(), base: t.cfg.RxHold}
	if havePreciseSleep {
		hold.max = t.cfg.RxHold // negative: never
	}
	holds := hold.max > 0
	var sl *sleeper
	if holds {
		sl = newSleeper()
		defer sl.close()
	}
	// waitFirst: the last read was not held, so the socket it may have
	// emptied has had no time to fill; wait there first (bind.ReadWaiter)
	// rather than read to be told EAGAIN.
	rw, _ := t.bc.(bind.ReadWaiter)
	waitFirst := false
	for {
		var b *rxBatch
		select {
		case b = <-t.rxFree:
		default:
			// The driver is behind: wait a little (the socket buffer
			// absorbs it), then read and drop rather than stall a
			// blocking bind's writer for good.
			stall.Reset(rxStallLimit)
			select {
			case b = <-t.rxFree:
				stall.Stop()
			case <-stall.C:
				b = spare
			case <-t.ctx.Done():
				return
			}
		}
		if waitFirst && rw != nil {
			_ = rw.WaitRead() // an error comes again from ReadBatch
		}
		n, err := t.bc.ReadBatch(b.bufs, b.sizes, b.eps)
		// A batch is coming to the driver (see readwait.go); after an
		// error the reader does not wait for the socket but retries, so
		// the driver is to keep its timer for what it gathers.
		t.rxWaiting.Store(err != nil)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || t.ctx.Err() != nil {
				return
			}
			if s := err.Error(); s != lastErr { // e.g. ECONNREFUSED after an ICMP error
				lastErr = s
				t.log.Warn("receive failed; continuing", "err", err)
			}
			if b != spare {
				t.rxFree <- b
			}
			stall.Reset(time.Millisecond) // do not spin on a failing socket
			select {
			case <-stall.C:
			case <-t.ctx.Done():
				return
			}
			continue
		}
		if b == spare {
			t.rxDropped.Add(uint64(n))
			continue
		}
		b.n = n
		t.rxq <- b // never blocks: rxq holds every batch
		waitFirst = true
		if holds {
			hold.max = time.Duration(t.rxHoldMax.Load())
			now := monotime.Now()
			if d := hold.after(now, b.sizes[:n]); d > 0 {
				sl.until(now.Add(d))
				t.rxHolds.Add(1)
				waitFirst = false
			}
		}
	}
}

// rxHolder decides how long the reader holds its next read
// (Config.RxHold). While full-size datagrams keep coming, it lets some
// gather in the socket buffer rather than wake the reader and the driver
// for each: the hold is what rxHoldDatagrams take at the recent spacing,
// at most max. It holds after every read that emptied the socket, since
// waiting in the poller instead wakes the edge for the next datagram
// alone. A full read is not held, since more may wait; small datagrams
// (the ACKs a sender lives on) and a datagram after a pause never are.
type rxHolder struct {
	max      time.Duration
	base     time.Duration // the configured hold, which max grows from
	batch    int           // datagrams a read can return; a read that many is not held
	lastRead monotime.Time // when the previous read returned
	spacing  time.Duration // smoothed time per datagram while they keep coming
}

// after returns the hold before the next read, for a read that returned
// datagrams of sizes at now.
func (h *rxHolder) after(now monotime.Time, sizes []int) time.Duration {
	gap := now.Sub(h.lastRead) // the previous hold included
	first := h.lastRead == 0
	h.lastRead = now
	n := len(sizes)
	if first || n == 0 || gap >= 2*h.max || n >= h.batch || !bulk(sizes) {
		return 0
	}
	h.spacing = (3*h.spacing + gap/time.Duration(n)) / 4
	if d := min(h.max, time.Duration(h.target())*h.spacing); d >= minRxHold {
		return d
	}
	return 0
}

// target is how many datagrams a hold aims to gather: rxHoldDatagrams,
// grown in proportion to max over the configured hold, at most three
// quarters of a batch so that a held read still empties the socket
// despite jitter. The delay a datagram sees stays within max.
func (h *rxHolder) target() int {
	n := rxHoldDatagrams
	if h.base > 0 && h.max > h.base {
		n = int(int64(n) * int64(h.max) / int64(h.base))
	}
	return min(n, max(rxHoldDatagrams, h.batch*3/4))
}

// handleRx feeds a batch of datagrams to the Conn and recycles it.
func (d *driverState) handleRx(b *rxBatch) {
	now := monotime.Now()
	d.ctr.rxBatches++
	d.ctr.datagramsIn += uint64(b.n)
	for i := range b.n {
		// Hand on the application datagrams the last packet carried before
		// decoding the next: a backlog of batches after a stall holds more
		// than the Conn keeps (MaxDatagramQueue).
		if d.conn.DatagramsWaiting() > 0 {
			d.pollEvents()
		}
		p, ep := b.bufs[i][:b.sizes[i]], b.eps[i]
		if !d.t.client && d.t.cfg.Refusals != nil && tunnel.IsHandshakeInitiation(p) {
			// A refusal is reported with its source: the Conn's event is
			// taken before the next datagram comes.
			d.refusedFrom = ep
			d.handleDatagram(now, p, ep)
			d.pollEvents()
			d.refusedFrom = netip.AddrPort{}
			continue
		}
		d.handleDatagram(now, p, ep)
	}
	b.n = 0
	d.t.rxFree <- b // never blocks: rxFree holds every batch
	// The reader loads the cap before every hold: write its cache line
	// only when the cap changed (the min RTT rarely does).
	if c := int64(rxHoldCap(d.t.cfg.RxHold, d.conn.MinRTT())); c != d.t.rxHoldMax.Load() {
		d.t.rxHoldMax.Store(c)
	}
}

// handleDatagram hands p, from ep, to the Conn it belongs to.
func (d *driverState) handleDatagram(now monotime.Time, p []byte, ep netip.AddrPort) {
	if d.next != nil && (d.next.IsHandshakeResponse(p) || d.next.OwnsDatagram(p)) {
		d.next.HandleDatagram(now, p) // the new handshake's answer, or its first data
		if !d.t.client && d.next != nil && d.next.OwnsDatagram(p) {
			d.nextPeer = ep
		}
		return
	}
	if !d.t.client && tunnel.IsHandshakeInitiation(p) && !d.admit(now, p, ep) {
		return
	}
	if !d.t.client && d.estDone && tunnel.IsHandshakeInitiation(p) {
		d.offerSuccessor(now, p, ep)
		return
	}
	if ep == d.peer {
		d.conn.HandleDatagram(now, p)
		if !d.t.client && !d.estDone {
			d.maybeReject(now, p, ep)
		}
		return
	}
	// From another address: adopt it only if the datagram authenticated
	// (the peer roamed, or the server is learning its client).
	before := d.conn.Stats().PacketsReceived
	d.conn.HandleDatagram(now, p)
	if d.conn.Stats().PacketsReceived > before {
		if d.peer.IsValid() {
			d.t.log.Info("peer address changed", "from", d.peer, "to", ep)
		}
		d.peer = ep
	} else if !d.t.client {
		d.maybeReject(now, p, ep)
	}
}

// admit (server) passes the initiation p from ep through the handshake
// gate: it reports whether a Conn may process it, and sends the cookie
// reply the gate asks for.
func (d *driverState) admit(now monotime.Time, p []byte, ep netip.AddrPort) bool {
	if d.gate == nil {
		return true // a Hub's socket: gated there
	}
	before := d.gate.Stats()
	v, reply := d.gate.Admit(now, p, ep, d.cookieBuf[0][:0])
	d.cookieBuf[0] = reply
	if v == tunnel.GateDrop && d.t.cfg.Refusals != nil {
		d.t.cfg.Refusals.addGate(time.Now(), ep, before, d.gate.Stats())
	}
	if v == tunnel.GateCookie {
		if err := d.t.bc.WriteBatch(d.cookieBuf[:], ep); err != nil {
			d.ctr.txErrors++
		} else {
			d.ctr.datagramsOut++
		}
	}
	return v == tunnel.GateAdmit
}
