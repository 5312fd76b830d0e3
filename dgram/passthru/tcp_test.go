package passthru

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/wanopt/wanopt/dgram/internal/pkttest"
	"github.com/wanopt/wanopt/dgram/packet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// fakeSender records the datagrams sent.
type fakeSender struct {
	max  int
	sent [][]byte
}

func (s *fakeSender) SendDatagram(p []byte) error {
	s.sent = append(s.sent, bytes.Clone(p))
	return nil
}
func (s *fakeSender) MaxDatagramBytes() int { return s.max }

// nopCounter counts nothing.
type nopCounter struct{}

func (nopCounter) Up(uint8, int)    {}
func (nopCounter) Down(uint8, int)  {}
func (nopCounter) Dropped(Reason)   {}
func (nopCounter) ParseError(error) {}
func (nopCounter) SendError(error)  {}
func (nopCounter) FlowOpened()      {}

// passAll passes every flow.
type passAll struct{}

func (passAll) Match(uint8, netip.AddrPort) Action { return Pass }
func (passAll) DivertsTCP() bool                   { return true }

func TestClampMSS(t *testing.T) {
	odd := append([]byte{1}, pkttest.SynOpts...) // a NOP first: the MSS value at an odd offset
	for _, c := range []struct {
		name string
		pkt  []byte
		mss  uint16
		want uint16
	}{
		{"IPv4 even", pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagSyn, pkttest.SynOpts, ""), 1389, 1389},
		{"IPv4 odd", pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagSyn, odd, ""), 1300, 1300},
		{"IPv6 SYN-ACK", pkttest.TCP(t, "[2001:db8::2]:22", "[2001:db8:1::2]:40000", header.TCPFlagSyn|header.TCPFlagAck, pkttest.SynOpts, ""), 1369, 1369},
		{"already lower", pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagSyn, []byte{2, 4, 0x04, 0x00}, ""), 1389, 1024},
		{"no MSS", pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagSyn, []byte{1, 3, 3, 7}, ""), 1389, 536},
		{"not a SYN", pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagAck, pkttest.SynOpts, "data"), 1000, 1460},
		{"bad option length", pkttest.TCP(t, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagSyn, []byte{3, 9, 2, 4, 5, 0xb4}, ""), 1000, 536},
	} {
		p, err := parseTCP(c.pkt)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		clampMSS(p.l4, c.mss)
		if got := pkttest.MSSOf(c.pkt); got != c.want {
			t.Errorf("%s: MSS %d, want %d", c.name, got, c.want)
		}
		if !pkttest.TCPChecksumOK(c.pkt) {
			t.Errorf("%s: bad checksum after the clamp", c.name)
		}
		// The other options stay the client's: window scale 7.
		if c.name == "IPv4 even" || c.name == "IPv4 odd" {
			if ws := header.ParseSynOptions(header.TCP(p.l4).Options(), false).WS; ws != 7 {
				t.Errorf("%s: window scale %d, want 7", c.name, ws)
			}
		}
	}
	if got := mssFor(netip.MustParseAddr("198.18.2.2"), 1430); got != 1430-1-20-20 {
		t.Errorf("mssFor IPv4 %d", got)
	}
	if got := mssFor(netip.MustParseAddr("2001:db8::1"), 1430); got != 1430-1-40-20 {
		t.Errorf("mssFor IPv6 %d", got)
	}
	if got := mssFor(netip.MustParseAddr("2001:db8::1"), 50); got != 0 {
		t.Errorf("mssFor of a tiny datagram %d", got)
	}
}

// FuzzTCP: the passed TCP path takes any bytes from the TUN or the
// tunnel without panicking; a segment the MSS clamp changes keeps a
// valid checksum, and what is sent is the packet as parsed.
func FuzzTCP(f *testing.F) {
	f.Add(pkttest.TCP(f, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagSyn, pkttest.SynOpts, ""))
	f.Add(pkttest.TCP(f, "[2001:db8::2]:22", "[2001:db8:1::2]:40000", header.TCPFlagSyn|header.TCPFlagAck, append([]byte{1}, pkttest.SynOpts...), ""))
	f.Add(pkttest.TCP(f, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagAck, nil, "data"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &fakeSender{max: 1430}
		n := NewNear(NearConfig{Route: func(netip.Addr) packet.Sender { return s }, Write: func([]byte) error { return nil },
			Count: nopCounter{}, TooBig: func([]byte, *packet.Packet, int) {}, Rules: passAll{}})
		n.DivertTCP(b)
		n.Deliver(b)
		for _, d := range s.sent {
			if d[0] != packet.KindUp {
				t.Fatalf("sent kind %d", d[0])
			}
			p, err := parseTCP(d[1:])
			if err != nil {
				t.Fatalf("sent a packet parseTCP refuses: %v", err)
			}
			if valid := pkttest.TCPChecksumOK(b); valid && !pkttest.TCPChecksumOK(d[1:]) {
				t.Fatalf("the clamp broke a valid checksum: % x", d)
			}
			if len(d)-1 != p.len {
				t.Fatalf("sent %d bytes of a %d-byte packet", len(d)-1, p.len)
			}
		}
		far := NewFar(FarConfig{Check: func(netip.AddrPort) string { return "" }, WritePacket: func([]byte) error { return nil },
			Sender: func() packet.Sender { return s }, Count: nopCounter{}, MaxFlows: 16, IdleTimeout: time.Minute})
		far.HandleTCP(b)
		far.DivertTCP(b)
	})
}
