package measure

import (
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

func netUDPAddr(ap netip.AddrPort) *net.UDPAddr { return net.UDPAddrFromAddrPort(ap) }

// udpSegment is the UDP_SEGMENT socket option (Linux 4.18+).
const udpSegment = 103

// enableGSO turns on UDP generic segmentation offload with segments of
// segBytes, reporting whether the kernel accepted it.
func enableGSO(c *net.UDPConn, segBytes int) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	_ = raw.Control(func(fd uintptr) {
		ok = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_UDP, udpSegment, segBytes) == nil
	})
	return ok
}

// realtimeThread moves the calling (locked) thread to SCHED_FIFO priority 5
// if allowed, and returns a function that moves it back: above ordinary
// processes, below the emulator (10), which must still preempt the sender.
func realtimeThread() (restore func()) {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 5}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		return func() {}
	}
	return func() {
		normal := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL}
		_ = unix.SchedSetAttr(0, &normal, 0)
	}
}
