package stack

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/wanopt/wanopt/flow"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// Errors of the stack's side of a flow, seen by the copy loops.
var (
	errPeerReset = errors.New("connection reset by peer")
	errAborted   = errors.New("flow aborted")
)

// Conn is one TCP connection of the stack as a flow.Conn: an intercepted
// client's (the stack relays it) or one the stack opened with DialTCP. Read
// returns io.EOF after the peer's FIN and an error wrapping errPeerReset
// after its RST; unlike gonet it holds no buffer while it waits. One
// goroutine may Read while another Writes; Close and Abort unblock both.
type Conn struct {
	ep   tcpip.Endpoint
	wq   *waiter.Queue
	peer string // "client" or "server", for errors

	rEntry, wEntry waiter.Entry
	rCh, wCh       chan struct{}
	// closed ends every wait: Close may release the waiters while another
	// goroutine blocks in Read or Write.
	closed chan struct{}
	once   sync.Once
	// sizes, if set (the stack has a memory budget), are the buffers' floor
	// and grown sizes: see flow.Resizer.
	sizes *bufferSizes
	// wmu serializes Write, whose reader wr hands the bytes to the
	// endpoint: one reader per Conn, since a reader passed through the
	// endpoint's interface would otherwise be allocated at every Write.
	wmu sync.Mutex
	wr  bytes.Reader
	// rmu serializes Read, whose writer rw takes the bytes from the
	// endpoint, for the same reason.
	rmu sync.Mutex
	rw  tcpip.SliceWriter
}

// bufferSizes are a Conn's buffer sizes under a flow.Budget: the floor it
// holds without a grant and the size a grant lets it grow to.
type bufferSizes struct {
	rcvFloor, rcvGrown, sndFloor, sndGrown int
}

// newConn wraps an established endpoint. With sizes, it sets the buffers to
// their floors, which also turns gVisor's auto-tuning off for them: only a
// grant grows them (Grow). The window scale was settled in the handshake
// from the stack's maximum, so a grown buffer is fully usable.
func newConn(ep tcpip.Endpoint, wq *waiter.Queue, peer string, sizes *bufferSizes) *Conn {
	c := &Conn{ep: ep, wq: wq, peer: peer, closed: make(chan struct{}), sizes: sizes}
	if sizes != nil {
		ep.SocketOptions().SetReceiveBufferSize(int64(sizes.rcvFloor), true)
		ep.SocketOptions().SetSendBufferSize(int64(sizes.sndFloor), true)
	}
	c.rEntry, c.rCh = waiter.NewChannelEntry(waiter.ReadableEvents | waiter.EventHUp | waiter.EventErr)
	c.wEntry, c.wCh = waiter.NewChannelEntry(waiter.WritableEvents | waiter.EventHUp | waiter.EventErr)
	wq.EventRegister(&c.rEntry)
	wq.EventRegister(&c.wEntry)
	return c
}

// CloseWrite sends a FIN; the peer may go on sending.
func (c *Conn) CloseWrite() error {
	if terr := c.ep.Shutdown(tcpip.ShutdownWrite); terr != nil {
		return fmt.Errorf("stack: close-write: %s", terr)
	}
	return nil
}

// Close ends the connection gracefully (a FIN if not yet sent) and releases
// it; the stack finishes TIME-WAIT by itself.
func (c *Conn) Close() error {
	c.once.Do(func() {
		close(c.closed) // wakes a Read or Write blocked on the waiters
		c.ep.Close()
		c.wq.EventUnregister(&c.rEntry)
		c.wq.EventUnregister(&c.wEntry)
	})
	return nil
}

// Abort resets the connection (a RST) and releases it.
func (c *Conn) Abort() error {
	c.ep.Abort()
	return c.Close()
}

var _ flow.ResetWatcher = (*Conn)(nil)

// WatchReset calls f, on a goroutine of its own, once the connection has
// failed: the peer's RST, a keepalive or retransmission timeout, or an
// Abort (flow.ResetWatcher). A graceful close is not a failure.
func (c *Conn) WatchReset(f func()) (stop func()) {
	ep, ok := c.ep.(interface{ EndpointState() tcp.EndpointState })
	if !ok {
		return func() {}
	}
	var once sync.Once
	check := func() {
		// The error state is reached, and waiters notified, with the
		// endpoint's locks held: only read the state here.
		if ep.EndpointState() == tcp.StateError {
			once.Do(func() { go f() })
		}
	}
	e := waiter.NewFunctionEntry(waiter.EventErr, func(waiter.EventMask) { check() })
	c.wq.EventRegister(&e)
	check() // it may have failed before the watch began
	return func() { c.wq.EventUnregister(&e) }
}

// WaitReadable blocks until Read would not block (data, FIN or an error is
// pending) or the Conn is closed, without holding a buffer.
func (c *Conn) WaitReadable() {
	for !c.Readable() {
		select {
		case <-c.rCh:
		case <-c.closed:
			return
		}
	}
}

// Readable reports whether Read would not block.
func (c *Conn) Readable() bool {
	return c.ep.Readiness(waiter.ReadableEvents|waiter.EventHUp|waiter.EventErr) != 0
}

// Read reads what the peer sent. It blocks until data, the peer's FIN
// (io.EOF) or an error arrives.
func (c *Conn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	defer func() { c.rw = nil }() // keep no reference to b
	for {
		c.rw = tcpip.SliceWriter(b)
		res, terr := c.ep.Read(&c.rw, tcpip.ReadOptions{})
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

// Write sends b to the peer, blocking while the send buffer is full.
func (c *Conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	defer c.wr.Reset(nil) // keep no reference to b
	n := 0
	for n < len(b) {
		c.wr.Reset(b[n:])
		k, terr := c.ep.Write(&c.wr, tcpip.WriteOptions{})
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

func (c *Conn) err(op string, terr tcpip.Error) error {
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

// GrowBytes is what a grant for one direction adds: the growth of the
// receive buffer (reading: data from this end) or of the send buffer
// (flow.Resizer).
func (c *Conn) GrowBytes(reading bool) int64 {
	switch {
	case c.sizes == nil:
		return 0
	case reading:
		return int64(c.sizes.rcvGrown - c.sizes.rcvFloor)
	}
	return int64(c.sizes.sndGrown - c.sizes.sndFloor)
}

// Grow enlarges the receive (reading) or the send buffer to its granted
// size (flow.Resizer).
func (c *Conn) Grow(reading bool) {
	switch {
	case c.sizes == nil:
	case reading:
		c.ep.SocketOptions().SetReceiveBufferSize(int64(c.sizes.rcvGrown), true)
	default:
		c.ep.SocketOptions().SetSendBufferSize(int64(c.sizes.sndGrown), true)
	}
}

// Shrink returns the send buffer to its floor once the data queued in it
// fits the floor (flow.Resizer). The receive buffer is never shrunk: the
// window already advertised for it cannot be withdrawn, so the peer may
// still fill the grown size; its grant ends with the flow.
func (c *Conn) Shrink(reading bool) bool {
	switch {
	case c.sizes == nil:
		return true
	case reading:
		return false
	}
	queued, terr := c.ep.GetSockOptInt(tcpip.SendQueueSizeOption)
	if terr != nil || queued > c.sizes.sndFloor {
		return false
	}
	c.ep.SocketOptions().SetSendBufferSize(int64(c.sizes.sndFloor), true)
	return true
}
