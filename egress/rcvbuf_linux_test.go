package egress

import (
	"context"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// receiveBuffer dials a listener on loopback with d and returns the
// connection's SO_RCVBUF as the kernel reports it (twice what was set:
// it counts its bookkeeping).
func receiveBuffer(t *testing.T, d *KernelDialer) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := d.Dial(context.Background(), netip.AddrPort{}, netip.MustParseAddrPort(ln.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var size int
	var gerr error
	if err := rc.Control(func(fd uintptr) { size, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return size
}

// TestKernelDialerReceiveBuffer: a connection to a server gets
// DefaultReceiveBufferBytes (so a LAN server's burst fits while the relay
// moves it into the stream, instead of meeting zero windows), a negative
// size leaves the kernel's auto-tuned default, and a Control of the
// caller's still runs.
func TestKernelDialerReceiveBuffer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: SO_RCVBUFFORCE needs CAP_NET_ADMIN (run as root)")
	}
	if got := receiveBuffer(t, &KernelDialer{}); got < DefaultReceiveBufferBytes {
		t.Errorf("default dialer: SO_RCVBUF %d bytes, want at least %d", got, DefaultReceiveBufferBytes)
	}
	if got := receiveBuffer(t, &KernelDialer{ReceiveBufferBytes: -1}); got >= DefaultReceiveBufferBytes {
		t.Errorf("ReceiveBufferBytes -1: SO_RCVBUF %d bytes, want the kernel's default, below %d", got, DefaultReceiveBufferBytes)
	}
	called := false
	d := &KernelDialer{ReceiveBufferBytes: 1 << 20}
	d.Control = func(_, _ string, _ syscall.RawConn) error { called = true; return nil }
	if got := receiveBuffer(t, d); got < 1<<20 || !called {
		t.Errorf("1 MiB with a Control of its own: SO_RCVBUF %d bytes, control called %v", got, called)
	}
}
