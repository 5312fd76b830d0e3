//go:build !linux || bindfallback

package bind

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// otherConn is the portable Conn: one datagram per system call through
// net.UDPConn, no offloads. ReadBatch returns one datagram per call
// (BatchSize is 1); WriteBatch loops over its batch.
type otherConn struct {
	udp    *net.UDPConn
	local  Endpoint
	v6only bool
	closed atomic.Bool
	stats  counters
	rmu    sync.Mutex
	wmu    sync.Mutex
}

var _ Conn = (*otherConn)(nil)

// fastPath tells tests which implementation this build has.
const fastPath = false

// newConn wraps uc. Go's net package makes "udp6" sockets IPv6-only.
func newConn(uc *net.UDPConn, network string, o Options) (Conn, error) {
	c := &otherConn{udp: uc, v6only: network == "udp6"}
	c.local = unmap(uc.LocalAddr().(*net.UDPAddr).AddrPort())
	if o.ReadBuffer > 0 {
		if err := uc.SetReadBuffer(o.ReadBuffer); err != nil {
			return nil, fmt.Errorf("set receive buffer to %d bytes: %w", o.ReadBuffer, err)
		}
	}
	if o.WriteBuffer > 0 {
		if err := uc.SetWriteBuffer(o.WriteBuffer); err != nil {
			return nil, fmt.Errorf("set send buffer to %d bytes: %w", o.WriteBuffer, err)
		}
	}
	logOpened(o.Logger, c.local, o, c.stats.snapshot())
	return c, nil
}

func (c *otherConn) BatchSize() int      { return 1 }
func (c *otherConn) LocalAddr() Endpoint { return c.local }
func (c *otherConn) Stats() Stats        { return c.stats.snapshot() }

func (c *otherConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.udp.Close()
}

func (c *otherConn) ReadBatch(bufs [][]byte, sizes []int, eps []Endpoint) (int, error) {
	if len(sizes) < len(bufs) || len(eps) < len(bufs) {
		panic(fmt.Sprintf("bind: ReadBatch with %d bufs but %d sizes and %d eps", len(bufs), len(sizes), len(eps)))
	}
	if len(bufs) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.closed.Load() {
		return 0, fmt.Errorf("bind: read on %v: %w", c.local, net.ErrClosed)
	}
	// Truncation is not reported portably: a datagram longer than bufs[0]
	// arrives cut short on BSDs and as an error on Windows.
	n, from, err := c.udp.ReadFromUDPAddrPort(bufs[0])
	c.stats.readSyscalls.Add(1)
	if err != nil {
		return 0, fmt.Errorf("bind: read on %v: %w", c.local, err)
	}
	sizes[0], eps[0] = n, unmap(from)
	c.stats.datagramsRead.Add(1)
	c.stats.bytesRead.Add(uint64(n))
	return 1, nil
}

func (c *otherConn) WriteBatch(bufs [][]byte, ep Endpoint) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed.Load() {
		return fmt.Errorf("bind: write on %v: %w", c.local, net.ErrClosed)
	}
	if !ep.Addr().IsValid() {
		return fmt.Errorf("%w: invalid destination %v", ErrAddressFamily, ep)
	}
	if c.v6only && ep.Addr().Unmap().Is4() {
		return fmt.Errorf("%w: IPv4 destination %v from IPv6-only socket %v", ErrAddressFamily, ep, c.local)
	}
	if c.local.Addr().Is4() {
		if ep = unmap(ep); !ep.Addr().Is4() {
			return fmt.Errorf("%w: IPv6 destination %v from IPv4 socket %v", ErrAddressFamily, ep, c.local)
		}
	}
	for i, b := range bufs {
		_, err := c.udp.WriteToUDPAddrPort(b, ep)
		c.stats.writeSyscalls.Add(1)
		if err != nil {
			return fmt.Errorf("bind: send from %v to %v, after %d datagrams of the batch: %w", c.local, ep, i, err)
		}
		c.stats.datagramsWritten.Add(1)
		c.stats.bytesWritten.Add(uint64(len(b)))
	}
	return nil
}

// unmap turns an IPv4-mapped IPv6 endpoint into plain IPv4.
func unmap(ep Endpoint) Endpoint {
	if ep.Addr().Is4In6() {
		return netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port())
	}
	return ep
}
