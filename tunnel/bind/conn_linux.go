//go:build linux && !bindfallback

package bind

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// linuxConn is the Linux Conn: recvmmsg and sendmmsg on the socket's file
// descriptor, which it takes from the net.UDPConn that opened it (a
// duplicate: the original is closed, and leaves Go's poller). A call that
// would block waits in Go's poller through a oneshot, one for each
// direction; Close wakes it.
type linuxConn struct {
	sock   int
	rxw    *oneshot // EPOLLIN
	txw    *oneshot // EPOLLOUT
	local  Endpoint
	family int  // unix.AF_INET or unix.AF_INET6
	v6only bool // an AF_INET6 socket that cannot reach IPv4
	batch  int
	log    *slog.Logger
	closed atomic.Bool
	stats  counters
	rx     receiver
	tx     sender
}

var (
	_ Conn         = (*linuxConn)(nil)
	_ WaitNotifier = (*linuxConn)(nil)
	_ ReadWaiter   = (*linuxConn)(nil)
)

// OnReadWait implements WaitNotifier: f runs before ReadBatch waits in
// the poller, each time the socket was found empty.
func (c *linuxConn) OnReadWait(f func()) { c.rxw.onWait = f }

// fastPath tells tests which implementation this build has.
const fastPath = true

// newConn wraps uc; the socket itself says its family (network is for
// the portable Conn).
func newConn(uc *net.UDPConn, _ string, o Options) (Conn, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("get raw socket: %w", err)
	}
	c := &linuxConn{sock: -1, batch: o.BatchSize, log: o.Logger}
	var setupErr error
	if err := raw.Control(func(fd uintptr) {
		if setupErr = c.setup(int(fd), o); setupErr == nil {
			c.sock, setupErr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
		}
	}); err != nil {
		uc.Close()
		return nil, err
	}
	uc.Close() // the duplicate keeps the socket (and its port); Go's poller lets go of it
	if setupErr != nil {
		return nil, setupErr
	}
	var err1, err2 error
	c.rxw, err1 = newOneshot(c.sock, unix.EPOLLIN)
	c.txw, err2 = newOneshot(c.sock, unix.EPOLLOUT)
	if err := errors.Join(err1, err2); err != nil {
		if c.rxw != nil {
			c.rxw.close()
		}
		if c.txw != nil {
			c.txw.close()
		}
		unix.Close(c.sock)
		return nil, fmt.Errorf("bind: waiting for the socket: %w", err)
	}
	c.rx.init(c.batch, c.stats.gro.Load())
	c.tx.init(c.batch)
	logOpened(c.log, c.local, o, c.stats.snapshot())
	return c, nil
}

// setup reads the socket's family and address, sizes its buffers and
// probes the offloads.
func (c *linuxConn) setup(fd int, o Options) error {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fmt.Errorf("getsockname: %w", err)
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		c.family = unix.AF_INET
		c.local = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		c.family = unix.AF_INET6
		a := netip.AddrFrom16(sa.Addr).Unmap()
		if sa.ZoneId != 0 && a.Is6() {
			a = a.WithZone(zoneName(sa.ZoneId))
		}
		c.local = netip.AddrPortFrom(a, uint16(sa.Port))
		v6only, err := unix.GetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY)
		c.v6only = err == nil && v6only != 0
	default:
		return fmt.Errorf("socket has address family %T, want IPv4 or IPv6", sa)
	}

	rcv, err := setBuffer(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, o.ReadBuffer)
	if err != nil {
		return fmt.Errorf("set receive buffer to %d bytes: %w", o.ReadBuffer, err)
	}
	snd, err := setBuffer(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, o.WriteBuffer)
	if err != nil {
		return fmt.Errorf("set send buffer to %d bytes: %w", o.WriteBuffer, err)
	}
	c.stats.readBuffer.Store(int64(rcv))
	c.stats.writeBuffer.Store(int64(snd))

	// Don't fragment, and don't cap by the route's learnt path MTU either
	// (PMTUDISC_PROBE: DF set, only the device's MTU limits): the tunnel
	// finds its packet size itself, a lost fragment would lose the whole
	// datagram, and a forged ICMP "too big" must not shrink what we send.
	// A datagram larger than the device's MTU fails with EMSGSIZE.
	if c.family == unix.AF_INET6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_PROBE); err != nil {
			return fmt.Errorf("set IPV6_MTU_DISCOVER to probe (don't fragment): %w", err)
		}
		// The IPv4 half of a dual-stack socket follows IP_MTU_DISCOVER;
		// an IPv6-only socket may refuse it, which is harmless.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE); err != nil && !c.v6only {
			return fmt.Errorf("set IP_MTU_DISCOVER to probe on a dual-stack socket (don't fragment): %w", err)
		}
	} else if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE); err != nil {
		return fmt.Errorf("set IP_MTU_DISCOVER to probe (don't fragment): %w", err)
	}
	c.stats.dontFragment.Store(true)

	if !o.DisableGSO {
		// Kernels without UDP GSO (before 4.18) refuse the option.
		_, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
		c.stats.gso.Store(err == nil)
	}
	if !o.DisableGRO {
		// Kernels without UDP GRO (before 5.0) refuse the option.
		err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
		c.stats.gro.Store(err == nil)
	}
	return nil
}

// setBuffer asks for size bytes of socket buffer, with the FORCE option
// (which ignores the sysctl cap but needs CAP_NET_ADMIN) first, and returns
// what the kernel reports. A size ≤ 0 leaves the buffer alone.
func setBuffer(fd, force, plain, size int) (int, error) {
	if size > 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size); err != nil {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, size); err != nil {
				return 0, err
			}
		}
	}
	got, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, plain)
	if err != nil {
		return 0, nil // unknown; not worth failing for
	}
	return got, nil
}

func (c *linuxConn) BatchSize() int      { return c.batch }
func (c *linuxConn) LocalAddr() Endpoint { return c.local }
func (c *linuxConn) Stats() Stats        { return c.stats.snapshot() }

// Close wakes a read or write that waits, waits for calls in progress to
// return, and closes the socket (so its number cannot be reused under
// one).
func (c *linuxConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.rxw.close()
	c.txw.close()
	c.rx.mu.Lock()
	c.tx.mu.Lock()
	err := unix.Close(c.sock)
	c.tx.mu.Unlock()
	c.rx.mu.Unlock()
	if err != nil {
		return fmt.Errorf("bind: closing the socket on %v: %w", c.local, err)
	}
	return nil
}

// ioError wraps an error of the socket's poller (net.ErrClosed after
// Close) or of a system call with what was being done.
func (c *linuxConn) ioError(op string, err error) error {
	if c.closed.Load() && !errors.Is(err, net.ErrClosed) {
		err = net.ErrClosed
	}
	return fmt.Errorf("bind: %s on %v: %w", op, c.local, err)
}

// disableGSO turns GSO off for good after a GSO send failed with err.
func (c *linuxConn) disableGSO(err error) {
	c.stats.gso.Store(false)
	if c.log != nil {
		c.log.Warn("UDP GSO send failed; sending without GSO from now on",
			"local", c.local, "err", err)
	}
}
