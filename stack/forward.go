package stack

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// handle runs on the goroutine gVisor's forwarder starts for each SYN. It
// dials the far side, completes or refuses the client's handshake, and then
// relays the flow until both directions are done.
func (st *Stack) handle(r *tcp.ForwarderRequest) {
	id := r.ID() // before Complete, which releases the segment holding it
	if !st.enter() {
		r.Complete(false)
		return
	}
	defer st.wg.Done()
	st.syns.Add(1)

	src := netip.AddrPortFrom(toAddr(id.RemoteAddress), id.RemotePort)
	dst := netip.AddrPortFrom(toAddr(id.LocalAddress), id.LocalPort)
	f := st.flows.add(src, dst, time.Now())
	defer st.flows.remove(f)
	log := st.log.With("flow", f.id, "src", src, "dst", dst)

	ctx, cancel := context.WithTimeout(st.ctx, st.cfg.DialTimeout)
	far, err := st.dialer.DialFlow(ctx, src, dst)
	ctxErr := ctx.Err()
	cancel()
	if err == nil && st.ctx.Err() != nil {
		far.Close()
		err = context.Canceled
	}
	if err != nil {
		st.reject(r, err, ctxErr, log)
		return
	}

	f.setState(FlowHandshake)
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	r.Complete(false)
	if terr != nil {
		// The client gave up (or reset) while the far side was connecting.
		st.handshakeFailed.Add(1)
		log.Debug("client handshake failed after far side connected", "err", terr.String())
		abortFar(far)
		return
	}
	st.dialed.Add(1)
	st.setKeepAlive(ep)
	f.setState(FlowEstablished)
	log.Debug("flow established")
	st.relay(f, ep, &wq, far, log)
}

// reject completes a request whose far side could not be opened, giving the
// client what it would have seen without wanopt.
func (st *Stack) reject(r *tcp.ForwarderRequest, err, ctxErr error, log interface {
	Debug(string, ...any)
	Warn(string, ...any)
}) {
	switch {
	case errors.Is(err, ErrRefused):
		st.refused.Add(1)
		r.Complete(true)
	case errors.Is(err, ErrNotAllowed):
		st.notAllowed.Add(1)
		r.Complete(true)
	case errors.Is(err, ErrUnreachable):
		st.unreachable.Add(1)
		r.Complete(false)
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(ctxErr, context.DeadlineExceeded):
		st.timeouts.Add(1)
		r.Complete(false)
	case st.ctx.Err() != nil:
		r.Complete(false) // shutting down
		return
	default:
		st.dialErrors.Add(1)
		r.Complete(false)
		log.Warn("dial far side failed; dropping SYN", "err", err)
		return
	}
	log.Debug("far side not connected", "err", err)
}

// relay copies both ways until each direction has ended. A clean end (EOF)
// is passed on as a FIN, independently per direction; a failure of either
// side resets the other.
func (st *Stack) relay(f *flow, ep tcpip.Endpoint, wq *waiter.Queue, far FlowConn, log interface {
	Debug(string, ...any)
}) {
	cl := newEPConn(ep, wq, "client")
	var farOnce sync.Once
	closeFar := func(reset bool) {
		farOnce.Do(func() {
			if reset {
				abortFar(far)
			} else {
				far.Close()
			}
		})
	}
	abortBoth := func() {
		ep.Abort()
		closeFar(true)
	}
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		abortBoth()
		ep.Close()
		cl.release()
		return
	}
	st.aborts[f.id] = abortBoth
	st.wg.Add(1)
	st.mu.Unlock()

	var clean atomic.Int32 // directions that ended with a FIN
	upDone := make(chan struct{})
	go func() { // client → far
		defer st.wg.Done()
		defer close(upDone)
		rerr, werr := copyAdaptive(far, cl, &f.up)
		switch {
		case werr != nil: // far side failed
			log.Debug("far write failed; resetting client", "err", werr)
			ep.Abort()
			closeFar(false)
		case rerr == io.EOF:
			if err := far.CloseWrite(); err != nil {
				log.Debug("far close-write failed; resetting client", "err", err)
				ep.Abort()
				closeFar(false)
				return
			}
			clean.Add(1)
			f.halfClosed(1)
		default: // client reset, or we aborted
			log.Debug("client read ended", "err", rerr)
			closeFar(true)
		}
	}()

	rerr, werr := copyAdaptive(cl, far, &f.down) // far → client
	switch {
	case werr != nil: // client reset, or we aborted
		log.Debug("client write ended", "err", werr)
		closeFar(true)
	case rerr == io.EOF:
		ep.Shutdown(tcpip.ShutdownWrite)
		clean.Add(1)
		f.halfClosed(2)
	default: // far side failed
		log.Debug("far read failed; resetting client", "err", rerr)
		ep.Abort()
		closeFar(false)
	}
	<-upDone
	f.setState(FlowClosing)
	closeFar(clean.Load() != 2)
	ep.Close() // graceful after two FINs; gVisor finishes TIME-WAIT itself
	cl.release()
	st.mu.Lock()
	delete(st.aborts, f.id)
	st.mu.Unlock()
	log.Debug("flow closed", "up", f.up.Load(), "down", f.down.Load())
}

// setKeepAlive makes the endpoint probe a silent client, so that the flow of
// a client that vanished without FIN or RST ends.
func (st *Stack) setKeepAlive(ep tcpip.Endpoint) {
	if st.cfg.KeepAliveIdle < 0 {
		return
	}
	idle := tcpip.KeepaliveIdleOption(st.cfg.KeepAliveIdle)
	intvl := tcpip.KeepaliveIntervalOption(min(30*time.Second, st.cfg.KeepAliveIdle))
	ep.SetSockOpt(&idle)
	ep.SetSockOpt(&intvl)
	ep.SetSockOptInt(tcpip.KeepaliveCountOption, 4)
	ep.SocketOptions().SetKeepAlive(true)
}

func abortFar(far FlowConn) {
	if a, ok := far.(Aborter); ok {
		a.Abort()
		return
	}
	far.Close()
}

const smallBuf, bigBuf = 4 << 10, 64 << 10

var (
	smallPool = sync.Pool{New: func() any { b := make([]byte, smallBuf); return &b }}
	bigPool   = sync.Pool{New: func() any { b := make([]byte, bigBuf); return &b }}
)

// copyAdaptive copies src to dst until src ends, counting bytes in n. It
// holds a small pooled buffer while the flow trickles and a large one while
// reads fill the buffer or the flow streams; when src can wait for data
// without a buffer (the client side), it holds none while idle. It returns
// src's error (io.EOF at a clean end) or dst's error.
func copyAdaptive(dst io.Writer, src io.Reader, n *atomic.Uint64) (rerr, werr error) {
	waiter, canWait := src.(interface {
		readable() bool
		waitReadable()
	})
	gatherer, canGather := src.(gatherReader)
	var lastData time.Time // when the previous read returned data
	var small, big *[]byte
	release := func() {
		if small != nil {
			smallPool.Put(small)
		}
		if big != nil {
			bigPool.Put(big)
		}
		small, big = nil, nil
	}
	defer release()
	for {
		if canWait && !waiter.readable() {
			release()
			waiter.waitReadable()
		}
		streaming := canGather && time.Since(lastData) < streamingGap
		if streaming && big == nil {
			release()
			big = bigPool.Get().(*[]byte)
		}
		if small == nil && big == nil {
			small = smallPool.Get().(*[]byte)
		}
		var buf []byte
		if big != nil {
			buf = *big
		} else {
			buf = *small
		}
		var k int
		var err error
		if streaming {
			k, err = gatherer.ReadGather(buf, coalesceBytes, coalesceWait)
		} else {
			k, err = src.Read(buf)
		}
		if k > 0 {
			if canGather {
				lastData = time.Now()
			}
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return nil, werr
			}
			n.Add(uint64(k))
			switch {
			case k == len(buf) && big == nil:
				smallPool.Put(small)
				small, big = nil, bigPool.Get().(*[]byte)
			case k < smallBuf && big != nil && !streaming:
				bigPool.Put(big)
				small, big = smallPool.Get().(*[]byte), nil
			}
		}
		if err != nil {
			return err, nil
		}
	}
}

// Gathering the far side's data. The tunnel delivers a bulk flow a
// packet or two at a time, and gVisor sends each Write to the client at
// once: one TUN write and about one client ACK per 2 KB (measured: 2.0 KB
// per write at 235 Mbit/s, the near edge's largest CPU cost). While data
// streams (the previous read returned data within streamingGap), a read
// gathers up to coalesceBytes, waiting at most coalesceWait after its
// first bytes, so that gVisor sends them as one large TSO segment. The
// tunnel's driver fills the buffer as data arrives (driver.Stream's
// ReadGather), so this loop wakes once per gathered buffer. The first
// read after a pause is never delayed, so a request's answer or a
// keystroke goes out at once. The wait is 2 ms rather than 0.5 ms so that
// slower flows gather too: at 250 Mbit/s 32 KiB arrive within about 1 ms
// anyway; at 50 Mbit/s 0.5 ms gathered only 3 KB per TUN write and the
// near edge spent 62.6 CPU-s/GB, 51.0 with 2 ms (wanbench cisco --rate
// 50mbit --rtt 100ms --bytes 25MB).
const (
	coalesceWait  = 2 * time.Millisecond
	coalesceBytes = 32 << 10
	streamingGap  = 2 * time.Millisecond
)

// gatherReader is a source that gathers a read (the tunnel's stream).
type gatherReader interface {
	io.Reader
	ReadGather(p []byte, min int, wait time.Duration) (int, error)
}

func toAddr(a tcpip.Address) netip.Addr {
	if a.Len() == 4 {
		return netip.AddrFrom4(a.As4())
	}
	return netip.AddrFrom16(a.As16())
}
