//go:build linux

package tun

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

const cloneDevice = "/dev/net/tun"

// Device is an open TUN device. Its packet I/O is done on the descriptor Fd
// returns; Close may be called from any goroutine.
type Device struct {
	name string
	mtu  int
	fd   int // raw fd, non-blocking, owned by file
	file *os.File
	rc   syscall.RawConn

	offload bool

	closeOnce sync.Once
	closeErr  error
}

// Open opens the TUN device cfg.Name on Linux. It attaches to an existing
// device (a persistent device owned by the calling user needs no
// capabilities) or, when cfg.Create is set and the device does not exist,
// creates it (CAP_NET_ADMIN). The device is opened in the network namespace
// of the calling thread. The returned Device must be closed by the caller.
func Open(cfg Config) (*Device, error) {
	if cfg.Name == "" || len(cfg.Name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("open tun: invalid device name %q: give a name of 1 to %d bytes", cfg.Name, unix.IFNAMSIZ-1)
	}
	if cfg.MTU < 0 || cfg.MTU > MaxMTU || (cfg.MTU != 0 && cfg.MTU < 576) {
		return nil, fmt.Errorf("open tun %s: MTU %d out of range: use 576 to %d (0 keeps the device's MTU)", cfg.Name, cfg.MTU, MaxMTU)
	}
	_, err := linkMTU(cfg.Name)
	exists := err == nil
	if !exists && !errors.Is(err, unix.ENODEV) {
		return nil, fmt.Errorf("open tun %s: look up device: %w", cfg.Name, err)
	}
	if !exists && !cfg.Create {
		return nil, fmt.Errorf("open tun %s: %w; create it first with 'ip tuntap add dev %s mode tun user $(id -un)' or allow creating it (needs CAP_NET_ADMIN)",
			cfg.Name, ErrNotExist, cfg.Name)
	}

	clone := cfg.CloneDevice
	if clone == "" {
		clone = cloneDevice
	}
	fd, err := unix.Open(clone, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil, fmt.Errorf("open %s: %w; load the tun module ('modprobe tun') or create the node ('mknod %s c 10 200')", clone, err, clone)
		case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
			return nil, fmt.Errorf("open %s: %w: %w; make it readable and writable by this user ('chmod 0666 %s' is the usual default) or run as root", clone, ErrPermission, err, clone)
		}
		return nil, fmt.Errorf("open %s: %w", clone, err)
	}
	ifr, err := unix.NewIfreq(cfg.Name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open tun %s: %w", cfg.Name, err)
	}
	flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if !cfg.NoOffload {
		flags |= unix.IFF_VNET_HDR
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, attachError(cfg.Name, exists, err)
	}
	if !cfg.NoOffload {
		if err := enableOffload(fd); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("open tun %s: enable offload: %w; open it with NoOffload", cfg.Name, err)
		}
	}

	mtu, err := linkMTU(cfg.Name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("open tun %s: read MTU: %w", cfg.Name, err)
	}
	if cfg.MTU != 0 && cfg.MTU != mtu {
		if err := setLinkMTU(cfg.Name, cfg.MTU); err != nil {
			unix.Close(fd)
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
				return nil, fmt.Errorf("open tun %s: set MTU %d (device has %d): %w; set it beforehand with 'ip link set dev %s mtu %d' or run with CAP_NET_ADMIN",
					cfg.Name, cfg.MTU, mtu, ErrPermission, cfg.Name, cfg.MTU)
			}
			return nil, fmt.Errorf("open tun %s: set MTU %d: %w", cfg.Name, cfg.MTU, err)
		}
		mtu = cfg.MTU
	}

	file := os.NewFile(uintptr(fd), clone)
	rc, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("open tun %s: %w", cfg.Name, err)
	}
	return &Device{name: cfg.Name, mtu: mtu, fd: fd, file: file, rc: rc, offload: !cfg.NoOffload}, nil
}

// Offload flags of TUNSETOFFLOAD (linux/if_tun.h).
const (
	tunFCsum = 0x01
	tunFTSO4 = 0x02
	tunFTSO6 = 0x04
)

func enableOffload(fd int) error {
	if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, VirtioNetHdrLen); err != nil {
		return fmt.Errorf("set virtio-net header size: %w", err)
	}
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tunFCsum|tunFTSO4|tunFTSO6); err != nil {
		return fmt.Errorf("set offload flags: %w", err)
	}
	return nil
}

// Offload reports whether packets carry a virtio-net header (not
// Config.NoOffload).
func (d *Device) Offload() bool { return d.offload }

func attachError(name string, exists bool, err error) error {
	switch {
	case (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)) && exists:
		return fmt.Errorf("attach to tun %s: %w: %w; the device belongs to another user or group: recreate it with 'ip tuntap add dev %s mode tun user $(id -un)' or run with CAP_NET_ADMIN",
			name, ErrPermission, err, name)
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return fmt.Errorf("create tun %s: %w: %w; create it beforehand with 'ip tuntap add dev %s mode tun user $(id -un)' or run with CAP_NET_ADMIN",
			name, ErrPermission, err, name)
	case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EBUSY):
		return fmt.Errorf("attach to tun %s: %w; the device exists with other flags (a tap, multi_queue, pi or vnet_hdr device) or is in use: recreate it with 'ip tuntap add dev %s mode tun'",
			name, err, name)
	}
	return fmt.Errorf("attach to tun %s: %w", name, err)
}

// Name returns the interface name.
func (d *Device) Name() string { return d.name }

// MTU returns the device's MTU as it was when Open returned.
func (d *Device) MTU() int { return d.mtu }

// Fd returns the raw file descriptor, in non-blocking mode. It stays valid
// until Close; whoever uses it (gVisor's fdbased endpoint) must have stopped
// before Close is called. With offload (the default) every packet read from
// or written to it starts with a VirtioNetHdrLen-byte virtio-net header.
func (d *Device) Fd() int { return d.fd }

// SetPersist makes the device outlive this process (true) or disappear when
// its last file descriptor closes (false). Needs CAP_NET_ADMIN unless the
// device belongs to the calling user.
func (d *Device) SetPersist(persist bool) error {
	v := 0
	if persist {
		v = 1
	}
	if err := d.control(func(fd int) error { return unix.IoctlSetInt(fd, unix.TUNSETPERSIST, v) }); err != nil {
		return fmt.Errorf("tun %s: set persist %v: %w", d.name, persist, err)
	}
	return nil
}

// SetOwner makes uid the owner of the device, so that a process running as
// uid attaches to it without capabilities. Use with SetPersist(true).
func (d *Device) SetOwner(uid int) error {
	if err := d.control(func(fd int) error { return unix.IoctlSetInt(fd, unix.TUNSETOWNER, uid) }); err != nil {
		return fmt.Errorf("tun %s: set owner %d: %w", d.name, uid, err)
	}
	return nil
}

func (d *Device) control(f func(fd int) error) error {
	var ferr error
	if err := d.rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return ErrClosed
	}
	return ferr
}

// Close closes the device. A non-persistent device disappears. Fd is invalid
// afterwards, and SetPersist and SetOwner return ErrClosed. Close is
// idempotent.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		d.closeErr = d.file.Close()
	})
	return d.closeErr
}

// linkMTU returns the MTU of the named interface in the calling thread's
// network namespace, or an error wrapping ENODEV if it does not exist.
func linkMTU(name string) (int, error) {
	var mtu int
	err := withInetSocket(func(s int) error {
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		if err := unix.IoctlIfreq(s, unix.SIOCGIFMTU, ifr); err != nil {
			return err
		}
		mtu = int(ifr.Uint32())
		return nil
	})
	return mtu, err
}

func setLinkMTU(name string, mtu int) error {
	return withInetSocket(func(s int) error {
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		ifr.SetUint32(uint32(mtu))
		return unix.IoctlIfreq(s, unix.SIOCSIFMTU, ifr)
	})
}

func withInetSocket(f func(s int) error) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	return f(s)
}
