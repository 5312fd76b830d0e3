//go:build !linux

package tun

import "fmt"

// Setup returns ErrUnsupported: only Linux is implemented.
func Setup(cfg SetupConfig) error {
	return fmt.Errorf("set up tun %s: %w", cfg.Name, ErrUnsupported)
}
