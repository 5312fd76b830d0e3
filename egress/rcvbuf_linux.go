package egress

import "golang.org/x/sys/unix"

// forceReceiveBuffer sets fd's receive buffer to size bytes past the
// sysctl cap (SO_RCVBUFFORCE, CAP_NET_ADMIN), or leaves it auto-tuning.
func forceReceiveBuffer(fd, size int) {
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size)
}
