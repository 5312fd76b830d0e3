//go:build !linux

package egress

// forceReceiveBuffer leaves the buffer to the kernel: only Linux lets a
// privileged process pass the sysctl cap.
func forceReceiveBuffer(fd, size int) {}
