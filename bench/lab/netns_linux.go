package lab

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wanopt/wanopt/internal/nsenter"
)

// InNetns runs fn on an OS thread switched into the named network namespace
// (nsenter.DoNamed, which the tests share). Sockets and TUN file descriptors
// created by fn stay bound to that namespace after fn returns and may be
// used from any goroutine.
func InNetns(name string, fn func() error) error {
	return nsenter.DoNamed(name, fn)
}

// OpenTUN attaches to the existing TUN device dev inside network namespace ns
// (created with 'ip tuntap add mode tun'). Each Read of the returned file
// yields one IP packet and each Write sends one; no packet-information header.
func OpenTUN(ns, dev string) (*os.File, error) {
	var f *os.File
	err := InNetns(ns, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w (load the tun module or run as root)", err)
		}
		var ifr [unix.IFNAMSIZ + 64]byte
		copy(ifr[:unix.IFNAMSIZ-1], dev)
		*(*uint16)(unsafe.Pointer(&ifr[unix.IFNAMSIZ])) = unix.IFF_TUN | unix.IFF_NO_PI
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&ifr[0]))); errno != 0 {
			unix.Close(fd)
			return fmt.Errorf("attach to TUN %s in netns %s: %w", dev, ns, errno)
		}
		// Non-blocking, so the file joins Go's poller and Close interrupts
		// a pending Read: the link process can stop promptly.
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return fmt.Errorf("set TUN %s non-blocking: %w", dev, err)
		}
		f = os.NewFile(uintptr(fd), "/dev/net/tun:"+dev)
		return nil
	})
	return f, err
}
