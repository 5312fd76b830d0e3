// Package tun opens the TUN device an edge intercepts traffic on, configures
// it, and taps the packets crossing it into pcap files.
//
// A Device carries IP packets without a packet-information header; by default
// (offload, see Config.NoOffload) each starts with a virtio-net header. The
// packets cross its raw, non-blocking file descriptor (Fd), on which package
// stack builds its link endpoint.
//
// On Linux, Open attaches to a persistent device created beforehand for the
// service user (`ip tuntap add dev wan0 mode tun user U`), which needs no
// capabilities at all, or creates the device when asked to and permitted.
// Setup (CAP_NET_ADMIN) sets the address, MTU, transmit queue length and
// routes over netlink.
package tun

import "errors"

// Sentinel errors; Open and Setup wrap them with the device name and a hint
// on what to do.
var (
	// ErrNotExist reports that the named device does not exist and Config.Create
	// was false.
	ErrNotExist = errors.New("tun device does not exist")
	// ErrPermission reports a missing privilege: the device belongs to another
	// user, or creating or configuring it needs CAP_NET_ADMIN.
	ErrPermission = errors.New("tun device: permission denied")
	// ErrClosed is returned by SetPersist and SetOwner after Close.
	ErrClosed = errors.New("tun device closed")
	// ErrUnsupported is returned on platforms without a TUN implementation.
	ErrUnsupported = errors.New("tun devices are not supported on this platform")
)

// DefaultMTU is the MTU Setup applies when none is given. Without offload
// the TUN MTU is the setting that matters most for throughput through a
// userspace stack (TestThroughput in package stack): use the largest the
// LAN side allows (a TUN that only carries locally generated or routed
// traffic can use 65535).
const DefaultMTU = 1500

// MaxMTU is the largest MTU a Linux TUN device accepts.
const MaxMTU = 65535

// DefaultTxQueueLen is the transmit queue length Setup applies when none is
// given: at MTU 1500 the kernel's default of 500 drops packets on the way
// from the stack to the client.
const DefaultTxQueueLen = 10000

// Config says which device to open and how.
type Config struct {
	// Name is the interface name, at most 15 bytes. Required.
	Name string
	// MTU, if non-zero, is the MTU the device must have. Open sets it when it
	// differs and the process may (CAP_NET_ADMIN), and fails otherwise. Zero
	// keeps the device's MTU; Device.MTU reports it.
	MTU int
	// Create allows Open to create the device when it does not exist (needs
	// CAP_NET_ADMIN). When false, Open only attaches to an existing device.
	Create bool
	// CloneDevice is the path of the TUN clone device; empty means
	// /dev/net/tun. Attaching without privileges needs read and write
	// access to it (mode 0666 is the usual default).
	CloneDevice string
	// NoOffload opens the device without a virtio-net header. By default
	// (false) the device is opened with IFF_VNET_HDR and checksum and TCP
	// segmentation offload enabled: every packet read or written starts with
	// a VirtioNetHdrLen-byte header, and TCP segments of up to 64 KiB cross
	// the device whatever its MTU, several times faster than plain packets
	// at MTU 1500. It needs no privilege.
	NoOffload bool
}

// VirtioNetHdrLen is the length of the virtio-net header that precedes each
// packet on a device opened with offload (struct virtio_net_hdr,
// host byte order).
const VirtioNetHdrLen = 10
