package stack

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"
)

// Errors of the stack's side of a flow, seen by the copy loops.
var (
	errPeerReset = errors.New("connection reset by peer")
	errAborted   = errors.New("flow aborted")
)

// epConn is a blocking io.Reader and io.Writer over a gVisor TCP endpoint.
// Unlike gonet it returns typed errors (io.EOF on the peer's FIN,
// errPeerReset on its RST) and holds no buffer while it waits. One
// goroutine may Read while another Writes; Abort on the endpoint unblocks
// both.
type epConn struct {
	ep   tcpip.Endpoint
	wq   *waiter.Queue
	peer string // "client" or "server", for errors

	rEntry, wEntry waiter.Entry
	rCh, wCh       chan struct{}
	// closed, when not nil, ends every wait: a Conn's Close may release
	// the waiters while another goroutine blocks in Read or Write.
	closed chan struct{}
}

func newEPConn(ep tcpip.Endpoint, wq *waiter.Queue, peer string) *epConn {
	c := &epConn{ep: ep, wq: wq, peer: peer}
	c.rEntry, c.rCh = waiter.NewChannelEntry(waiter.ReadableEvents | waiter.EventHUp | waiter.EventErr)
	c.wEntry, c.wCh = waiter.NewChannelEntry(waiter.WritableEvents | waiter.EventHUp | waiter.EventErr)
	wq.EventRegister(&c.rEntry)
	wq.EventRegister(&c.wEntry)
	return c
}

// release unregisters the waiters; call once both directions are done.
func (c *epConn) release() {
	c.wq.EventUnregister(&c.rEntry)
	c.wq.EventUnregister(&c.wEntry)
}

// waitReadable blocks until Read would not block (data, FIN or an error is
// pending), without holding a buffer.
func (c *epConn) waitReadable() {
	for !c.readable() {
		select {
		case <-c.rCh:
		case <-c.closed:
			return
		}
	}
}

// readable reports whether Read would not block.
func (c *epConn) readable() bool {
	return c.ep.Readiness(waiter.ReadableEvents|waiter.EventHUp|waiter.EventErr) != 0
}

// Read reads what the client sent. It blocks until data, the client's FIN
// (io.EOF) or an error arrives.
func (c *epConn) Read(b []byte) (int, error) {
	for {
		w := tcpip.SliceWriter(b)
		res, terr := c.ep.Read(&w, tcpip.ReadOptions{})
		if terr == nil {
			if res.Count > 0 {
				c.ep.ModerateRecvBuf(res.Count) // receive-buffer auto-tuning
			}
			return res.Count, nil
		}
		if _, ok := terr.(*tcpip.ErrWouldBlock); ok {
			select {
			case <-c.rCh:
			case <-c.closed:
				return 0, fmt.Errorf("%s read: %w (closed)", c.peer, errAborted)
			}
			continue
		}
		return 0, c.err("read", terr)
	}
}

// Write sends b to the client, blocking while the send buffer is full.
func (c *epConn) Write(b []byte) (int, error) {
	var r bytes.Reader
	n := 0
	for n < len(b) {
		r.Reset(b[n:])
		k, terr := c.ep.Write(&r, tcpip.WriteOptions{})
		n += int(k)
		if terr == nil {
			continue
		}
		if _, ok := terr.(*tcpip.ErrWouldBlock); ok {
			select {
			case <-c.wCh:
			case <-c.closed:
				return n, fmt.Errorf("%s write: %w (closed)", c.peer, errAborted)
			}
			continue
		}
		return n, c.err("write", terr)
	}
	return n, nil
}

func (c *epConn) err(op string, terr tcpip.Error) error {
	switch terr.(type) {
	case *tcpip.ErrClosedForReceive:
		return io.EOF
	case *tcpip.ErrConnectionReset:
		return fmt.Errorf("%s %s: %w", c.peer, op, errPeerReset)
	case *tcpip.ErrAborted, *tcpip.ErrConnectionAborted, *tcpip.ErrClosedForSend:
		return fmt.Errorf("%s %s: %w (%s)", c.peer, op, errAborted, terr)
	}
	return fmt.Errorf("%s %s: %s", c.peer, op, terr)
}
