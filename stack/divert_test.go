package stack

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/wanopt/wanopt/flow"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// countDialer counts Dial calls and refuses them.
type countDialer struct {
	mu sync.Mutex
	n  int
}

func (d *countDialer) Dial(context.Context, netip.AddrPort, netip.AddrPort) (flow.Conn, error) {
	d.mu.Lock()
	d.n++
	d.mu.Unlock()
	return nil, flow.ErrRefused
}

func (d *countDialer) count() int { d.mu.Lock(); defer d.mu.Unlock(); return d.n }

// echoRequest is an ICMP echo request from src to dst.
func echoRequest(src, dst [4]byte) []byte {
	b := make([]byte, header.IPv4MinimumSize+header.ICMPv4MinimumSize+4)
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(header.ICMPv4ProtocolNumber),
		SrcAddr: tcpipAddr(src), DstAddr: tcpipAddr(dst)})
	ip.SetChecksum(^ip.CalculateChecksum())
	ic := header.ICMPv4(b[header.IPv4MinimumSize:])
	ic.SetType(header.ICMPv4Echo)
	ic.SetIdent(7)
	ic.SetSequence(1)
	copy(ic.Payload(), "ping")
	ic.SetChecksum(0)
	ic.SetChecksum(^checksumOf(ic))
	return b
}

func checksumOf(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

func inject(ch *channel.Endpoint, b []byte) {
	pkt := gstack.NewPacketBuffer(gstack.PacketBufferOptions{Payload: buffer.MakeWithData(b)})
	ch.InjectInbound(ipv4.ProtocolNumber, pkt)
	pkt.DecRef()
}

// TestDivert: with Config.Divert, non-TCP packets go to it before the
// netstack (which therefore never answers a ping itself), TCP is never
// offered to it, and WritePacket writes replies out of the link.
func TestDivert(t *testing.T) {
	var (
		mu      sync.Mutex
		offered [][]byte
	)
	take := true
	d := &countDialer{}
	ch := channel.New(64, 1500, "")
	st, err := NewWithEndpoint(context.Background(), ch, d, Config{MTU: 1500, Logger: quiet, KeepAliveIdle: -1,
		Divert: func(pkt []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			offered = append(offered, bytes.Clone(pkt))
			return take
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	client, server := [4]byte{198, 18, 1, 2}, [4]byte{198, 18, 2, 2}
	ping := echoRequest(client, server)

	inject(ch, ping)
	injectSYN(ch, netip.AddrPortFrom(netip.AddrFrom4(client), 40000), netip.AddrPortFrom(netip.AddrFrom4(server), 80))
	for deadline := time.Now().Add(5 * time.Second); d.count() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the SYN never reached the dialer")
		}
	}
	mu.Lock()
	if len(offered) != 1 || !bytes.Equal(offered[0], ping) {
		t.Errorf("offered %d packets to Divert, want the ping alone", len(offered))
	}
	mu.Unlock()
	if got := st.Stats().Diverted; got != 1 {
		t.Errorf("Stats.Diverted %d, want 1", got)
	}
	// What comes out of the link: the RST for the refused SYN, never an
	// echo reply.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	for {
		pkt := ch.ReadContext(ctx)
		if pkt == nil {
			break
		}
		v := pkt.ToView()
		if ip := header.IPv4(v.AsSlice()); ip.TransportProtocol() == header.ICMPv4ProtocolNumber {
			t.Errorf("the netstack answered ICMP type %d itself", header.ICMPv4(ip.Payload()).Type())
		}
		v.Release()
		pkt.DecRef()
	}

	// A reply written by the diverter comes out as it was given.
	reply := bytes.Clone(ping)
	reply[20] = 0 // echo reply; the checksum does not matter to the link
	if err := st.WritePacket(reply); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	pkt := ch.ReadContext(ctx2)
	if pkt == nil {
		t.Fatal("WritePacket: nothing came out of the link")
	}
	v := pkt.ToView()
	if !bytes.Equal(v.AsSlice(), reply) {
		t.Errorf("wrote % x, the link got % x", reply, v.AsSlice())
	}
	v.Release()
	pkt.DecRef()
	if err := st.WritePacket([]byte{0x10, 0}); err == nil {
		t.Error("WritePacket of a non-IP packet succeeded")
	}

	// A packet the diverter leaves goes to the netstack. (This gVisor
	// does not answer pings to the addresses it only holds for
	// interception, but an echo request is the diverter's all the same.)
	mu.Lock()
	take = false
	mu.Unlock()
	before := st.Stats()
	inject(ch, ping)
	after := st.Stats()
	if after.TUNPacketsIn != before.TUNPacketsIn+1 || after.Diverted != before.Diverted {
		t.Errorf("a packet the diverter left: netstack packets in %d -> %d, diverted %d -> %d",
			before.TUNPacketsIn, after.TUNPacketsIn, before.Diverted, after.Diverted)
	}
}

func tcpipAddr(a [4]byte) tcpip.Address { return tcpip.AddrFrom4(a) }

// TestDivertTCP: with Config.DivertTCP, TCP packets are offered to it
// (and never to Divert); one it takes never reaches the netstack's
// forwarder, one it leaves does.
func TestDivertTCP(t *testing.T) {
	var (
		mu            sync.Mutex
		tcpOffered    [][]byte
		nonTCPOffered int
	)
	take := true
	d := &countDialer{}
	ch := channel.New(64, 1500, "")
	st, err := NewWithEndpoint(context.Background(), ch, d, Config{MTU: 1500, Logger: quiet, KeepAliveIdle: -1,
		Divert: func([]byte) bool {
			mu.Lock()
			defer mu.Unlock()
			nonTCPOffered++
			return true
		},
		DivertTCP: func(pkt []byte) bool {
			mu.Lock()
			defer mu.Unlock()
			tcpOffered = append(tcpOffered, bytes.Clone(pkt))
			return take
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	client, server := [4]byte{198, 18, 1, 2}, [4]byte{198, 18, 2, 2}
	src, dst := netip.AddrPortFrom(netip.AddrFrom4(client), 40000), netip.AddrPortFrom(netip.AddrFrom4(server), 22)
	inject(ch, echoRequest(client, server))
	injectSYN(ch, src, dst)
	mu.Lock()
	if len(tcpOffered) != 1 || tcpOffered[0][9] != uint8(header.TCPProtocolNumber) || nonTCPOffered != 1 {
		t.Errorf("offered %d TCP packets to DivertTCP and %d others to Divert, want 1 and 1", len(tcpOffered), nonTCPOffered)
	}
	take = false
	mu.Unlock()
	if got := st.Stats().Diverted; got != 2 {
		t.Errorf("Stats.Diverted %d, want 2", got)
	}
	time.Sleep(50 * time.Millisecond)
	if d.count() != 0 {
		t.Fatal("a SYN DivertTCP took reached the dialer")
	}
	injectSYN(ch, src, dst)
	for deadline := time.Now().Add(5 * time.Second); d.count() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a SYN DivertTCP left never reached the dialer")
		}
	}
}
