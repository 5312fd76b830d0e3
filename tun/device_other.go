//go:build !linux

package tun

import "fmt"

// BatchSize is the number of packets Read returns at most per call.
const BatchSize = 1

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

// BatchSize returns BatchSize.
func (d *Device) BatchSize() int { return BatchSize }

// Read returns ErrUnsupported.
func (d *Device) Read(bufs [][]byte, sizes []int, offset int) (int, error) { return 0, ErrUnsupported }

// Write returns ErrUnsupported.
func (d *Device) Write(bufs [][]byte, offset int) (int, error) { return 0, ErrUnsupported }

// Offload reports false.
func (d *Device) Offload() bool { return false }

// Close does nothing.
func (d *Device) Close() error { return nil }
