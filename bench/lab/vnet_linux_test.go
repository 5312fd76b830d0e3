package lab

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestOffloadTUNCarriesUDPGSO forwards one UDP GSO batch from the client's
// wan0, opened as the link helper opens it, to the server's: it must cross as
// one frame and arrive as the sender's datagrams, checksums accepted.
func TestOffloadTUNCarriesUDPGSO(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	l, err := Build(ctx, Options{Kind: Direct})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := openOffloadTUN(l.Client.NS, "wan0")
	if err != nil {
		t.Skipf("skipping: this kernel has no TUN UDP segmentation offload (Linux 6.2+): %v", err)
	}
	defer a.Close()
	b, err := openOffloadTUN(l.Server.NS, "wan0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// A persistent TUN has no carrier until a file is attached, and the
	// kernel drops what is sent until it has noticed the carrier.
	for _, ns := range []string{l.Client.NS, l.Server.NS} {
		waitCarrier(t, ns, "wan0")
	}

	var rx *net.UDPConn
	if err := InNetns(l.Server.NS, func() (err error) {
		rx, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 47001})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	var tx *net.UDPConn
	if err := InNetns(l.Client.NS, func() (err error) {
		tx, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(l.Server.Addr, 47001)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	const seg, segs = 1200, 5
	rc, err := tx.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT, seg)
	}); err != nil || serr != nil {
		t.Fatalf("set UDP_SEGMENT: %v %v", err, serr)
	}
	batch := make([]byte, seg*segs-300) // the last datagram is short
	for i := range batch {
		batch[i] = byte(i / seg)
	}
	if _, err := tx.Write(batch); err != nil {
		t.Fatalf("send a UDP GSO batch: %v", err)
	}

	// Forward the batch's datagrams, skipping what else the kernel sends
	// on a new link (IPv6 router solicitations, MLD).
	buf := make([]byte, 1<<16)
	_ = a.SetReadDeadline(time.Now().Add(5 * time.Second))
	for fwd := 0; fwd < segs; {
		n, err := a.Read(buf)
		if err != nil {
			t.Fatalf("read client wan0 after %d datagrams (%d frames read, %d dropped): %v", fwd, a.frames, a.Dropped(), err)
		}
		if buf[0]>>4 != 4 || buf[9] != 17 {
			continue
		}
		if _, err := b.Write(buf[:n]); err != nil {
			t.Fatalf("write server wan0: %v", err)
		}
		fwd++
	}
	if a.frames > 3 { // the batch, and at most two of the link's own packets
		t.Errorf("%d frames read for one batch of %d datagrams: the sender's kernel segmented it", a.frames, segs)
	}
	if d := a.Dropped(); d != 0 {
		t.Errorf("%d frames dropped", d)
	}
	_ = rx.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []byte
	for i := 0; i < segs; i++ {
		n, err := rx.Read(buf)
		if err != nil {
			t.Fatalf("server received %d of %d datagrams: %v", i, segs, err)
		}
		if want := min(seg, len(batch)-len(got)); n != want {
			t.Errorf("datagram %d: %d bytes, want %d", i, n, want)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, batch) {
		t.Error("the datagrams received differ from the batch sent")
	}
}

// waitCarrier waits until dev in ns has a carrier.
func waitCarrier(t *testing.T, ns, dev string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := exec.Command("ip", "-n", ns, "-o", "link", "show", "dev", dev).Output()
		if err == nil && !strings.Contains(string(out), "state DOWN") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s in %s still down after 5 s: %s %v", dev, ns, out, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
