package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"regexp"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/wanopt/wanopt/bench/harness"
	"github.com/wanopt/wanopt/bench/lab"
	"github.com/wanopt/wanopt/bench/wanem"
	"github.com/wanopt/wanopt/edge/control"
	"golang.org/x/sys/unix"
)

// The ports of TestEdgePassTCP's server, which answers each connection
// with its kernel's view of the handshake and then echoes.
const (
	passPort     = 7010 // a --near-rule passes it
	optimisePort = 7011 // no rule: optimised
)

// TestEdgePassTCP: a near rule passes one server port's TCP unterminated
// through a far edge with transparent egress. That connection's handshake
// is end to end — the server's kernel sees the client's own window scale
// (the client sets its receive buffer, so its scale is unlike the one
// the edges' stacks offer) and an MSS clamped to fit a datagram —
// and it carries a hash-checked echo. A connection to another port is
// optimised as before, and there the server sees the far edge's stack's
// scale instead, which shows the check can tell the two apart. 'wanopt
// flows' on the near edge lists the passed flow with action pass.
func TestEdgePassTCP(t *testing.T) {
	needLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	link := wanem.Config{Delay: 20 * time.Millisecond, RateBps: 100e6}
	l := newLab(t, ctx, link, link)
	serveIn(t, l.Server.NS, passPort, handleTCPView)
	serveIn(t, l.Server.NS, optimisePort, handleTCPView)
	edges := startEdges(t, ctx, l, harness.EdgeOptions{Transparent: true,
		Allow:    []string{fmt.Sprintf("198.18.2.2/32:%d,%d", passPort, optimisePort)},
		NearArgs: []string{"--near-rule", fmt.Sprintf("pass:tcp:198.18.2.2/32:%d", passPort)}})

	var (
		listed   []control.Flow
		flowsOut string
	)
	pass, err := exchangeTCPView(ctx, l.Client.NS, passPort, func() {
		if err := queryControl(edges.Socket("near"), "flows", &listed); err != nil {
			t.Errorf("near edge's flows: %v", err)
		}
		code, out, errs := run("flows", "--control", edges.Socket("near"))
		if code != 0 {
			t.Errorf("wanopt flows: code %d, %s", code, errs)
		}
		flowsOut = out
	})
	if err != nil {
		t.Fatalf("passed connection: %v", err)
	}
	t.Logf("pass: the client's window scale %d, the server saw %d; the server's send MSS %d; %d KiB echoed, SHA-256 equal",
		pass.clientRcvWscale, pass.serverSndWscale, pass.serverSndMSS, viewEchoBytes>>10)
	if pass.clientRcvWscale == 0 {
		t.Fatal("the client offered window scale 0, which the server cannot tell from no scaling: give it a larger receive buffer")
	}
	if pass.serverSndWscale != pass.clientRcvWscale {
		t.Errorf("passed flow: the server saw window scale %d, the client offered %d: the handshake was not end to end",
			pass.serverSndWscale, pass.clientRcvWscale)
	}
	if pass.serverSndMSS == 0 || pass.serverSndMSS > 1460-20 {
		t.Errorf("passed flow: the server's send MSS %d, want it clamped below the LAN's 1460 to fit a tunnel datagram", pass.serverSndMSS)
	}
	found := false
	for _, f := range listed {
		if f.Dst == fmt.Sprintf("198.18.2.2:%d", passPort) && f.Action == "pass" && f.Side == "ingress" {
			found = true
		}
	}
	if !found {
		t.Errorf("the near edge's flows during the passed connection do not list it with action pass: %+v", listed)
	}
	t.Logf("near edge, wanopt flows during the passed connection:\n%s", flowsOut)
	if !regexp.MustCompile(fmt.Sprintf(`(?m)^ingress +pass +198\.18\.1\.2:\d+ +198\.18\.2\.2:%d +passing`, passPort)).MatchString(flowsOut) {
		t.Errorf("wanopt flows does not show the passed flow with action pass:\n%s", flowsOut)
	}

	opt, err := exchangeTCPView(ctx, l.Client.NS, optimisePort, nil)
	if err != nil {
		t.Fatalf("optimised connection: %v", err)
	}
	t.Logf("optimise: the client's window scale %d, the server saw %d (the far edge's stack's); the server's send MSS %d",
		opt.clientRcvWscale, opt.serverSndWscale, opt.serverSndMSS)
	if opt.serverSndWscale == opt.clientRcvWscale {
		t.Errorf("optimised flow: the server saw the client's own window scale %d, so the check cannot tell a passed handshake from a terminated one", opt.clientRcvWscale)
	}

	var near, far control.Status
	if err := queryControl(edges.Socket("near"), "status", &near); err != nil {
		t.Fatal(err)
	}
	if err := queryControl(edges.Socket("far"), "status", &far); err != nil {
		t.Fatal(err)
	}
	if d := near.DatagramIngress; d == nil || d.TCP.PacketsUp == 0 || d.TCP.PacketsDown == 0 {
		t.Errorf("near edge's datagrams: %+v; want passed TCP packets both ways", d)
	}
	if d := far.DatagramEgress; d == nil || d.TCP.PacketsUp == 0 || d.TCP.PacketsDown == 0 || d.Drops.Unsupported != 0 {
		t.Errorf("far edge's datagrams: %+v; want passed TCP packets both ways, none unsupported", d)
	}
	if near.Ingress == nil || near.Ingress.Dialed != 1 {
		t.Errorf("near edge's stack: %+v; want the optimised connection alone dialled", near.Ingress)
	}
	t.Logf("passed TCP: near edge %d packets up, %d down, drops %+v; far edge %d up, %d down, drops %+v",
		near.DatagramIngress.TCP.PacketsUp, near.DatagramIngress.TCP.PacketsDown, near.DatagramIngress.Drops,
		far.DatagramEgress.TCP.PacketsUp, far.DatagramEgress.TCP.PacketsDown, far.DatagramEgress.Drops)
	stopEdges(t, edges)

	// A far edge with kernel egress has no TUN to send the client's own
	// packets from: the passed SYNs are counted as unsupported there and
	// the connection fails, while an optimised one still works.
	edges = startEdges(t, ctx, l, harness.EdgeOptions{
		Allow:    []string{fmt.Sprintf("198.18.2.2/32:%d,%d", passPort, optimisePort)},
		NearArgs: []string{"--near-rule", fmt.Sprintf("pass:tcp:198.18.2.2/32:%d", passPort)}})
	if c, err := dialIn(ctx, l.Client.NS, passPort, 2*time.Second); err == nil {
		c.Close()
		t.Error("a passed connection through a far edge with kernel egress connected")
	}
	if _, err := exchangeTCPView(ctx, l.Client.NS, optimisePort, nil); err != nil {
		t.Errorf("optimised connection beside the refused pass: %v", err)
	}
	if err := queryControl(edges.Socket("far"), "status", &far); err != nil {
		t.Fatal(err)
	}
	if d := far.DatagramEgress; d == nil || d.Drops.Unsupported == 0 || d.TCP.PacketsUp != 0 {
		t.Errorf("kernel egress: far edge's datagrams %+v; want the passed SYNs counted unsupported", d)
	} else {
		t.Logf("kernel egress: the far edge counted %d passed TCP packets unsupported", d.Drops.Unsupported)
	}
	stopEdges(t, edges)
}

// viewEchoBytes is what exchangeTCPView echoes.
const viewEchoBytes = 512 << 10

// tcpView is a connection's handshake as both ends' kernels saw it.
type tcpView struct {
	// clientRcvWscale is the window scale the client offered;
	// serverSndWscale the one the server's kernel took for the client's.
	clientRcvWscale, serverSndWscale uint8
	// serverSndMSS is the server's send MSS (from the MSS the client's
	// SYN carried as it reached the server).
	serverSndMSS uint32
}

// handleTCPView writes the server's TCP_INFO view of the handshake (the
// wscale byte: the peer's scale in the low nibble; then the send MSS, 4
// bytes) and echoes the rest.
func handleTCPView(c *net.TCPConn) {
	var hdr [5]byte
	if info, err := tcpInfo(c); err == nil {
		hdr[0] = wscaleByte(info)
		binary.BigEndian.PutUint32(hdr[1:], info.Snd_mss)
	} else {
		hdr[0] = 0xff
	}
	if _, err := c.Write(hdr[:]); err != nil {
		return
	}
	io.Copy(c, c)
	c.CloseWrite()
}

// wscaleByte is struct tcp_info's byte of window scales (after
// tcpi_options): tcpi_snd_wscale, the peer's, in the low nibble and
// tcpi_rcv_wscale, this end's, in the high one. x/sys/unix has it as
// padding before Rto, where the kernel wrote it.
func wscaleByte(info *unix.TCPInfo) uint8 {
	b := unsafe.Slice((*byte)(unsafe.Pointer(info)), unsafe.Sizeof(*info))
	return b[unsafe.Offsetof(info.Options)+1]
}

func tcpInfo(c *net.TCPConn) (*unix.TCPInfo, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var info *unix.TCPInfo
	cerr := rc.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	if cerr != nil {
		return nil, cerr
	}
	return info, err
}

// exchangeTCPView connects from namespace ns to 198.18.2.2:port with a
// 200 KiB receive buffer (so the client's kernel offers a window scale of
// 2 or 3, not its default 7 nor 0, which would look like no scaling),
// reads the server's view of the handshake, calls during (if set) while
// the connection is open, and echoes viewEchoBytes, checking their
// SHA-256.
func exchangeTCPView(ctx context.Context, ns string, port int, during func()) (tcpView, error) {
	var v tcpView
	var c net.Conn
	err := lab.InNetns(ns, func() error {
		d := net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 200<<10) }); err != nil {
				return err
			}
			return serr
		}}
		var err error
		c, err = d.DialContext(ctx, "tcp4", fmt.Sprintf("198.18.2.2:%d", port))
		return err
	})
	if err != nil {
		return v, fmt.Errorf("connect to 198.18.2.2:%d: %w", port, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	var hdr [5]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return v, fmt.Errorf("read the server's view of the handshake: %w", err)
	}
	if hdr[0] == 0xff {
		return v, fmt.Errorf("the server could not read its TCP_INFO")
	}
	v.serverSndWscale, v.serverSndMSS = hdr[0]&0x0f, binary.BigEndian.Uint32(hdr[1:])
	info, err := tcpInfo(c.(*net.TCPConn))
	if err != nil {
		return v, fmt.Errorf("the client's TCP_INFO: %w", err)
	}
	v.clientRcvWscale = wscaleByte(info) >> 4
	if during != nil {
		during()
	}
	data := make([]byte, viewEchoBytes)
	mrand.NewChaCha8([32]byte{byte(port)}).Read(data)
	werr := writeAndClose(c, data)
	got, err := io.ReadAll(c)
	if err != nil {
		return v, fmt.Errorf("read the echo (%d of %d bytes): %w", len(got), len(data), err)
	}
	if err := <-werr; err != nil {
		return v, fmt.Errorf("write: %w", err)
	}
	if sha256.Sum256(got) != sha256.Sum256(data) || !bytes.Equal(got, data) {
		return v, fmt.Errorf("the echo differs: %d bytes back of %d", len(got), len(data))
	}
	return v, nil
}
