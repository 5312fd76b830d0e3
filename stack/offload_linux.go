//go:build linux

package stack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/wanopt/wanopt/tun"
)

// virtio-net header (linux/virtio_net.h), as a TUN opened with IFF_VNET_HDR
// prepends it to every packet, in host byte order (little-endian here).
const (
	vnetHdrLen     = tun.VirtioNetHdrLen
	vnetFNeedsCsum = 1 // checksum is partial: complete it from csum_start
	vnetFDataValid = 2 // checksum already validated
	vnetGSONone    = 0
	vnetGSOTCPv4   = 1
	vnetGSOTCPv6   = 4
	// offloadGSOMaxSize bounds the segments gVisor builds: it fills up to
	// this minus 61 bytes of payload, and headers must still fit the 16-bit
	// IP length.
	offloadGSOMaxSize = 65000
	offloadMaxPacket  = vnetHdrLen + 1<<16
)

// offloadEndpoint is a gVisor link endpoint on a TUN fd opened with a
// virtio-net header and TSO offload (the tun package's default). Outbound, gVisor
// hands it TCP segments of up to 64 KiB (host GSO) and it writes each with a
// header telling the kernel to segment it; inbound, the kernel hands it
// aggregated segments with partial checksums, which it completes before
// delivery so that gVisor still validates every packet. One goroutine reads;
// writes happen on the caller's goroutine (the stack's FIFO queue).
type offloadEndpoint struct {
	fd     int
	stopFd int // eventfd that wakes the reader for Close

	mu         sync.RWMutex
	mtu        uint32
	dispatcher gstack.NetworkDispatcher
	onClose    func()
	started    bool
	stopping   atomic.Bool // read by the reader between packets
	stopped    bool        // the reader was told to exit
	closed     bool
	wg         sync.WaitGroup
}

var (
	_ gstack.LinkEndpoint = (*offloadEndpoint)(nil)
	_ gstack.GSOEndpoint  = (*offloadEndpoint)(nil)
)

// hasVnetHdr reports whether fd is a TUN opened with IFF_VNET_HDR.
func hasVnetHdr(fd int) bool {
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return false
	}
	if err := unix.IoctlIfreq(fd, unix.TUNGETIFF, ifr); err != nil {
		return false // not a TUN
	}
	return ifr.Uint16()&unix.IFF_VNET_HDR != 0
}

func newOffloadEndpoint(fd int, mtu uint32) (*offloadEndpoint, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("set fd %d non-blocking: %w", fd, err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return &offloadEndpoint{fd: fd, stopFd: efd, mtu: mtu}, nil
}

func (e *offloadEndpoint) MTU() uint32 {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.mtu
}

func (e *offloadEndpoint) SetMTU(mtu uint32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mtu = mtu
}

func (e *offloadEndpoint) MaxHeaderLength() uint16                       { return 0 }
func (e *offloadEndpoint) LinkAddress() tcpip.LinkAddress                { return "" }
func (e *offloadEndpoint) SetLinkAddress(tcpip.LinkAddress)              {}
func (e *offloadEndpoint) Capabilities() gstack.LinkEndpointCapabilities { return 0 }
func (e *offloadEndpoint) ARPHardwareType() header.ARPHardwareType       { return header.ARPHardwareNone }
func (e *offloadEndpoint) AddHeader(*gstack.PacketBuffer)                {}
func (e *offloadEndpoint) ParseHeader(*gstack.PacketBuffer) bool         { return true }
func (e *offloadEndpoint) GSOMaxSize() uint32                            { return offloadGSOMaxSize }
func (e *offloadEndpoint) SupportedGSO() gstack.SupportedGSO             { return gstack.HostGSOSupported }

// Attach starts the reader the first time a dispatcher is attached; nil
// detaches, stops the reader for good and waits for it to exit.
func (e *offloadEndpoint) Attach(d gstack.NetworkDispatcher) {
	e.mu.Lock()
	if d == nil {
		e.dispatcher = nil
		if !e.stopped && !e.closed {
			e.stopped = true
			e.signalStop()
		}
		e.mu.Unlock()
		e.wg.Wait() // outside e.mu: the reader takes it to deliver
		return
	}
	defer e.mu.Unlock()
	e.dispatcher = d
	if !e.started && !e.stopped {
		e.started = true
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.readLoop()
		}()
	}
}

func (e *offloadEndpoint) IsAttached() bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.dispatcher != nil
}

// Close stops the reader; Wait waits for it. The TUN fd is not closed.
func (e *offloadEndpoint) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	if !e.stopped {
		e.stopped = true
		e.signalStop()
	}
	e.closed = true
	onClose := e.onClose
	e.mu.Unlock()
	e.wg.Wait()
	unix.Close(e.stopFd)
	if onClose != nil {
		onClose()
	}
}

func (e *offloadEndpoint) Wait() { e.wg.Wait() }

// signalStop tells the reader to exit and wakes it. Called with e.mu held.
func (e *offloadEndpoint) signalStop() {
	e.stopping.Store(true)
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(e.stopFd, one[:])
}

func (e *offloadEndpoint) SetOnCloseAction(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.onClose = f
}

func (e *offloadEndpoint) readLoop() {
	buf := make([]byte, offloadMaxPacket)
	fds := []unix.PollFd{{Fd: int32(e.fd), Events: unix.POLLIN}, {Fd: int32(e.stopFd), Events: unix.POLLIN}}
	for !e.stopping.Load() {
		n, err := unix.Read(e.fd, buf)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
				return
			}
			if fds[1].Revents != 0 {
				return
			}
			continue
		case err != nil:
			return // the fd was closed under us
		}
		e.deliver(buf[:n])
	}
}

// deliver hands one packet (virtio-net header first) to the stack.
func (e *offloadEndpoint) deliver(b []byte) {
	if len(b) <= vnetHdrLen {
		return
	}
	flags := b[0]
	csumStart := int(binary.LittleEndian.Uint16(b[6:]))
	csumOffset := int(binary.LittleEndian.Uint16(b[8:]))
	p := b[vnetHdrLen:]
	if flags&vnetFNeedsCsum != 0 {
		// The kernel left the transport checksum partial (the pseudo-header
		// sum): complete it so that gVisor's validation passes.
		if csumStart+csumOffset+2 > len(p) {
			return
		}
		sum := checksum.Checksum(p[csumStart:], 0)
		binary.BigEndian.PutUint16(p[csumStart+csumOffset:], ^sum)
	}
	var proto tcpip.NetworkProtocolNumber
	switch header.IPVersion(p) {
	case header.IPv4Version:
		proto = header.IPv4ProtocolNumber
	case header.IPv6Version:
		proto = header.IPv6ProtocolNumber
	default:
		return
	}
	e.mu.RLock()
	d := e.dispatcher
	e.mu.RUnlock()
	if d == nil {
		return
	}
	pkt := gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(p)})
	d.DeliverNetworkPacket(proto, pkt)
	pkt.DecRef()
}

// WritePackets writes each packet with its virtio-net header. A full TUN
// queue drops the rest of the batch (like a NIC), reported as the count
// written.
func (e *offloadEndpoint) WritePackets(pkts gstack.PacketBufferList) (int, tcpip.Error) {
	n := 0
	var iovs [][]byte
	for _, pkt := range pkts.AsSlice() {
		var hdr [vnetHdrLen]byte
		if gso := pkt.GSOOptions; gso.Type != gstack.GSONone {
			binary.LittleEndian.PutUint16(hdr[2:], uint16(pkt.HeaderSize()))
			if gso.NeedsCsum {
				hdr[0] = vnetFNeedsCsum
				binary.LittleEndian.PutUint16(hdr[6:], gso.L3HdrLen)
				binary.LittleEndian.PutUint16(hdr[8:], gso.CsumOffset)
			}
			if pkt.Data().Size() > int(gso.MSS) {
				switch gso.Type {
				case gstack.GSOTCPv4:
					hdr[1] = vnetGSOTCPv4
				case gstack.GSOTCPv6:
					hdr[1] = vnetGSOTCPv6
				}
				binary.LittleEndian.PutUint16(hdr[4:], gso.MSS)
			}
		}
		iovs = append(iovs[:0], hdr[:])
		iovs = append(iovs, pkt.AsSlices()...)
		for {
			_, err := unix.Writev(e.fd, iovs)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				if n == 0 {
					return 0, translateErrno(err)
				}
				return n, nil
			}
			break
		}
		n++
	}
	return n, nil
}

func translateErrno(err error) tcpip.Error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return tcpip.TranslateErrno(errno)
	}
	return &tcpip.ErrInvalidEndpointState{}
}
