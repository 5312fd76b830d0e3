//go:build !linux

package tun

import (
	"fmt"
	"net/netip"
)

// SetupConfig is what Setup applies to a device.
type SetupConfig struct {
	Name       string
	Addrs      []netip.Prefix
	MTU        int
	TxQueueLen int
	Routes     []netip.Prefix
}

// Setup returns ErrUnsupported: only Linux is implemented.
func Setup(cfg SetupConfig) error {
	return fmt.Errorf("set up tun %s: %w", cfg.Name, ErrUnsupported)
}
