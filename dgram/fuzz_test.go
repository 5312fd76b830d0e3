package dgram

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/wanopt/wanopt/dgram/packet"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// The seed corpora are in testdata/fuzz: valid UDP and echo packets of
// both families, and broken ones (FuzzParse's are package packet's).

// FuzzNear: the near edge's Divert, Deliver and Demux take any bytes; what
// Divert sends is one kind byte and a packet Parse accepts.
func FuzzNear(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		s := &fakeSender{max: 1400}
		n := NewNear(NearConfig{Route: func(netip.Addr) packet.Sender { return s }, Write: func([]byte) error { return nil }})
		n.Divert(b)
		n.Deliver(b)
		Demux(b, n, nil)
		// A tunnel too small for most packets: what Divert writes back is
		// an ICMP error no longer than IPv6's minimum MTU, with a valid
		// IPv4 header checksum.
		small := &fakeSender{max: 69}
		var answers [][]byte
		n2 := NewNear(NearConfig{Route: func(netip.Addr) packet.Sender { return small },
			Write: func(p []byte) error { answers = append(answers, bytes.Clone(p)); return nil }})
		n2.Divert(b)
		for _, a := range answers {
			if len(a) > packet.MaxErrorV6 || len(a) < packet.IPv4HeaderLen+packet.L4HeaderLen {
				t.Fatalf("answer of %d bytes", len(a))
			}
			if a[0] == 0x45 && (checksum.Checksum(a[:packet.IPv4HeaderLen], 0) != 0xffff || a[9] != packet.ProtoICMP || a[packet.IPv4HeaderLen] != packet.ICMPDestUnreachable) {
				t.Fatalf("bad IPv4 answer % x", a)
			}
		}
		for _, d := range s.sent {
			if d[0] != packet.KindUp {
				t.Fatalf("sent kind %d", d[0])
			}
			if _, err := packet.Parse(d[1:]); err != nil {
				t.Fatalf("sent a packet Parse refuses: %v", err)
			}
		}
	})
}

// FuzzFar: the far edge's worker takes any bytes (its policy refuses
// everything here, so no socket is opened); so does a transparent far
// side (WritePacket), which allows everything, from the tunnel and from
// its TUN (Divert), within its table's bound, writing out only packets
// Parse accepts.
func FuzzFar(f *testing.F) {
	far := NewFar(FarConfig{Check: func(netip.AddrPort) string { return "refused" }})
	far.Close() // the test calls handle itself, as the worker would
	const maxFlows = 16
	tr := NewFar(FarConfig{Check: func(netip.AddrPort) string { return "" }, MaxFlows: maxFlows,
		WritePacket: func(p []byte) error {
			if proto, _ := packet.Protocol(p); proto == packet.ProtoTCP {
				return nil
			}
			if _, err := packet.Parse(p); err != nil {
				panic("wrote out a packet Parse refuses: " + err.Error())
			}
			return nil
		}})
	tr.Close()
	tr.SetTunnel(discardSender{})
	f.Fuzz(func(t *testing.T, b []byte) {
		far.handle(b)
		Demux(b, nil, far)
		if far.nflows.Load() != 0 {
			t.Fatal("a refused destination opened a flow")
		}
		tr.handle(b)
		tr.Divert(b)
		if n := tr.pt.Flows(); n > maxFlows {
			t.Fatalf("%d transparent flows, bound %d", n, maxFlows)
		}
	})
}
