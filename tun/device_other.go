//go:build !linux

package tun

import "fmt"

// Device is an open TUN device. Only Linux is implemented.
type Device struct{}

// Open returns ErrUnsupported: only Linux TUN devices are implemented.
func Open(cfg Config) (*Device, error) {
	return nil, fmt.Errorf("open tun %s: %w; run the edge on Linux", cfg.Name, ErrUnsupported)
}

// Name returns the interface name.
func (d *Device) Name() string { return "" }

// MTU returns the device's MTU.
func (d *Device) MTU() int { return 0 }

// Fd returns -1.
func (d *Device) Fd() int { return -1 }

// Offload reports false.
func (d *Device) Offload() bool { return false }

// Close does nothing.
func (d *Device) Close() error { return nil }
