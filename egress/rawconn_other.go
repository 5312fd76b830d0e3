//go:build !linux

package egress

import (
	"net"

	"github.com/wanopt/wanopt/flow"
)

// wrapRaw returns c: raw system calls are used on Linux only.
func wrapRaw(c *net.TCPConn) flow.Conn {
	return c
}
