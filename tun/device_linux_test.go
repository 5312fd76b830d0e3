//go:build linux

package tun

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"

	"github.com/wanopt/wanopt/internal/netnstest"
)

// TestPacketIO creates a TUN in a namespace (with offload, the default),
// sends a UDP datagram into it from a socket, reads it from Fd, and answers
// by writing to Fd. Every packet crossing Fd starts with a virtio-net header.
func TestPacketIO(t *testing.T) {
	_, ns := netnstest.New(t)
	var dev *Device
	var sock *net.UDPConn
	err := netnstest.Do(ns, func() error {
		var err error
		if dev, err = Open(Config{Name: "wost0", MTU: 9000, Create: true}); err != nil {
			return err
		}
		if err := Setup(SetupConfig{Name: "wost0", MTU: 9000,
			Addrs:  []netip.Prefix{netip.MustParsePrefix("198.18.1.1/24")},
			Routes: []netip.Prefix{netip.MustParsePrefix("198.18.2.0/24")}}); err != nil {
			return err
		}
		sock, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(198, 18, 1, 1), Port: 5000})
		return err
	})
	if err != nil {
		if dev != nil {
			dev.Close()
		}
		t.Fatal(err)
	}
	defer dev.Close()
	defer sock.Close()
	if dev.MTU() != 9000 || dev.Name() != "wost0" || dev.Fd() < 0 || !dev.Offload() {
		t.Fatalf("device %s MTU %d fd %d offload %v", dev.Name(), dev.MTU(), dev.Fd(), dev.Offload())
	}
	fd := dev.Fd()
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK == 0 {
		t.Fatalf("Fd flags %#x, err %v: want O_NONBLOCK", fl, err)
	}

	if _, err := sock.WriteToUDP([]byte("ping"), &net.UDPAddr{IP: net.IPv4(198, 18, 2, 2), Port: 9}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, VirtioNetHdrLen+MaxMTU)
	deadline := time.Now().Add(5 * time.Second)
	var req gopacket.Packet
	for req == nil { // skip IPv6 router solicitations and the like
		n := readFd(t, fd, buf, deadline)
		if n < VirtioNetHdrLen {
			t.Fatalf("read %d bytes: shorter than the virtio-net header", n)
		}
		p := gopacket.NewPacket(buf[VirtioNetHdrLen:n], layers.LayerTypeIPv4, gopacket.Default)
		if u, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP); ok && u.DstPort == 9 {
			req = p
		}
	}
	ip := req.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp := req.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if !ip.DstIP.Equal(net.IPv4(198, 18, 2, 2)) || string(udp.Payload) != "ping" {
		t.Fatalf("read %v", req)
	}

	rip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: ip.DstIP, DstIP: ip.SrcIP}
	rudp := &layers.UDP{SrcPort: udp.DstPort, DstPort: udp.SrcPort}
	rudp.SetNetworkLayerForChecksum(rip)
	sb := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(sb, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		rip, rudp, gopacket.Payload("pong")); err != nil {
		t.Fatal(err)
	}
	// An all-zero virtio-net header: no checksum to fill in, no segmentation.
	out := append(make([]byte, VirtioNetHdrLen), sb.Bytes()...)
	if n, err := unix.Write(fd, out); n != len(out) || err != nil {
		t.Fatalf("write to Fd: %d of %d bytes, %v", n, len(out), err)
	}
	sock.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 100)
	n, from, err := sock.ReadFromUDP(b)
	if err != nil || string(b[:n]) != "pong" || from.Port != 9 {
		t.Fatalf("socket got %q from %v, err %v", b[:n], from, err)
	}

	if err := dev.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := dev.Close(); err != nil {
		t.Fatalf("second Close: %v, want nil (idempotent)", err)
	}
	if err := dev.SetPersist(false); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetPersist after Close: %v, want ErrClosed", err)
	}
}

// readFd reads one packet from the non-blocking fd into buf, polling until
// deadline.
func readFd(t *testing.T, fd int, buf []byte, deadline time.Time) int {
	t.Helper()
	for {
		n, err := unix.Read(fd, buf)
		switch {
		case err == nil:
			return n
		case err != unix.EAGAIN && err != unix.EINTR:
			t.Fatalf("read from Fd: %v", err)
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatal("read from Fd: no packet before the deadline")
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, int(left.Milliseconds())+1); err != nil && err != unix.EINTR {
			t.Fatalf("poll Fd: %v", err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	_, ns := netnstest.New(t)
	err := netnstest.Do(ns, func() error {
		_, err := Open(Config{Name: "wostnone"})
		if !errors.Is(err, ErrNotExist) || !strings.Contains(err.Error(), "ip tuntap add") {
			t.Errorf("attach to a missing device: %v, want ErrNotExist with a hint", err)
		}
		if _, err := Open(Config{Name: "this-name-is-too-long"}); err == nil {
			t.Error("long name accepted")
		}
		if _, err := Open(Config{Name: "wost1", MTU: 70000, Create: true}); err == nil {
			t.Error("MTU 70000 accepted")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

const helperEnv = "WOST_TUN_HELPER"

// TestHelperProcess is not a test: run as another user by
// TestAttachUnprivileged, it attaches to a device and prints the outcome.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("helper process for TestAttachUnprivileged")
	}
	name, clone := os.Getenv("WOST_TUN_NAME"), os.Getenv("WOST_TUN_CLONE")
	fmt.Printf("uid=%d\n", os.Geteuid())
	dev, err := Open(Config{Name: name, CloneDevice: clone})
	if err != nil {
		fmt.Printf("attach: permission=%v: %v\n", errors.Is(err, ErrPermission), err)
		return
	}
	defer dev.Close()
	fmt.Printf("attach: ok mtu=%d offload=%v\n", dev.MTU(), dev.Offload())
	err = Setup(SetupConfig{Name: name})
	fmt.Printf("setup: permission=%v\n", errors.Is(err, ErrPermission))
	_, err = Open(Config{Name: "wostnew", Create: true, CloneDevice: clone})
	fmt.Printf("create: permission=%v\n", errors.Is(err, ErrPermission))
}

// TestAttachUnprivileged creates a persistent device owned by uid 65534 and
// attaches to it from a process running as that uid with no capabilities;
// another uid is refused with ErrPermission.
func TestAttachUnprivileged(t *testing.T) {
	netnstest.RequireRoot(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv(1) from util-linux")
	}
	nsName, ns := netnstest.New(t)
	const owner = 65534
	err := netnstest.Do(ns, func() error {
		dev, err := Open(Config{Name: "wostp0", Create: true})
		if err != nil {
			return err
		}
		defer dev.Close()
		if err := dev.SetOwner(owner); err != nil {
			return err
		}
		return dev.SetPersist(true)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("ip", "-n", nsName, "tuntap", "del", "dev", "wostp0", "mode", "tun").Run() })

	// The test binary and a clone device node the other users may open
	// (this machine's /dev/net/tun may be mode 0600) in a directory they can
	// reach.
	dir, err := os.MkdirTemp("", "wosttun")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	clone := filepath.Join(dir, "tun")
	if out, err := exec.Command("mknod", "-m", "0666", clone, "c", "10", "200").CombinedOutput(); err != nil {
		t.Skipf("mknod clone device: %v: %s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "tun.test")
	if err := copyFile(self, bin); err != nil {
		t.Fatal(err)
	}

	run := func(uid int) string {
		cmd := exec.Command("ip", "netns", "exec", nsName, "setpriv",
			fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups",
			"--inh-caps=-all", "--bounding-set=-all",
			bin, "-test.run=^TestHelperProcess$", "-test.v")
		cmd.Env = append(os.Environ(), helperEnv+"=1", "WOST_TUN_NAME=wostp0", "WOST_TUN_CLONE="+clone)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper as uid %d: %v\n%s", uid, err, out)
		}
		return string(out)
	}
	out := run(owner)
	for _, want := range []string{"uid=65534", "attach: ok mtu=1500 offload=true", "setup: permission=true", "create: permission=true"} {
		if !strings.Contains(out, want) {
			t.Errorf("owner's helper output lacks %q:\n%s", want, out)
		}
	}
	out = run(owner - 1)
	if !strings.Contains(out, "attach: permission=true") || !strings.Contains(out, "ip tuntap add") {
		t.Errorf("another user was not refused with a hint:\n%s", out)
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
