package passthru

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/wanopt/wanopt/dgram/internal/pkttest"
	"github.com/wanopt/wanopt/dgram/packet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

func TestParseICMPError(t *testing.T) {
	udp := pkttest.UDP(t, "198.18.1.2:40000", "198.18.2.2:53", []byte("query"))
	ping6 := pkttest.Echo(t, "2001:2:0:1::2", "2001:2:0:2::2", packet.ICMPv6EchoRequest, 0x1234, "x")
	e, err := parseICMPError(pkttest.ICMPError(t, "198.18.2.2", udp, packet.ICMPDestUnreachable, 3))
	if err != nil || e.proto != packet.ProtoUDP || e.from != netip.MustParseAddrPort("198.18.1.2:40000") || e.to != netip.MustParseAddrPort("198.18.2.2:53") || e.typ != 3 || e.code != 3 {
		t.Errorf("port unreachable: %+v, %v", e, err)
	}
	e, err = parseICMPError(pkttest.ICMPError(t, "2001:2::1", ping6, packet.ICMPv6PacketTooBig, 0))
	if err != nil || e.proto != packet.ProtoICMPv6 || e.from != netip.MustParseAddrPort("[2001:2:0:1::2]:4660") || e.to != netip.MustParseAddrPort("[2001:2:0:2::2]:0") {
		t.Errorf("packet too big about an echo: %+v, %v", e, err)
	}
	// A quote cut after the transport's first 8 bytes is enough.
	short := pkttest.ICMPError(t, "198.18.2.2", udp[:packet.IPv4HeaderLen+8], pkttest.ICMPTimeExceeded, 0)
	if _, err := parseICMPError(short); err != nil {
		t.Errorf("a quote of 28 bytes: %v", err)
	}
	frag := bytes.Clone(udp)
	binary.BigEndian.PutUint16(frag[6:], 100) // a fragment at offset 800
	for _, c := range []struct {
		name string
		pkt  []byte
		want error
	}{
		{"quote too short", pkttest.ICMPError(t, "198.18.2.2", udp[:packet.IPv4HeaderLen+4], packet.ICMPDestUnreachable, 3), packet.ErrMalformed},
		{"about a later fragment", pkttest.ICMPError(t, "198.18.2.2", frag, packet.ICMPDestUnreachable, 3), packet.ErrUnsupported},
		{"about an echo reply", pkttest.ICMPError(t, "198.18.2.2", pkttest.Echo(t, "198.18.1.2", "198.18.2.2", packet.ICMPEchoReply, 1, "x"), packet.ICMPDestUnreachable, 3), packet.ErrUnsupported},
		{"not an error", pkttest.Echo(t, "198.18.1.2", "198.18.2.2", packet.ICMPEchoReply, 1, "x"), packet.ErrUnsupported},
		{"UDP", udp, packet.ErrUnsupported},
	} {
		if _, err := parseICMPError(c.pkt); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// An error whose destination is not the quoted packet's source.
	mis := pkttest.ICMPError(t, "198.18.2.2", udp, packet.ICMPDestUnreachable, 3)
	copy(mis[16:20], []byte{198, 18, 1, 3})
	pkttest.FixIPv4Checksum(mis)
	if _, err := parseICMPError(mis); !errors.Is(err, packet.ErrMalformed) {
		t.Errorf("an error to another address than the quoted sender's: %v", err)
	}
}

// FuzzICMPError: parseICMPError never panics, and what it accepts is
// consistent: an error to the quoted packet's sender, within the bytes.
func FuzzICMPError(f *testing.F) {
	udp := pkttest.UDP(f, "198.18.1.2:40000", "198.18.2.2:53", []byte("query"))
	f.Add(pkttest.ICMPError(f, "198.18.2.2", udp, packet.ICMPDestUnreachable, 3))
	f.Add(pkttest.ICMPError(f, "2001:2::1", pkttest.Echo(f, "2001:2:0:1::2", "2001:2:0:2::2", packet.ICMPv6EchoRequest, 1, "x"), packet.ICMPv6PacketTooBig, 0))
	f.Add(pkttest.ICMPError(f, "198.18.2.1", pkttest.TCP(f, "198.18.1.2:40000", "198.18.2.2:22", header.TCPFlagSyn, pkttest.SynOpts, ""), pkttest.ICMPTimeExceeded, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := parseICMPError(b)
		if err != nil {
			return
		}
		if e.len > len(b) || e.from.Addr() != e.dst || e.from.Addr().Is4() != e.to.Addr().Is4() {
			t.Fatalf("inconsistent error from % x: %+v", b, e)
		}
		if e.proto != packet.ProtoUDP && e.proto != packet.ProtoTCP && e.proto != packet.ProtoICMP && e.proto != packet.ProtoICMPv6 {
			t.Fatalf("about protocol %d", e.proto)
		}
		if p, ok := packet.Protocol(b); !ok || !maybeICMPError(b, p) {
			t.Fatal("parsed what the quick check refuses")
		}
	})
}
