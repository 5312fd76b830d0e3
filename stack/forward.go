package stack

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/wanopt/wanopt/flow"
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
	if !st.cfg.Budget.Admit() {
		// As a full host would: a RST, at once, so the client's connect
		// fails now rather than after its SYN retries.
		st.overBudget.Add(1)
		r.Complete(true)
		return
	}
	defer st.cfg.Budget.Leave()

	src := netip.AddrPortFrom(toAddr(id.RemoteAddress), id.RemotePort)
	dst := netip.AddrPortFrom(toAddr(id.LocalAddress), id.LocalPort)
	f := st.flows.add(src, dst, time.Now())
	defer st.flows.remove(f)
	log := st.log.With("flow", f.id, "src", src, "dst", dst)

	ctx, cancel := context.WithTimeout(st.ctx, st.cfg.DialTimeout)
	far, err := st.dialer.Dial(ctx, src, dst)
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
		flow.Abort(far)
		return
	}
	st.dialed.Add(1)
	st.setKeepAlive(ep)
	f.setState(FlowEstablished)
	log.Debug("flow established")
	flow.Relay(st.ctx, newConn(ep, &wq, "client", st.sizes()), far, flow.RelayOptions{
		Budget: st.cfg.Budget, State: &f.relay,
		LANToWAN: &f.up, WANToLAN: &f.down, Log: log,
		IdleTimeout: st.cfg.IdleTimeout, Idled: func() { st.idled.Add(1) },
		HalfClosed: func(lanToWAN bool) {
			if lanToWAN {
				f.halfClosed(1)
			} else {
				f.halfClosed(2)
			}
		},
	})
	f.setState(FlowClosing)
	log.Debug("flow closed", "up", f.up.Load(), "down", f.down.Load())
}

// reject completes a request whose far side could not be opened, giving the
// client what it would have seen without wanopt.
func (st *Stack) reject(r *tcp.ForwarderRequest, err, ctxErr error, log *slog.Logger) {
	switch {
	case errors.Is(err, flow.ErrRefused):
		st.refused.Add(1)
		r.Complete(true)
	case errors.Is(err, flow.ErrNotAllowed):
		st.notAllowed.Add(1)
		r.Complete(true)
	case errors.Is(err, flow.ErrUnreachable):
		st.unreachable.Add(1)
		r.Complete(false)
	case errors.Is(err, flow.ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(ctxErr, context.DeadlineExceeded):
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

func toAddr(a tcpip.Address) netip.Addr {
	if a.Len() == 4 {
		return netip.AddrFrom4(a.As4())
	}
	return netip.AddrFrom16(a.As16())
}
