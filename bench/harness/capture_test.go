package harness

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// TestCountZeroWindows counts the zero windows toward the server in small
// captures as tcpdump writes them on a veth and on a TUN device.
func TestCountZeroWindows(t *testing.T) {
	server := netip.MustParseAddr("198.18.2.2")
	edge := netip.MustParseAddr("198.18.2.1")
	type pkt struct {
		src, dst netip.Addr
		window   uint16
		rst      bool
		payload  int
		udp      bool
	}
	pkts := []pkt{
		{src: edge, dst: server, window: 0},                 // counted
		{src: edge, dst: server, window: 0, payload: 1400},  // counted, cut to 128 bytes
		{src: edge, dst: server, window: 0, rst: true},      // a reset: toward the server, not counted
		{src: edge, dst: server, window: 512},               // open window
		{src: server, dst: edge, window: 0},                 // toward the edge
		{src: edge, dst: server, udp: true, payload: 100},   // not TCP
		{src: edge, dst: server, window: 1, payload: 10000}, // open, large (a GRO segment)
	}
	for _, link := range []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeRaw} {
		t.Run(link.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.pcap")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			w := pcapgo.NewWriter(f)
			if err := w.WriteFileHeader(captureSnapBytes, link); err != nil {
				t.Fatal(err)
			}
			for i, p := range pkts {
				ip := &layers.IPv4{Version: 4, TTL: 64, SrcIP: net.IP(p.src.AsSlice()), DstIP: net.IP(p.dst.AsSlice()), Protocol: layers.IPProtocolTCP}
				var l4 gopacket.SerializableLayer
				if p.udp {
					ip.Protocol = layers.IPProtocolUDP
					u := &layers.UDP{SrcPort: 5000, DstPort: 80}
					u.SetNetworkLayerForChecksum(ip)
					l4 = u
				} else {
					tcp := &layers.TCP{SrcPort: 54840, DstPort: 80, Seq: uint32(i), Ack: 1, ACK: !p.rst, RST: p.rst, Window: p.window}
					tcp.SetNetworkLayerForChecksum(ip)
					l4 = tcp
				}
				ls := []gopacket.SerializableLayer{ip, l4, gopacket.Payload(make([]byte, p.payload))}
				if link == layers.LinkTypeEthernet {
					eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
					ls = append([]gopacket.SerializableLayer{eth}, ls...)
				}
				buf := gopacket.NewSerializeBuffer()
				if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
					t.Fatal(err)
				}
				frame := buf.Bytes()
				ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, int64(i)), Length: len(frame), CaptureLength: min(len(frame), captureSnapBytes)}
				if err := w.WritePacket(ci, frame[:ci.CaptureLength]); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			zero, to, err := CountZeroWindows(path, server)
			if err != nil {
				t.Fatal(err)
			}
			if zero != 2 || to != 5 {
				t.Errorf("%d zero windows of %d TCP segments toward the server, want 2 of 5", zero, to)
			}
		})
	}
	bad := filepath.Join(t.TempDir(), "not.pcap")
	if err := os.WriteFile(bad, []byte("not a capture at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := CountZeroWindows(bad, server); err == nil {
		t.Error("a file that is no capture gave no error")
	}
}

func TestDroppedByKernel(t *testing.T) {
	for stderr, want := range map[string]int{
		"tcpdump: listening on lan0, link-type EN10MB (Ethernet), snapshot length 128 bytes\n31337 packets captured\n31400 packets received by filter\n63 packets dropped by kernel\n": 63,
		"1 packet captured\n1 packet received by filter\n0 packets dropped by kernel\n":                                                                                                0,
		"": 0,
	} {
		if got := droppedByKernel(stderr); got != want {
			t.Errorf("droppedByKernel(%q) = %d, want %d", stderr, got, want)
		}
	}
}
