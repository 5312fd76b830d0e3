package analyze

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

var update = flag.Bool("update", false, "regenerate the hand-built captures in testdata/ (go test -run TestGenerate -update)")

// capSpec says how to write a simulated transfer to a capture file.
type capSpec struct {
	link   uint32 // linkEthernet, linkRaw, linkIPv4, linkIPv6, linkSLL, linkSLL2
	ng     bool   // pcapng instead of pcap
	full   bool   // capture payload bytes too (default: headers only)
	v6     bool
	client netip.AddrPort
	server netip.AddrPort
}

var (
	cli4 = netip.MustParseAddrPort("198.18.0.1:40000")
	srv4 = netip.MustParseAddrPort("198.19.0.1:5201")
	cli6 = netip.MustParseAddrPort("[2001:db8::1]:40000")
	srv6 = netip.MustParseAddrPort("[2001:db8::2]:5201")
)

// frame serializes one simulated packet for the spec's link type. Payload
// bytes are counted in the IP length but not captured (snap length), which
// keeps the files small.
func (cs capSpec) frame(p simPkt) (data []byte, origLen int, err error) {
	src, dst := cs.client, cs.server
	if !p.fromCli {
		src, dst = dst, src
	}
	tcp := &layers.TCP{
		SrcPort: layers.TCPPort(src.Port()), DstPort: layers.TCPPort(dst.Port()),
		Seq: p.seq, Ack: p.ack, Window: p.win,
		SYN: p.flags&flagSYN != 0, ACK: p.flags&flagACK != 0, FIN: p.flags&flagFIN != 0,
		RST: p.flags&flagRST != 0, PSH: p.flags&flagPSH != 0,
	}
	opt := func(kind layers.TCPOptionKind, data []byte) {
		tcp.Options = append(tcp.Options, layers.TCPOption{OptionType: kind, OptionLength: uint8(2 + len(data)), OptionData: data})
	}
	if s := p.syn; s != nil {
		opt(layers.TCPOptionKindMSS, binary.BigEndian.AppendUint16(nil, s.mss))
		if s.sackPerm {
			opt(layers.TCPOptionKindSACKPermitted, nil)
		}
		if s.wscale >= 0 {
			opt(layers.TCPOptionKindWindowScale, []byte{byte(s.wscale)})
		}
	}
	if len(p.sack) > 0 {
		var b []byte
		for _, s := range p.sack {
			b = binary.BigEndian.AppendUint32(b, s[0])
			b = binary.BigEndian.AppendUint32(b, s[1])
		}
		opt(layers.TCPOptionKindSACK, b)
	}
	var ip gopacket.SerializableLayer
	var et layers.EthernetType
	if cs.v6 {
		l := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP,
			SrcIP: net.IP(src.Addr().AsSlice()), DstIP: net.IP(dst.Addr().AsSlice())}
		tcp.SetNetworkLayerForChecksum(l)
		ip, et = l, layers.EthernetTypeIPv6
	} else {
		l := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP,
			SrcIP: net.IP(src.Addr().AsSlice()), DstIP: net.IP(dst.Addr().AsSlice())}
		tcp.SetNetworkLayerForChecksum(l)
		ip, et = l, layers.EthernetTypeIPv4
	}
	buf := gopacket.NewSerializeBuffer()
	ls := []gopacket.SerializableLayer{ip, tcp, gopacket.Payload(make([]byte, p.n))}
	if cs.link == linkEthernet {
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: et}
		ls = append([]gopacket.SerializableLayer{eth}, ls...)
	}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		return nil, 0, fmt.Errorf("serialize packet: %w", err)
	}
	b := buf.Bytes()
	var hdr []byte
	switch cs.link {
	case linkSLL:
		hdr = make([]byte, 16)
		binary.BigEndian.PutUint16(hdr[2:4], 1) // ARPHRD_ETHER
		binary.BigEndian.PutUint16(hdr[4:6], 6)
		binary.BigEndian.PutUint16(hdr[14:16], uint16(et))
	case linkSLL2:
		hdr = make([]byte, 20)
		binary.BigEndian.PutUint16(hdr[0:2], uint16(et))
		binary.BigEndian.PutUint32(hdr[4:8], 2)
		binary.BigEndian.PutUint16(hdr[8:10], 1)
		hdr[11] = 6
	}
	b = append(hdr, b...)
	if cs.full {
		return b, len(b), nil
	}
	return b[:len(b)-p.n], len(b), nil
}

// writeCapture writes pkts (sorted by time) to path.
func writeCapture(path string, cs capSpec, pkts []simPkt) error {
	sort.SliceStable(pkts, func(i, j int) bool { return pkts[i].t < pkts[j].t })
	var out bytes.Buffer
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var write func(gopacket.CaptureInfo, []byte) error
	var flush func() error = func() error { return nil }
	if cs.ng {
		w, err := pcapgo.NewNgWriterInterface(&out, pcapgo.NgInterface{LinkType: layers.LinkType(cs.link), SnapLength: 0, TimestampResolution: 9},
			pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "wanopt analyze tests"}})
		if err != nil {
			return err
		}
		write, flush = w.WritePacket, w.Flush
	} else {
		w := pcapgo.NewWriterNanos(&out)
		if err := w.WriteFileHeader(65535, layers.LinkType(cs.link)); err != nil {
			return err
		}
		write = w.WritePacket
	}
	for _, p := range pkts {
		data, orig, err := cs.frame(p)
		if err != nil {
			return err
		}
		ci := gopacket.CaptureInfo{Timestamp: t0.Add(time.Duration(p.t)), CaptureLength: len(data), Length: orig}
		if err := write(ci, data); err != nil {
			return err
		}
	}
	if err := flush(); err != nil {
		return err
	}
	// gopacket's LinkType is 8 bits: write the full value (SLL2 is 276).
	b := out.Bytes()
	if cs.ng {
		idb := binary.LittleEndian.Uint32(b[4:8])
		binary.LittleEndian.PutUint16(b[idb+8:], uint16(cs.link))
	} else {
		binary.LittleEndian.PutUint32(b[20:24], cs.link)
	}
	return os.WriteFile(path, b, 0o644)
}

// testCapture is one hand-built capture and what the analyser must find.
type testCapture struct {
	file      string
	spec      capSpec
	build     func() []simPkt
	verdict   string
	anomalies []string
}

const ms1 = int64(time.Millisecond)

var testCaptures = []testCapture{
	{
		file:    "window-limited.pcap",
		spec:    capSpec{link: linkEthernet, client: cli4, server: srv4},
		verdict: VerdictWindowLimited,
		build: func() []simPkt {
			return simulate(simParams{total: 1 << 20, mss: 1448, rtt: 40 * ms1, rateBps: 100e6, rcvBuf: 16384, wscale: -1, cwnd: 1 << 22, sack: true})
		},
	},
	{
		file:    "zero-window.pcapng",
		spec:    capSpec{link: linkSLL, ng: true, client: cli4, server: srv4},
		verdict: VerdictZeroWindow,
		build: func() []simPkt {
			return simulate(simParams{total: 512 << 10, mss: 1448, rtt: 20 * ms1, rateBps: 50e6, rcvBuf: 65535, wscale: 0, cwnd: 1 << 22,
				readRate: 160e3, readEvery: 100 * ms1, sack: true})
		},
	},
	{
		file:    "loss-limited.pcap",
		spec:    capSpec{link: linkRaw, client: cli4, server: srv4},
		verdict: VerdictLossLimited,
		build: func() []simPkt {
			return simulate(simParams{total: 2 << 20, mss: 1448, rtt: 40 * ms1, rateBps: 100e6, rcvBuf: 4 << 20, wscale: 7, cwnd: 10 * 1448,
				aimd: true, lossP: 0.03, seed: 7, sack: true})
		},
	},
	{
		file:    "sender-limited.pcapng",
		spec:    capSpec{link: linkIPv6, ng: true, v6: true, client: cli6, server: srv6},
		verdict: VerdictSenderLimited,
		build: func() []simPkt {
			return simulate(simParams{total: 640 << 10, mss: 1428, rtt: 20 * ms1, rateBps: 100e6, rcvBuf: 4 << 20, wscale: 7, cwnd: 1 << 22,
				chunk: 64 << 10, chunkGap: 250 * ms1, sack: true})
		},
	},
	{
		file:    "path-limited.pcap",
		spec:    capSpec{link: linkSLL2, client: cli4, server: srv4},
		verdict: VerdictPathLimited,
		build: func() []simPkt {
			return simulate(simParams{total: 3 << 20, mss: 1448, rtt: 40 * ms1, rateBps: 10e6, rcvBuf: 4 << 20, wscale: 7, cwnd: 60000, sack: true})
		},
	},
	{
		file:      "sack-unsent-data.pcap",
		spec:      capSpec{link: linkEthernet, v6: true, client: cli6, server: srv6},
		verdict:   VerdictWindowLimited,
		anomalies: []string{"sack-unsent-data"},
		build:     buildSACKUnsent,
	},
	{
		file:      "sack-not-negotiated.pcap",
		spec:      capSpec{link: linkIPv4, client: cli4, server: srv4},
		anomalies: []string{"sack-not-negotiated"},
		build:     buildSACKNotNegotiated,
	},
	{
		file:      "sack-reneging.pcapng",
		spec:      capSpec{link: linkEthernet, ng: true, client: cli4, server: srv4},
		anomalies: []string{"sack-reneging"},
		build:     buildSACKReneging,
	},
	// Recorded in the lab by make-captures.sh (build is nil): real Linux TCP
	// over the wanbench link emulator, captured on the sender's TUN device.
	{file: "lab-window-limited.pcap", verdict: VerdictWindowLimited},
	{file: "lab-window-limited-rx.pcap", verdict: VerdictWindowLimited}, // captured at the receiver
	{file: "lab-zero-window.pcap", verdict: VerdictZeroWindow},
	{file: "lab-loss-limited.pcap", verdict: VerdictLossLimited},
	{file: "lab-sender-limited.pcap", verdict: VerdictSenderLimited},
	{file: "lab-path-limited.pcap", verdict: VerdictPathLimited},
	// Recorded by TestMakeLabCaptures (labcapture_test.go): real Linux TCP
	// over the same emulator, in namespaces of their own.
	{file: "lab-send-buffer-limited.pcap", verdict: VerdictSendBufferLimited},
	{file: "lab-send-buffer-limited-rx.pcap", verdict: VerdictUnclear}, // the receiver cannot see the flight
	{file: "lab-app-limited.pcap", verdict: VerdictSenderLimited},
	{file: "lab-opportunity-limited.pcap", verdict: VerdictOpportunityLimited},
	{file: "lab-path-limited-rx.pcap", verdict: VerdictPathLimited},
}

// buildSACKUnsent is the field case: a middlebox injects SACK blocks for
// data the sender never sent, on a 40 ms path with a 16 kB window.
func buildSACKUnsent() []simPkt {
	pk := simulate(simParams{total: 256 << 10, mss: 1428, rtt: 40 * ms1, rateBps: 100e6, rcvBuf: 16384, wscale: -1, cwnd: 1 << 22, sack: true})
	var out []simPkt
	n := 0
	for _, p := range pk {
		out = append(out, p)
		if !p.fromCli && p.flags == flagACK && p.ack > cISN+20000 && n < 5 {
			n++
			bogus := p
			bogus.t += 100e3
			bogus.sack = [][2]uint32{{p.ack + 1<<20, p.ack + 1<<20 + 2856}}
			out = append(out, bogus)
		}
	}
	return out
}

// buildSACKNotNegotiated: neither SYN offers SACK-permitted, yet the
// receiver's duplicate ACKs carry SACK blocks.
func buildSACKNotNegotiated() []simPkt {
	pk := simulate(simParams{total: 512 << 10, mss: 1448, rtt: 20 * ms1, rateBps: 50e6, rcvBuf: 1 << 20, wscale: 5, cwnd: 20 * 1448,
		aimd: true, lossP: 0.01, seed: 3, sack: true})
	for i := range pk {
		if pk[i].syn != nil {
			s := *pk[i].syn
			s.sackPerm = false
			pk[i].syn = &s
		}
	}
	return pk
}

// buildSACKReneging: after a loss the receiver SACKs data above the hole,
// then, once the hole is filled, acknowledges only up to the start of the
// SACKed block: it discarded data it had selectively acknowledged.
func buildSACKReneging() []simPkt {
	pk := simulate(simParams{total: 512 << 10, mss: 1448, rtt: 20 * ms1, rateBps: 50e6, rcvBuf: 1 << 20, wscale: 5, cwnd: 20 * 1448,
		aimd: true, lossP: 0.01, seed: 5, sack: true})
	var sacked [2]uint32
	done := false
	for i := range pk {
		p := &pk[i]
		if p.fromCli || done {
			continue
		}
		if len(p.sack) > 0 && sacked[1] == 0 {
			sacked = p.sack[0]
			continue
		}
		if sacked[1] != 0 && int32(p.ack-sacked[1]) >= 0 && len(p.sack) == 0 {
			p.ack = sacked[0] // retract: acknowledge only up to the SACKed block
			done = true
		}
	}
	return pk
}

// TestGenerate writes the hand-built captures when run with -update, and
// otherwise checks that the committed files match what the simulator makes.
func TestGenerate(t *testing.T) {
	defer func() {
		if *update {
			if err := writeFuzzCorpus(); err != nil {
				t.Fatalf("write fuzz corpus: %v", err)
			}
		}
	}()
	for _, tc := range testCaptures {
		path := filepath.Join("testdata", tc.file)
		if *update && tc.build != nil {
			if err := writeCapture(path, tc.spec, tc.build()); err != nil {
				t.Fatalf("write %s: %v", path, err)
			}
			continue
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("%s missing: run go test ./analyze -run TestGenerate -update (lab-*: analyze/testdata/README.md says how each was made)", path)
		}
	}
}
