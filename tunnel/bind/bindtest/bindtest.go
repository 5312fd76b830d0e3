// Package bindtest provides pairs of in-memory bind.Conns for tests of code
// that drives a bind.Conn (the tunnel driver), after wireguard-go's
// bindtest: what one Conn of a pair writes, the other reads, through
// bounded channels, with an optional function that drops datagrams.
//
// A pair is deterministic in content and order: it never drops unless
// told to, and never reorders. A writer whose peer's queue is full blocks
// until the peer reads or either Conn is closed, like a full socket buffer
// with blocking sends rather than a lossy one.
package bindtest

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/wanopt/wanopt/tunnel/bind"
)

// Config configures NewPair. The zero value gives the defaults.
type Config struct {
	// BatchSize is each Conn's BatchSize; 0 means bind.DefaultBatchSize.
	BatchSize int

	// Queue is how many datagrams each direction holds before a writer
	// blocks; 0 means 1024.
	Queue int

	// AddrA and AddrB are the Conns' LocalAddr; zero values mean
	// 127.0.0.1:10001 and 127.0.0.1:10002 (never used on the network).
	AddrA, AddrB netip.AddrPort

	// Drop, when set, is called for every datagram written, before it is
	// queued, with its source, destination and contents; returning true
	// discards it (counted in the writer's Stats().Dropped). It is called
	// from the writing goroutine, possibly from both Conns at once, and
	// must not keep b.
	Drop func(from, to netip.AddrPort, b []byte) bool
}

// Conn is one end of a pair. It implements bind.Conn; datagrams written
// to any address other than the peer's LocalAddr are discarded and
// counted in Stats().Dropped, as UDP to nowhere would be.
type Conn struct {
	local  netip.AddrPort
	batch  int
	drop   func(from, to netip.AddrPort, b []byte) bool
	in     chan datagram // this Conn's receive queue
	peer   *Conn
	done   chan struct{} // closed by Close
	once   sync.Once
	rmu    sync.Mutex
	wmu    sync.Mutex
	pool   sync.Pool // *[]byte
	closed atomic.Bool
	onWait func() // bind.WaitNotifier; set before the first ReadBatch

	datagramsRead, bytesRead       atomic.Uint64
	datagramsWritten, bytesWritten atomic.Uint64
	dropped, reads, writes         atomic.Uint64
}

type datagram struct {
	b    *[]byte
	from netip.AddrPort
}

var (
	_ bind.Conn         = (*Conn)(nil)
	_ bind.WaitNotifier = (*Conn)(nil)
)

// NewPair returns two connected Conns.
func NewPair(cfg Config) (a, b *Conn) {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = bind.DefaultBatchSize
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 1024
	}
	if !cfg.AddrA.IsValid() {
		cfg.AddrA = netip.MustParseAddrPort("127.0.0.1:10001")
	}
	if !cfg.AddrB.IsValid() {
		cfg.AddrB = netip.MustParseAddrPort("127.0.0.1:10002")
	}
	mk := func(local netip.AddrPort) *Conn {
		return &Conn{
			local: local,
			batch: cfg.BatchSize,
			drop:  cfg.Drop,
			in:    make(chan datagram, cfg.Queue),
			done:  make(chan struct{}),
		}
	}
	a, b = mk(cfg.AddrA), mk(cfg.AddrB)
	a.peer, b.peer = b, a
	return a, b
}

// ReadBatch implements bind.Conn: it blocks for the first datagram and then
// takes what is queued, up to min(len(bufs), BatchSize()).
func (c *Conn) ReadBatch(bufs [][]byte, sizes []int, eps []netip.AddrPort) (int, error) {
	if len(sizes) < len(bufs) || len(eps) < len(bufs) {
		panic(fmt.Sprintf("bindtest: ReadBatch with %d bufs but %d sizes and %d eps", len(bufs), len(sizes), len(eps)))
	}
	bufs = bufs[:min(len(bufs), c.batch)]
	if len(bufs) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.reads.Add(1)
	n := 0
	for n == 0 {
		if c.closed.Load() {
			return 0, fmt.Errorf("bindtest: read on %v: %w", c.local, net.ErrClosed)
		}
		select {
		case d := <-c.in:
			n = c.take(d, bufs, sizes, eps, n)
			continue
		default:
		}
		if c.onWait != nil {
			c.onWait()
		}
		select {
		case <-c.done:
		case d := <-c.in:
			n = c.take(d, bufs, sizes, eps, n)
		}
	}
more:
	for n < len(bufs) {
		select {
		case d := <-c.in:
			n = c.take(d, bufs, sizes, eps, n)
		default:
			break more
		}
	}
	return n, nil
}

// OnReadWait implements bind.WaitNotifier: f runs before ReadBatch waits
// for a datagram, each time it finds none queued.
func (c *Conn) OnReadWait(f func()) { c.onWait = f }

// take copies d into bufs[n] unless it does not fit, and returns the new
// count.
func (c *Conn) take(d datagram, bufs [][]byte, sizes []int, eps []netip.AddrPort, n int) int {
	b := *d.b
	defer c.peer.pool.Put(d.b)
	if len(b) > len(bufs[n]) {
		c.dropped.Add(1)
		return n
	}
	sizes[n], eps[n] = copy(bufs[n], b), d.from
	c.datagramsRead.Add(1)
	c.bytesRead.Add(uint64(len(b)))
	return n + 1
}

// WriteBatch implements bind.Conn. It copies each datagram, so bufs are
// free when it returns.
func (c *Conn) WriteBatch(bufs [][]byte, ep netip.AddrPort) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed.Load() {
		return fmt.Errorf("bindtest: write on %v: %w", c.local, net.ErrClosed)
	}
	if !ep.IsValid() {
		return fmt.Errorf("%w: invalid destination %v", bind.ErrAddressFamily, ep)
	}
	ep = netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port())
	c.writes.Add(uint64((len(bufs) + c.batch - 1) / c.batch))
	for _, b := range bufs {
		if ep != c.peer.local || (c.drop != nil && c.drop(c.local, ep, b)) {
			c.dropped.Add(1)
			continue
		}
		p, _ := c.pool.Get().(*[]byte)
		if p == nil {
			p = new([]byte)
		}
		*p = append((*p)[:0], b...)
		select {
		case c.peer.in <- datagram{b: p, from: c.local}:
			c.datagramsWritten.Add(1)
			c.bytesWritten.Add(uint64(len(b)))
		case <-c.peer.done: // like UDP to a closed port
			c.dropped.Add(1)
		case <-c.done:
			return fmt.Errorf("bindtest: write on %v: %w", c.local, net.ErrClosed)
		}
	}
	return nil
}

// BatchSize implements bind.Conn.
func (c *Conn) BatchSize() int { return c.batch }

// LocalAddr implements bind.Conn.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// Stats implements bind.Conn. ReadSyscalls and WriteSyscalls count
// ReadBatch calls and BatchSize-sized chunks written; there are no
// offloads and no socket buffers.
func (c *Conn) Stats() bind.Stats {
	return bind.Stats{
		ReadSyscalls:     c.reads.Load(),
		WriteSyscalls:    c.writes.Load(),
		DatagramsRead:    c.datagramsRead.Load(),
		BytesRead:        c.bytesRead.Load(),
		DatagramsWritten: c.datagramsWritten.Load(),
		BytesWritten:     c.bytesWritten.Load(),
		Dropped:          c.dropped.Load(),
	}
}

// Close implements bind.Conn: it wakes blocked calls on this Conn; its
// peer's writes to it are discarded from then on. Closing twice returns
// nil.
func (c *Conn) Close() error {
	c.once.Do(func() {
		c.closed.Store(true)
		close(c.done)
	})
	return nil
}
