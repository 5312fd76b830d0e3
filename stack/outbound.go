package stack

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/wanopt/wanopt/flow"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// DialTCP connects to dst through the stack's NIC with src as the source
// address and port, whatever addresses the host owns: this is the far
// edge's transparent egress, which lets the server see the real client.
// The NIC spoofs the source, and because it is promiscuous the server's
// answers to src reach the connection, provided the host routes src's
// network into the TUN (wanopt run --route).
//
// Errors wrap syscall errnos as a kernel connect would: ECONNREFUSED for a
// RST, EHOSTUNREACH or ENETUNREACH for an unreachable destination,
// ETIMEDOUT when the stack gave up retrying; ctx ending returns ctx.Err().
// The connection uses the stack's TCP options and buffer ranges.
func (st *Stack) DialTCP(ctx context.Context, src, dst netip.AddrPort) (*Conn, error) {
	if src.Addr().Is4() != dst.Addr().Is4() || !src.Addr().IsValid() || !dst.Addr().IsValid() {
		return nil, fmt.Errorf("stack: connect %v from %v: %w (source and destination must be both IPv4 or both IPv6)", dst, src, syscall.EAFNOSUPPORT)
	}
	if !st.enter() {
		return nil, ErrClosed
	}
	defer st.wg.Done()
	proto := ipv4.ProtocolNumber
	if !dst.Addr().Is4() {
		proto = ipv6.ProtocolNumber
	}
	var wq waiter.Queue
	ep, terr := st.s.NewEndpoint(tcp.ProtocolNumber, proto, &wq)
	if terr != nil {
		return nil, fmt.Errorf("stack: connect %v from %v: new endpoint: %s", dst, src, terr)
	}
	// The client may reuse its port while an earlier flow of the same
	// address and port lingers here in TIME-WAIT.
	ep.SocketOptions().SetReuseAddress(true)
	st.setKeepAlive(ep)
	if terr := ep.Bind(fullAddr(src)); terr != nil {
		ep.Close()
		return nil, fmt.Errorf("stack: connect %v from %v: bind the client's address: %s", dst, src, terr)
	}
	entry, ch := waiter.NewChannelEntry(waiter.WritableEvents | waiter.EventHUp | waiter.EventErr)
	wq.EventRegister(&entry)
	terr = ep.Connect(fullAddr(dst))
	if _, started := terr.(*tcpip.ErrConnectStarted); started {
		var gaveUp error
		select {
		case <-ch:
			terr = ep.LastError()
		case <-ctx.Done():
			gaveUp = ctx.Err()
		case <-st.ctx.Done():
			gaveUp = ErrClosed
		}
		if gaveUp != nil {
			wq.EventUnregister(&entry)
			ep.Abort()
			ep.Close()
			return nil, gaveUp
		}
	}
	wq.EventUnregister(&entry)
	if terr != nil {
		ep.Close()
		return nil, fmt.Errorf("stack: connect %v from %v: %w", dst, src, connectErrno(terr))
	}
	c := newConn(ep, &wq, "server", st.sizes())
	return c, nil
}

// connectErrno maps a gVisor connect error to the errno a kernel socket
// would report, so that callers classify both alike.
func connectErrno(terr tcpip.Error) error {
	switch terr.(type) {
	case *tcpip.ErrConnectionRefused, *tcpip.ErrConnectionReset:
		return syscall.ECONNREFUSED
	case *tcpip.ErrHostUnreachable:
		return syscall.EHOSTUNREACH
	case *tcpip.ErrNetworkUnreachable, *tcpip.ErrNoNet:
		return syscall.ENETUNREACH
	case *tcpip.ErrTimeout:
		return syscall.ETIMEDOUT
	}
	return fmt.Errorf("%s", terr)
}

func fullAddr(ap netip.AddrPort) tcpip.FullAddress {
	a := ap.Addr().Unmap()
	return tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFromSlice(a.AsSlice()), Port: ap.Port()}
}

// Dial is DialTCP as a flow.Dialer: the far edge's transparent egress
// connects servers from the client's own address with it.
func (st *Stack) Dial(ctx context.Context, src, dst netip.AddrPort) (flow.Conn, error) {
	c, err := st.DialTCP(ctx, src, dst)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// LocalAddr is the address the server sees: the client's.
func (c *Conn) LocalAddr() netip.AddrPort {
	a, terr := c.ep.GetLocalAddress()
	if terr != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(toAddr(a.Addr), a.Port)
}
