package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/wanopt/wanopt/tunnel/driver"
)

// Resolver looks up a host name's addresses (Shared.Resolver).
type Resolver func(ctx context.Context, host string) ([]netip.Addr, error)

// defaultResolver is Shared.Resolver when none is set: the system's, as
// 'wanopt run' resolves the names at start.
func defaultResolver(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// reresolveInterval is how long a tunnel to a peer given by host name
// stays down before the name is looked up again, and then the least time
// between two lookups while it stays down. A tunnel down that long has
// missed a score of handshakes (one a second), so it is no lost packet;
// dynamic DNS records commonly live a minute, so a new address is found
// within about one TTL, at one lookup per half minute (WireGuard's
// reresolve-dns timer runs as often). A variable: tests shorten it.
var reresolveInterval = 30 * time.Second

const (
	// reresolveTimeout bounds one lookup: less than the interval, so
	// lookups never pile up behind a resolver that does not answer.
	reresolveTimeout = 10 * time.Second
	// reresolveWarnEvery spaces the warnings of failed lookups: a DNS
	// outage would otherwise log one every interval.
	reresolveWarnEvery = time.Minute
)

// errPeerMoved ends a dial whose peer's host name now resolves to another
// address: the next dial goes there.
var errPeerMoved = errors.New("the peer's host name resolves to a new address")

// peerAddr is where an initiator dials its peer: the address it was
// given, or the one its host name resolves to now. The loop that keeps
// the tunnel up looks the name up again (refresh); Status reads current.
type peerAddr struct {
	// host is the name addr was resolved from; empty: addr was given,
	// and never changes.
	host    string
	resolve Resolver
	every   time.Duration
	log     *slog.Logger

	mu   sync.Mutex
	addr netip.AddrPort
	// last is when the name was last looked up, lastWarn when a failed
	// lookup was last logged (zero: never).
	last, lastWarn time.Time
}

// newPeerAddr returns the address of a peer at addr, resolved from host
// (empty: none) with resolve (nil: the system's resolver).
func newPeerAddr(addr netip.AddrPort, host string, resolve Resolver, log *slog.Logger) *peerAddr {
	if resolve == nil {
		resolve = defaultResolver
	}
	return &peerAddr{host: host, resolve: resolve, every: reresolveInterval, addr: addr, log: log}
}

// current is the address to dial now.
func (p *peerAddr) current() netip.AddrPort {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// dueAt is when the name is next looked up, for a tunnel down since
// downSince: an interval after the tunnel went down or after the last
// lookup, whichever is later.
func (p *peerAddr) dueAt(downSince time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	from := downSince
	if p.last.After(from) {
		from = p.last
	}
	return from.Add(p.every)
}

// refresh looks the host name up again (at now, by the clock of the loop
// that calls it) and reports whether the address changed. A failed
// lookup keeps the address, warning at most every reresolveWarnEvery.
func (p *peerAddr) refresh(ctx context.Context, now time.Time) (changed bool) {
	p.mu.Lock()
	p.last = now
	p.mu.Unlock()
	lctx, cancel := context.WithTimeout(ctx, reresolveTimeout)
	defer cancel()
	addrs, err := p.resolve(lctx, p.host)
	if ctx.Err() != nil {
		return false // stopping, or the tunnel came up meanwhile
	}
	old, next, err := p.apply(addrs, err)
	if err != nil {
		if p.warnDue(now) {
			p.log.Warn("could not look up the peer's host name again; keeping its address", "host", p.host, "addr", old,
				"err", err, "hint", "check this host's DNS; the edge tries again every "+p.every.String()+" while the tunnel is down")
		}
		return false
	}
	if next == old {
		return false
	}
	p.log.Info("peer address changed", "host", p.host, "old", old, "new", next)
	return true
}

// apply takes the addresses a lookup returned (or its error), and returns
// the address before and after. While the address in use is among the
// answers it stays: a name with several addresses, answered in another
// order each time, must not move the tunnel at each lookup. Else the
// first answer is taken, as at start.
func (p *peerAddr) apply(addrs []netip.Addr, err error) (old, next netip.AddrPort, _ error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old = p.addr
	if err == nil && len(addrs) == 0 {
		err = errors.New("no address")
	}
	if err != nil {
		return old, old, err
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	if slices.Contains(addrs, old.Addr()) {
		return old, old, nil
	}
	p.addr = netip.AddrPortFrom(addrs[0], old.Port())
	return old, p.addr, nil
}

// warnDue reports whether a failed lookup at now is logged (and if so,
// records it).
func (p *peerAddr) warnDue(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.lastWarn.IsZero() && now.Sub(p.lastWarn) < reresolveWarnEvery {
		return false
	}
	p.lastWarn = now
	return true
}

// dialFollowing runs one open of the tunnel to pa's address, looking
// pa's host name up again while the tunnel stays down: a lookup due
// before the dial goes first, and one that falls due during the dial (a
// dial waits for an answer up to the peer timeout) runs in a goroutine
// this call owns and waits for. A new address ends the dial with an
// error wrapping errPeerMoved, so that the next one dials it. Without a
// host name it is open with the address given.
func dialFollowing(ctx context.Context, l *link, pa *peerAddr, open func(context.Context, netip.AddrPort) (*driver.Tunnel, error)) (*driver.Tunnel, error) {
	if pa.host == "" {
		return open(ctx, pa.current())
	}
	since := l.downSince()
	if now := time.Now(); !now.Before(pa.dueAt(since)) && pa.refresh(ctx, now) {
		l.setAddr(pa.current().String())
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	moved := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			tm := time.NewTimer(time.Until(pa.dueAt(since)))
			select {
			case <-dctx.Done():
				tm.Stop()
				return
			case now := <-tm.C:
				if pa.refresh(dctx, now) {
					l.setAddr(pa.current().String())
					close(moved)
					cancel()
					return
				}
			}
		}
	}()
	addr := pa.current()
	t, err := open(dctx, addr)
	cancel()
	<-done
	select {
	case <-moved:
		if err != nil {
			return nil, fmt.Errorf("%w: stopped dialling %v", errPeerMoved, addr)
		}
	default:
	}
	// A tunnel that came up as the name moved is kept: it is up.
	return t, err
}
