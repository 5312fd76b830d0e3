package dgram

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/wanopt/wanopt/dgram/packet"
	"golang.org/x/net/icmp"
)

// The far edge's socket NAT: each UDP or echo flow owns a kernel socket
// connected to its server (kernel egress), and a reader goroutine that
// turns the server's answers into IP packets for the client.

// farFlow is one entry of the NAT table.
type farFlow struct {
	client, server netip.AddrPort // ICMP: ports 0
	proto          uint8
	id             uint16       // ICMP: the client's echo identifier
	udp            *net.UDPConn // UDP: connected to server
	ping           *icmp.PacketConn
	pingDst        net.Addr     // ICMP: server, as WriteTo wants it
	last           atomic.Int64 // time of the last packet either way (Far.clock)
	closed         atomic.Bool
}

// open makes a flow for p's client and server if the policy allows the
// server and the table has room, and starts its reader; nil if not (the
// drop is counted).
func (f *Far) open(p *packet.Packet) *farFlow {
	dst := netip.AddrPortFrom(p.Dst.Unmap(), p.DstPort)
	if why := f.cfg.Check(dst); why != "" {
		f.ctr.notAllowed.Add(1)
		f.log.Debug("datagram destination refused", "src", p.SrcAddrPort(), "dst", dst, "proto", p.Proto, "why", why)
		return nil
	}
	if f.nflows.Load() >= int64(f.cfg.MaxFlows) {
		f.ctr.flowLimit.Add(1)
		return nil
	}
	fl := &farFlow{client: p.SrcAddrPort(), server: dst, proto: p.Proto, id: p.ID}
	var err error
	if p.IsUDP() {
		fl.udp, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		if err != nil {
			f.ctr.socketErrors.Add(1)
			if f.warnedSock.CompareAndSwap(false, true) {
				f.log.Warn("cannot open a UDP socket to a server; further failures are only counted", "dst", dst, "err", err)
			}
			return nil
		}
	} else {
		network, laddr := "udp4", "0.0.0.0"
		if dst.Addr().Is6() {
			network, laddr = "udp6", "::"
		}
		fl.ping, err = icmp.ListenPacket(network, laddr)
		if err != nil {
			f.ctr.socketErrors.Add(1)
			if f.warnedPing.CompareAndSwap(false, true) {
				f.log.Warn("cannot open a ping socket, so pings through the tunnel are dropped: allow this process's group in the sysctl net.ipv4.ping_group_range (e.g. 'sysctl -w net.ipv4.ping_group_range=\"0 2147483647\"')",
					"err", err)
			}
			return nil
		}
		fl.pingDst = &net.UDPAddr{IP: dst.Addr().AsSlice()}
	}
	fl.last.Store(f.clock())
	f.nflows.Add(1)
	f.ctr.flowsOpened.Add(1)
	f.wg.Add(1)
	go f.read(fl)
	f.log.Debug("datagram flow opened", "client", fl.client, "server", fl.server, "proto", fl.proto)
	return fl
}

// closeFlow closes fl's socket, which ends its reader (worker).
func (f *Far) closeFlow(fl *farFlow) {
	fl.closed.Store(true)
	if fl.udp != nil {
		fl.udp.Close()
	} else {
		fl.ping.Close()
	}
	f.nflows.Add(-1)
}

// expire closes the flows idle for IdleTimeout (worker).
func (f *Far) expire() {
	limit := f.clock() - int64(f.cfg.IdleTimeout)
	for k, fl := range f.udp {
		if fl.last.Load() < limit {
			f.closeFlow(fl)
			delete(f.udp, k)
			f.ctr.flowsExpire.Add(1)
		}
	}
	for k, fl := range f.icmp {
		if fl.last.Load() < limit {
			f.closeFlow(fl)
			delete(f.icmp, k)
			f.ctr.flowsExpire.Add(1)
		}
	}
}

// read is a flow's reader goroutine: it turns each answer from the server
// into an IP packet to the client and sends it through the tunnel.
func (f *Far) read(fl *farFlow) {
	defer f.wg.Done()
	buf := make([]byte, readBufBytes)
	hl := packet.HeaderLen(fl.server.Addr())
	off := 1 + hl // the payload's place: after the kind byte and headers
	buf[0] = packet.KindDown
	for {
		var (
			n   int
			err error
		)
		if fl.udp != nil {
			n, err = fl.udp.Read(buf[off:])
		} else {
			// A ping socket reads the ICMP message, header first: it
			// lands where PutEcho writes the ICMP header.
			n, _, err = fl.ping.ReadFrom(buf[off-packet.L4HeaderLen:])
			n -= packet.L4HeaderLen
		}
		if err != nil {
			if fl.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// A connected UDP socket reports an ICMP error from the
			// server's side (ECONNREFUSED) on its next read, once.
			f.ctr.socketErrors.Add(1)
			continue
		}
		if n < 0 {
			f.ctr.malformed.Add(1)
			continue
		}
		fl.last.Store(f.clock())
		if off+n >= len(buf) {
			f.ctr.tooBig.Add(1) // it may have been cut short
			continue
		}
		pkt := buf[1 : off+n]
		if fl.udp != nil {
			err = packet.PutUDP(pkt, fl.server, fl.client)
		} else {
			icmpHdr := buf[off-packet.L4HeaderLen : off]
			typ := icmpHdr[0]
			if typ != packet.ICMPEchoReply && typ != packet.ICMPv6EchoReply {
				continue // not an answer to the echo (none is expected)
			}
			seq := binary.BigEndian.Uint16(icmpHdr[6:])
			err = packet.PutEcho(pkt, fl.server.Addr(), fl.client.Addr(), typ, fl.id, seq)
		}
		if err != nil {
			f.ctr.malformed.Add(1)
			continue
		}
		f.send(fl.proto, buf[:off+n])
	}
}

// send sends one KindDown datagram through the tunnel of the moment.
func (f *Far) send(proto uint8, b []byte) {
	box := f.sender.Load()
	if box == nil {
		f.ctr.noTunnel.Add(1)
		return
	}
	if len(b) > box.s.MaxDatagramBytes() {
		f.ctr.tooBig.Add(1)
		return
	}
	if err := box.s.SendDatagram(b); err != nil {
		countSendError(&f.ctr, err)
		return
	}
	f.ctr.down(proto, len(b)-1)
}
