//go:build !linux

package egress

import (
	"io"
	"net"
)

// wrapRaw returns c: raw system calls are used on Linux only.
func wrapRaw(c *net.TCPConn) interface {
	io.ReadWriteCloser
	CloseWrite() error
} {
	return c
}
