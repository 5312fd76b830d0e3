package egress

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// localAddrs is the host's own addresses, read from its interfaces at most
// once a second: an address added while the edge runs is refused within a
// second. The zero value is ready to use.
type localAddrs struct {
	mu    sync.Mutex
	read  time.Time
	addrs map[netip.Addr]bool
}

// localAddrsRefresh bounds how stale the set may be.
const localAddrsRefresh = time.Second

// contains reports whether a is one of the host's addresses.
func (l *localAddrs) contains(a netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); l.addrs == nil || now.Sub(l.read) > localAddrsRefresh {
		l.read = now
		l.addrs = hostAddrs()
	}
	return l.addrs[a.Unmap().WithZone("")]
}

// hostAddrs lists the addresses of the host's interfaces. If they cannot be
// read it returns an empty set; the special classes (loopback, link-local,
// unspecified) still hold.
func hostAddrs() map[netip.Addr]bool {
	m := make(map[netip.Addr]bool)
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return m
	}
	for _, ifa := range ifas {
		if p, err := netip.ParsePrefix(ifa.String()); err == nil {
			m[p.Addr().Unmap().WithZone("")] = true
		}
	}
	return m
}
