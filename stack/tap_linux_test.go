//go:build linux

package stack

import (
	"bytes"
	"context"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/wanopt/wanopt/internal/tcptest"
	"github.com/wanopt/wanopt/tun"
)

// TestCaptureTap writes the packets of one flow to a pcap file through the
// tap and finds the client's SYN and the stack's SYN-ACK in it.
func TestCaptureTap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tap.pcap")
	capt, err := tun.NewCapture(tun.CaptureConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	addr := tcptest.Server(t, tcptest.Echo)
	l := newLab(t, 1500, &fakeDialer{target: addr}, Config{Tap: capt})
	c, err := l.dial(context.Background(), netip.AddrPortFrom(interAddr, 80))
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("tapped"))
	c.CloseWrite()
	io.ReadAll(c)
	c.Close()
	l.close()
	if err := capt.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := openPcap(path)
	if err != nil {
		t.Fatal(err)
	}
	var syn, synack, payloadSeen bool
	for {
		data, _, err := f.ReadPacketData()
		if err != nil {
			break
		}
		p := gopacket.NewPacket(data, layers.LayerTypeIPv4, gopacket.Default)
		tcp, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if !ok {
			continue
		}
		syn = syn || (tcp.SYN && !tcp.ACK && tcp.DstPort == 80)
		synack = synack || (tcp.SYN && tcp.ACK && tcp.SrcPort == 80)
		payloadSeen = payloadSeen || string(tcp.Payload) == "tapped"
	}
	if !syn || !synack || !payloadSeen {
		t.Fatalf("capture: SYN %v, SYN-ACK %v, payload %v (%d packets)", syn, synack, payloadSeen, capt.Packets())
	}
}

func openPcap(path string) (*pcapgo.Reader, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return pcapgo.NewReader(bytes.NewReader(b))
}
