//go:build linux

package stack

import (
	"context"
	"errors"
	"fmt"

	"github.com/wanopt/wanopt/flow"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
)

// New builds a stack on a TUN file descriptor (tun.Device.Fd). A TUN opened
// with offload (the tun package's default: virtio-net header, TSO) gets the
// stack's offload endpoint, which moves TCP segments of up to 64 KiB across
// the TUN whatever its MTU; any other fd gets gVisor's fdbased endpoint.
// Either way a FIFO queue discipline writes packets to the TUN from its own
// goroutine, not the TCP one. The fd must stay open until Close returns.
// cfg.MTU is required. The stack stops when ctx is done or Close is
// called; ctx is also the parent of every Dial context.
func New(ctx context.Context, fd int, d flow.Dialer, cfg Config) (*Stack, error) {
	if cfg.MTU <= 0 {
		return nil, fmt.Errorf("stack: MTU %d: set Config.MTU to the TUN device's MTU", cfg.MTU)
	}
	if d == nil {
		return nil, errors.New("stack: nil Dialer: pass the tunnel's dialer")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if hasVnetHdr(fd) {
		ep, err := newOffloadEndpoint(fd, uint32(cfg.MTU))
		if err != nil {
			return nil, fmt.Errorf("stack: offload endpoint on fd %d: %w", fd, err)
		}
		return newStack(ctx, ep, "offload", d, cfg)
	}
	ep, err := fdbased.New(&fdbased.Options{
		FDs: []int{fd},
		MTU: uint32(cfg.MTU),
		// Keep gVisor's checksum validation on: the LAN side is not trusted
		// and a TUN does not validate forwarded packets.
		RXChecksumOffload: false,
	})
	if err != nil {
		return nil, fmt.Errorf("stack: fdbased endpoint on fd %d: %w", fd, err)
	}
	return newStack(ctx, ep, "fdbased", d, cfg)
}
