package tun

import "net/netip"

// SetupConfig is what Setup applies to a device (the `--tun-setup` path).
type SetupConfig struct {
	// Name of the device. Required.
	Name string
	// Addrs are the device's own addresses (e.g. 198.18.1.1/24).
	Addrs []netip.Prefix
	// MTU to set; 0 means DefaultMTU.
	MTU int
	// TxQueueLen to set; 0 means DefaultTxQueueLen.
	TxQueueLen int
	// Routes are destination prefixes sent into the device.
	Routes []netip.Prefix
}
