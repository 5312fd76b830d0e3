//go:build linux

package stack

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

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
	// offloadGSOMaxSize bounds the segments gVisor builds: it fills one
	// with at most this less 161 bytes of payload (its largest TCP/IP
	// headers and one: 64,839; flow's gather stays under it), and headers
	// must still fit the 16-bit IP length.
	offloadGSOMaxSize = 65000
	offloadMaxPacket  = vnetHdrLen + 1<<16
)

// offloadEndpoint is a gVisor link endpoint on a TUN fd opened with a
// virtio-net header and TSO offload (the tun package's default).
// Outbound, gVisor hands it TCP segments of up to 64 KiB (host GSO) and it
// writes each with a header telling the kernel to segment it; inbound, the
// kernel hands it aggregated segments with partial checksums, which it
// completes so that gVisor still validates every packet. One goroutine
// reads; writes happen on the caller's goroutine (the stack's FIFO queue).
type offloadEndpoint struct {
	fd int
	// rfile is a duplicate of fd in Go's poller: the reader parks there
	// instead of in a blocking poll(2), which had the scheduler hand its P
	// to another thread at every wake-up. Closing it stops the reader.
	rfile  *os.File
	rc     syscall.RawConn
	readFn func(fd uintptr) bool // e.readRaw, bound once

	wmu  sync.Mutex // guards whdr and wiov, the writer's scratch
	whdr [vnetHdrLen]byte
	wiov [16]unix.Iovec // gVisor's segments are a handful of chunks
	rbuf []byte
	rn   int
	rerr unix.Errno

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

// NewOffloadEndpoint returns the link endpoint New gives a TUN opened with
// a virtio-net header (TCP segments of up to 64 KiB each way), for an fd
// that frames its packets the same way without being such a TUN: a
// socket pair standing in for one, as in the edge-path benchmark. Pass it
// to NewWithEndpoint. Each read or write of fd must carry one packet,
// header first (a datagram or seqpacket socket, not a stream); the fd is
// made non-blocking and is not closed by the endpoint.
func NewOffloadEndpoint(fd int, mtu uint32) (gstack.LinkEndpoint, error) {
	return newOffloadEndpoint(fd, mtu)
}

func newOffloadEndpoint(fd int, mtu uint32) (*offloadEndpoint, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("set fd %d non-blocking: %w", fd, err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicate TUN fd %d for the reader: %w", fd, err)
	}
	rfile := os.NewFile(uintptr(dup), "tun-reader") // non-blocking: joins the poller
	rc, err := rfile.SyscallConn()
	if err != nil {
		rfile.Close()
		return nil, fmt.Errorf("TUN reader: %w", err)
	}
	e := &offloadEndpoint{fd: fd, rfile: rfile, rc: rc, mtu: mtu}
	e.readFn = e.readRaw
	return e, nil
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
	e.rfile.Close() // not started: signalStop never closed it
	if onClose != nil {
		onClose()
	}
}

func (e *offloadEndpoint) Wait() { e.wg.Wait() }

// signalStop tells the reader to exit and wakes it. Called with e.mu held.
func (e *offloadEndpoint) signalStop() {
	e.stopping.Store(true)
	e.rfile.Close() // wakes a parked reader with an error
}

func (e *offloadEndpoint) SetOnCloseAction(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.onClose = f
}

func (e *offloadEndpoint) readLoop() {
	e.rbuf = make([]byte, offloadMaxPacket)
	for !e.stopping.Load() {
		if err := e.rc.Read(e.readFn); err != nil {
			return // closed by signalStop
		}
		switch e.rerr {
		case 0:
			e.deliver(e.rbuf[:e.rn])
		case unix.EINTR:
		default:
			return // the fd was closed under us
		}
	}
}

// readRaw is the RawConn.Read callback: one read(2) as a raw system call
// (the fd is non-blocking), reporting false on EAGAIN so the poller parks
// the reader.
func (e *offloadEndpoint) readRaw(fd uintptr) bool {
	r, _, errno := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&e.rbuf[0])), uintptr(len(e.rbuf)))
	if errno == unix.EAGAIN {
		return false
	}
	e.rn, e.rerr = int(r), errno
	return true
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
	// One FIFO dispatcher writes (stack.New), so the lock is uncontended;
	// it makes the header and iovec scratch safe to reuse, and a write
	// allocates nothing.
	e.wmu.Lock()
	defer e.wmu.Unlock()
	n := 0
	hdr := &e.whdr
	for _, pkt := range pkts.AsSlice() {
		*hdr = [vnetHdrLen]byte{}
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
		iovs := e.wiov[:0]
		iovs = appendIovec(iovs, hdr[:])
		views, skip := pkt.AsViewList()
		for v := views.Front(); v != nil; v = v.Next() {
			b := v.AsSlice()
			if skip >= len(b) {
				skip -= len(b)
				continue
			}
			iovs = appendIovec(iovs, b[skip:])
			skip = 0
		}
		if err := writevNonblocking(e.fd, iovs); err != 0 {
			if n == 0 {
				return 0, tcpip.TranslateErrno(err)
			}
			return n, nil
		}
		n++
	}
	return n, nil
}

func appendIovec(iovs []unix.Iovec, b []byte) []unix.Iovec {
	if len(b) == 0 {
		return iovs
	}
	var v unix.Iovec
	v.Base = &b[0]
	v.SetLen(len(b))
	return append(iovs, v)
}

// writevNonblocking writes one packet to the TUN with a raw system call:
// the TUN is non-blocking, so the call never parks, and the scheduler need
// not hand the goroutine's P to another thread while the kernel runs the
// receiver's path inside the write.
func writevNonblocking(fd int, iovs []unix.Iovec) unix.Errno {
	for {
		_, _, e := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iovs[0])), uintptr(len(iovs)))
		if e != unix.EINTR {
			return e
		}
	}
}
