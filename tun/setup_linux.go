//go:build linux

package tun

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Setup sets the address, MTU, transmit queue length and routes of an
// existing device and brings it up, over netlink, in the calling thread's
// network namespace. It needs CAP_NET_ADMIN; without it the error says so and
// names the equivalent ip(8) commands. Setup is idempotent: addresses and
// routes are replaced, not duplicated.
func Setup(cfg SetupConfig) error {
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	if cfg.TxQueueLen == 0 {
		cfg.TxQueueLen = DefaultTxQueueLen
	}
	if cfg.MTU < 576 || cfg.MTU > MaxMTU {
		return fmt.Errorf("set up tun %s: MTU %d out of range: use 576 to %d", cfg.Name, cfg.MTU, MaxMTU)
	}
	link, err := netlink.LinkByName(cfg.Name)
	if err != nil {
		return fmt.Errorf("set up tun %s: %w; create it first (Open with Create, or 'ip tuntap add dev %s mode tun')", cfg.Name, err, cfg.Name)
	}
	step := func(what, cmd string, err error) error {
		if err == nil {
			return nil
		}
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return fmt.Errorf("set up tun %s: %s: %w: %w; run with CAP_NET_ADMIN or do it beforehand: %s", cfg.Name, what, ErrPermission, err, cmd)
		}
		return fmt.Errorf("set up tun %s: %s: %w", cfg.Name, what, err)
	}
	if err := step("set MTU", fmt.Sprintf("'ip link set dev %s mtu %d'", cfg.Name, cfg.MTU),
		netlink.LinkSetMTU(link, cfg.MTU)); err != nil {
		return err
	}
	if err := step("set txqueuelen", fmt.Sprintf("'ip link set dev %s txqueuelen %d'", cfg.Name, cfg.TxQueueLen),
		netlink.LinkSetTxQLen(link, cfg.TxQueueLen)); err != nil {
		return err
	}
	for _, p := range cfg.Addrs {
		addr := &netlink.Addr{IPNet: prefixNet(p)}
		if p.Addr().Is6() && !p.Addr().Is4In6() {
			addr.Flags = unix.IFA_F_NODAD // usable at once: nothing to collide with on a TUN
		}
		if err := step("add address "+p.String(), fmt.Sprintf("'ip addr add %s dev %s'", p, cfg.Name),
			netlink.AddrReplace(link, addr)); err != nil {
			return err
		}
	}
	if err := step("bring up", fmt.Sprintf("'ip link set dev %s up'", cfg.Name),
		netlink.LinkSetUp(link)); err != nil {
		return err
	}
	for _, p := range cfg.Routes {
		r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: prefixNet(p.Masked()), Scope: netlink.SCOPE_LINK}
		if err := step("add route "+p.String(), fmt.Sprintf("'ip route replace %s dev %s'", p.Masked(), cfg.Name),
			netlink.RouteReplace(r)); err != nil {
			return err
		}
	}
	return nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	bits := 32
	if p.Addr().Is6() && !p.Addr().Is4In6() {
		bits = 128
	}
	return &net.IPNet{IP: p.Addr().Unmap().AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)}
}
