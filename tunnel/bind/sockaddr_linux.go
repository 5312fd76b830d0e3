//go:build linux && !bindfallback

package bind

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's sockaddr_in and sockaddr_in6 are stored in a
// RawSockaddrInet6, which is large enough for both; Family tells which.

// encodeSockaddr writes ep in the socket's family into sa and returns the
// length to pass to the kernel. IPv4 destinations of an AF_INET6 socket
// become IPv4-mapped addresses. It allocates only to resolve an IPv6 zone
// name (link-local destinations).
func (c *linuxConn) encodeSockaddr(sa *unix.RawSockaddrInet6, ep Endpoint) (uint32, error) {
	a := ep.Addr()
	if !a.IsValid() {
		return 0, fmt.Errorf("%w: invalid destination %v", ErrAddressFamily, ep)
	}
	if c.family == unix.AF_INET {
		a = a.Unmap()
		if !a.Is4() {
			return 0, fmt.Errorf("%w: IPv6 destination %v from IPv4 socket %v", ErrAddressFamily, ep, c.local)
		}
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.As4()}
		putPort(&sa4.Port, ep.Port())
		return unix.SizeofSockaddrInet4, nil
	}
	if c.v6only && a.Unmap().Is4() {
		return 0, fmt.Errorf("%w: IPv4 destination %v from IPv6-only socket %v", ErrAddressFamily, ep, c.local)
	}
	*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.As16()}
	if z := a.Zone(); z != "" {
		idx, err := zoneIndex(z)
		if err != nil {
			return 0, fmt.Errorf("%w: zone of destination %v: %v", ErrAddressFamily, ep, err)
		}
		sa.Scope_id = idx
	}
	putPort(&sa.Port, ep.Port())
	return unix.SizeofSockaddrInet6, nil
}

// decodeSockaddr reads the source address the kernel wrote into sa, with
// IPv4-mapped addresses unmapped. zone caches the last IPv6 zone name so
// that link-local peers cost no allocation either.
func decodeSockaddr(sa *unix.RawSockaddrInet6, zone *zoneCache) Endpoint {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), getPort(&sa4.Port))
	case unix.AF_INET6:
		a := netip.AddrFrom16(sa.Addr).Unmap()
		if sa.Scope_id != 0 && a.Is6() {
			a = a.WithZone(zone.name(sa.Scope_id))
		}
		return netip.AddrPortFrom(a, getPort(&sa.Port))
	}
	return Endpoint{}
}

// putPort and getPort convert between a port and the network byte order
// the kernel keeps in sockaddr's uint16.
func putPort(p *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

func getPort(p *uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// zoneCache remembers one interface index to zone name translation.
type zoneCache struct {
	idx  uint32
	zone string
}

func (z *zoneCache) name(idx uint32) string {
	if z.idx != idx || z.zone == "" {
		z.idx, z.zone = idx, zoneName(idx)
	}
	return z.zone
}

// zoneName names an interface index as netip zones do: the interface name,
// or the number when the interface is gone.
func zoneName(idx uint32) string {
	if ifi, err := net.InterfaceByIndex(int(idx)); err == nil {
		return ifi.Name
	}
	return strconv.FormatUint(uint64(idx), 10)
}

// zoneIndex resolves a zone (interface name or number) to an index.
func zoneIndex(zone string) (uint32, error) {
	if n, err := strconv.ParseUint(zone, 10, 32); err == nil {
		return uint32(n), nil
	}
	ifi, err := net.InterfaceByName(zone)
	if err != nil {
		return 0, err
	}
	return uint32(ifi.Index), nil
}
