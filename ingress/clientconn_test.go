//go:build linux

package ingress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// clientConn is the benchmark client's end of a flow: the gVisor endpoint
// itself, with one waiter entry, one writer for reads and one reader for
// writes for its whole life, so that BenchmarkEdgePath's allocations are
// the path's, not gonet's. One goroutine uses a clientConn at a time.
// Every wait ends when ctx, given at dial, is done.
type clientConn struct {
	ctx   context.Context
	ep    tcpip.Endpoint
	wq    waiter.Queue
	entry waiter.Entry
	ready chan struct{} // any event: readable, writable, hang-up, error
	w     tcpip.SliceWriter
	r     bytes.Reader
}

// dialClient connects a TCP endpoint of s to addr, as gonet's
// DialContextTCP does, waiting at most connectTimeout.
func dialClient(ctx context.Context, s *gstack.Stack, addr tcpip.FullAddress) (*clientConn, error) {
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	c := &clientConn{ctx: cctx}
	ep, terr := s.NewEndpoint(tcp.ProtocolNumber, ipv4.ProtocolNumber, &c.wq)
	if terr != nil {
		return nil, fmt.Errorf("client endpoint: %s", terr)
	}
	c.ep = ep
	c.entry, c.ready = waiter.NewChannelEntry(waiter.ReadableEvents | waiter.WritableEvents | waiter.EventHUp | waiter.EventErr)
	c.wq.EventRegister(&c.entry)
	terr = ep.Connect(addr)
	if _, ok := terr.(*tcpip.ErrConnectStarted); ok {
		for ep.Readiness(waiter.WritableEvents|waiter.EventHUp|waiter.EventErr) == 0 {
			if err := c.wait(); err != nil {
				c.Close()
				return nil, fmt.Errorf("connect: %w", err)
			}
		}
		terr = ep.LastError()
	}
	if terr != nil {
		c.Close()
		return nil, fmt.Errorf("connect: %s", terr)
	}
	c.ctx = ctx
	return c, nil
}

const connectTimeout = 10 * time.Second

func (c *clientConn) wait() error {
	select {
	case <-c.ready:
		return nil
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
}

// Read reads what the server sent; io.EOF after its FIN.
func (c *clientConn) Read(b []byte) (int, error) {
	defer func() { c.w = nil }()
	for {
		c.w = tcpip.SliceWriter(b)
		res, terr := c.ep.Read(&c.w, tcpip.ReadOptions{})
		switch terr.(type) {
		case nil:
			if res.Count > 0 {
				c.ep.ModerateRecvBuf(res.Count) // as gonet does
			}
			return res.Count, nil
		case *tcpip.ErrWouldBlock:
			if err := c.wait(); err != nil {
				return 0, fmt.Errorf("read: %w", err)
			}
		case *tcpip.ErrClosedForReceive:
			return 0, io.EOF
		default:
			return 0, fmt.Errorf("read: %s", terr)
		}
	}
}

// Write sends b whole, waiting while the send buffer is full.
func (c *clientConn) Write(b []byte) (int, error) {
	defer c.r.Reset(nil)
	n := 0
	for n < len(b) {
		c.r.Reset(b[n:])
		k, terr := c.ep.Write(&c.r, tcpip.WriteOptions{})
		n += int(k)
		switch terr.(type) {
		case nil:
		case *tcpip.ErrWouldBlock:
			if err := c.wait(); err != nil {
				return n, fmt.Errorf("write: %w", err)
			}
		default:
			return n, fmt.Errorf("write: %s", terr)
		}
	}
	return n, nil
}

// CloseWrite sends the client's FIN.
func (c *clientConn) CloseWrite() error {
	if terr := c.ep.Shutdown(tcpip.ShutdownWrite); terr != nil {
		return errors.New(terr.String())
	}
	return nil
}

// Close closes the endpoint.
func (c *clientConn) Close() error {
	c.wq.EventUnregister(&c.entry)
	c.ep.Close()
	return nil
}
