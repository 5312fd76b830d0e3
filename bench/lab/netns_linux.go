package lab

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wanopt/wanopt/internal/nsenter"
)

// InNetns runs fn on an OS thread in the named network namespace; sockets
// and TUN descriptors fn creates stay there, usable from any goroutine.
func InNetns(name string, fn func() error) error {
	return nsenter.DoNamed(name, fn)
}

// OpenTUN attaches to the existing TUN device dev inside network namespace ns
// (created with 'ip tuntap add mode tun'). Each Read of the returned file
// yields one IP packet and each Write sends one; no packet-information header.
func OpenTUN(ns, dev string) (*os.File, error) {
	return openTUN(ns, dev, 0, nil)
}

// openTUN is OpenTUN with extra TUNSETIFF flags and a setup run on the
// attached fd before it is made non-blocking.
func openTUN(ns, dev string, flags uint16, setup func(fd int) error) (*os.File, error) {
	var f *os.File
	err := InNetns(ns, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w (load the tun module or run as root)", err)
		}
		var ifr [unix.IFNAMSIZ + 64]byte
		copy(ifr[:unix.IFNAMSIZ-1], dev)
		*(*uint16)(unsafe.Pointer(&ifr[unix.IFNAMSIZ])) = unix.IFF_TUN | unix.IFF_NO_PI | flags
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&ifr[0]))); errno != 0 {
			unix.Close(fd)
			return fmt.Errorf("attach to TUN %s in netns %s: %w", dev, ns, errno)
		}
		if setup != nil {
			if err := setup(fd); err != nil {
				unix.Close(fd)
				return fmt.Errorf("TUN %s in netns %s: %w", dev, ns, err)
			}
		}
		// Non-blocking, so the file joins Go's poller and Close
		// interrupts a pending Read.
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return fmt.Errorf("set TUN %s non-blocking: %w", dev, err)
		}
		f = os.NewFile(uintptr(fd), "/dev/net/tun:"+dev)
		return nil
	})
	return f, err
}

// linkDevice is one end of the link helper: *os.File or *offloadTUN.
type linkDevice interface {
	Read(pkt []byte) (int, error)
	Write(pkt []byte) (int, error)
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
	Close() error
}

// openLinkTUN attaches to TUN dev in ns for the link helper, with UDP
// segmentation offload where the kernel has it (6.2+), else with OpenTUN.
func openLinkTUN(ns, dev string, log io.Writer) (linkDevice, error) {
	t, err := openOffloadTUN(ns, dev)
	if err == nil {
		return t, nil
	}
	f, err2 := OpenTUN(ns, dev)
	if err2 != nil {
		return nil, err2
	}
	fmt.Fprintf(log, "link: %s in %s without UDP segmentation offload (%v); reading one datagram at a time\n", dev, ns, err)
	return f, nil
}

// offloadTUN is a TUN with a virtio-net header and UDP segmentation offload,
// read and written one IP packet at a time: reads split GSO frames, writes
// mark checksums as checked. One goroutine reads and one writes.
type offloadTUN struct {
	f       *os.File
	frame   []byte // the last frame read
	split   gsoSplitter
	wbuf    []byte // an empty header, then the packet being written
	frames  uint64 // frames read (the reader's own count)
	dropped atomic.Uint64
}

func openOffloadTUN(ns, dev string) (*offloadTUN, error) {
	f, err := openTUN(ns, dev, unix.IFF_VNET_HDR, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnetHdrLen); err != nil {
			return fmt.Errorf("set the virtio-net header size: %w", err)
		}
		if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tunFCsum|tunFUSO4|tunFUSO6); err != nil {
			return fmt.Errorf("enable UDP segmentation offload: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &offloadTUN{f: f, frame: make([]byte, vnetMaxFrame), wbuf: make([]byte, vnetMaxFrame)}, nil
}

// Read returns the next IP packet of the last frame or a new one. Frames
// the splitter refuses are counted in Dropped and skipped.
func (t *offloadTUN) Read(pkt []byte) (int, error) {
	for {
		if n, ok := t.split.next(pkt); ok {
			return n, nil
		}
		n, err := t.f.Read(t.frame)
		if err != nil {
			return 0, err
		}
		t.frames++
		if t.split.load(t.frame[:n]) != nil {
			t.dropped.Add(1)
		}
	}
}

// Write writes one IP packet behind a virtio-net header that marks a TCP
// or UDP checksum as offloaded (markChecksumOffloaded).
func (t *offloadTUN) Write(pkt []byte) (int, error) {
	if len(pkt) > len(t.wbuf)-vnetHdrLen {
		return 0, fmt.Errorf("write %d bytes to a TUN: larger than an IP packet", len(pkt))
	}
	n := copy(t.wbuf[vnetHdrLen:], pkt)
	markChecksumOffloaded(t.wbuf[:vnetHdrLen], t.wbuf[vnetHdrLen:vnetHdrLen+n])
	if _, err := t.f.Write(t.wbuf[:vnetHdrLen+n]); err != nil {
		return 0, err
	}
	return n, nil
}

func (t *offloadTUN) SetReadDeadline(d time.Time) error  { return t.f.SetReadDeadline(d) }
func (t *offloadTUN) SetWriteDeadline(d time.Time) error { return t.f.SetWriteDeadline(d) }

// Dropped is how many frames could not be split (see gsoSplitter.load).
func (t *offloadTUN) Dropped() uint64 { return t.dropped.Load() }

// Close turns the offload off again (the device outlives the file) and closes.
func (t *offloadTUN) Close() error {
	if rc, err := t.f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.IoctlSetInt(int(fd), unix.TUNSETOFFLOAD, 0) })
	}
	return t.f.Close()
}
