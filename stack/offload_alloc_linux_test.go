package stack

import (
	"testing"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/buffer"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// TestOffloadWriteAllocs checks that writing a 64 KiB GSO segment to the
// TUN allocates nothing: the endpoint's writes are on the data path of
// every byte toward the client. A datagram socket pair stands in for the
// TUN, so the test needs no root.
func TestOffloadWriteAllocs(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	for _, fd := range fds {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	e, err := newOffloadEndpoint(fds[0], 1500)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close(); unix.Close(fds[0]) }()

	const payload = 60000
	pkt := gstack.NewPacketBuffer(gstack.PacketBufferOptions{
		ReserveHeaderBytes: 40,
		Payload:            buffer.MakeWithData(make([]byte, payload)),
	})
	defer pkt.DecRef()
	pkt.TransportHeader().Push(20)
	pkt.NetworkHeader().Push(20)
	pkt.GSOOptions = gstack.GSO{Type: gstack.GSOTCPv4, NeedsCsum: true, CsumOffset: 16, MSS: 1460, L3HdrLen: 20}
	var pkts gstack.PacketBufferList
	pkts.PushBack(pkt)

	got := make([]byte, 1<<17)
	write := func() {
		if n, err := e.WritePackets(pkts); n != 1 || err != nil {
			t.Fatalf("WritePackets: %d, %v", n, err)
		}
		n, err := unix.Read(fds[1], got)
		if err != nil {
			t.Fatal(err)
		}
		if want := vnetHdrLen + 40 + payload; n != want {
			t.Fatalf("read %d bytes, want %d (header, IP and TCP headers, payload)", n, want)
		}
	}
	write()
	if got[1] != vnetGSOTCPv4 || got[0] != vnetFNeedsCsum {
		t.Fatalf("virtio-net header %x: want GSO TCPv4 with NEEDS_CSUM", got[:vnetHdrLen])
	}
	if allocs := testing.AllocsPerRun(100, write); allocs != 0 {
		t.Errorf("WritePackets: %.1f allocations per 64 KiB segment, want 0", allocs)
	}
}
