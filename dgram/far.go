package dgram

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/icmp"
)

// Defaults for FarConfig.
const (
	// DefaultIdleTimeout ends a flow after a minute without a packet
	// either way: longer than the keepalive interval of long-lived UDP
	// (QUIC, SIP, VPN NAT keepalives: 15-30 s) and twice Linux
	// conntrack's 30 s for unanswered UDP. A flow that ends early only
	// costs its next packet a new socket and source port.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxFlows bounds the NAT table: each flow holds a socket, a
	// goroutine and a readBufBytes buffer (about 12 KiB in all), so 4096
	// flows are about 48 MiB at most.
	DefaultMaxFlows = 4096
	// DefaultQueueLen is how many datagrams wait for the worker; more are
	// dropped (QueueFull). The worker only parses and writes to sockets,
	// so it falls behind only when the sockets do.
	DefaultQueueLen = 1024
	// readBufBytes is a flow reader's buffer: larger than any datagram of
	// the default tunnel size, so an answer that fills it is too big
	// (TooBig).
	readBufBytes = 2048
)

// FarConfig configures a Far.
type FarConfig struct {
	// Check returns why the egress policy refuses dst, or "" if it allows
	// it (egress.Egress.Check); ICMP is checked with port 0. Required.
	Check func(dst netip.AddrPort) string
	// WritePacket, if set, writes a client's packet out of this edge's
	// TUN, whose kernel routes it to the server from the client's own
	// address (transparent egress): passed TCP (NearRule Pass), UDP and
	// ICMP echo requests, each as it came. The answers the kernel routes
	// back into the TUN come through DivertTCP (TCP) and Divert (the
	// rest). Nil: no TUN (kernel egress): UDP and echo go out of kernel
	// sockets, and passed TCP is dropped (Drops.Unsupported), with one
	// warning. pkt is only valid during the call.
	WritePacket func(pkt []byte) error
	// MaxFlows, IdleTimeout, QueueLen: see the defaults (used when 0).
	// MaxFlows and IdleTimeout bound the table of UDP and echo flows,
	// whether kernel sockets or transparent; the passed TCP flows' table
	// has its own (DefaultMaxPassFlows, DefaultPassIdleTimeout).
	MaxFlows    int
	IdleTimeout time.Duration
	QueueLen    int
	// Logger receives events; nil discards them.
	Logger *slog.Logger

	// now is the clock; nil: time.Now (tests move it).
	now func() time.Time
}

// Far is a far edge's end: it takes the clients' packets from the tunnel
// (Deliver), sends them to the servers from kernel sockets, one per flow,
// and sends the answers back through the tunnel of the moment
// (SetTunnel). One worker goroutine handles the packets and expires idle
// flows; each flow has a reader goroutine. Close stops them all.
type Far struct {
	cfg    FarConfig
	log    *slog.Logger
	ctr    Counters
	start  time.Time
	sender atomic.Pointer[senderBox]

	in   chan []byte // Deliver → worker
	free chan []byte // worker → Deliver: buffers for reuse
	stop chan struct{}
	done chan struct{} // closed when the worker returned
	once sync.Once
	wg   sync.WaitGroup // flow readers

	nflows     atomic.Int64
	warnedPing atomic.Bool
	warnedSock atomic.Bool
	warnedTCP  atomic.Bool
	pass       *tcpTable         // passed TCP flows, learnt from their packets up
	tr         *flowTable[dgKey] // transparent UDP and echo flows (WritePacket)
	bufs       sync.Pool         // *[]byte: DivertTCP's and Divert's datagrams

	// The worker's own.
	udp  map[udpKey]*farFlow
	icmp map[icmpKey]*farFlow
}

type senderBox struct{ s Sender }

type udpKey struct{ client, server netip.AddrPort }

type icmpKey struct {
	client, server netip.Addr
	id             uint16
}

// dgKey names a transparent datagram flow: a UDP flow by its endpoints,
// an echo flow by its client's address with the echo identifier as the
// port, and its server's address with port 0. proto is the packet's
// (ProtoUDP, ProtoICMP or ProtoICMPv6).
type dgKey struct {
	proto          uint8
	client, server netip.AddrPort
}

func (k dgKey) endpoints() (client, server netip.AddrPort) { return k.client, k.server }

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

// NewFar starts a Far: its worker runs until Close.
func NewFar(cfg FarConfig) *Far {
	if cfg.MaxFlows <= 0 {
		cfg.MaxFlows = DefaultMaxFlows
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = DefaultQueueLen
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	f := &Far{cfg: cfg, log: cfg.Logger, start: cfg.now(),
		in: make(chan []byte, cfg.QueueLen), free: make(chan []byte, cfg.QueueLen),
		stop: make(chan struct{}), done: make(chan struct{}),
		udp: make(map[udpKey]*farFlow), icmp: make(map[icmpKey]*farFlow)}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	f.pass = newTCPTable(cfg.now, 0, 0)
	f.tr = newFlowTable[dgKey](cfg.now, cfg.IdleTimeout, cfg.MaxFlows)
	f.bufs.New = func() any { b := make([]byte, 0, readBufBytes); return &b }
	go f.run()
	return f
}

// SetTunnel sets the tunnel answers go through; nil while none is up
// (answers are then dropped, counted as NoTunnel).
func (f *Far) SetTunnel(s Sender) {
	if s == nil {
		f.sender.Store(nil)
		return
	}
	f.sender.Store(&senderBox{s})
}

// Stats returns the far side's counters and the size of its table.
func (f *Far) Stats() Stats {
	s := f.ctr.Stats()
	s.Flows = int(f.nflows.Load() + f.tr.n.Load())
	s.FlowsExpired += f.tr.expired.Load()
	s.TCPFlows = int(f.pass.n.Load())
	return s
}

// PassedFlows lists the passed TCP flows this far side sends on (learnt
// from their packets), not yet forgotten, in no particular order.
func (f *Far) PassedFlows() []PassedFlow { return f.pass.snapshot() }

// Deliver queues a KindUp datagram's packet (the kind byte removed) for
// the worker; p is copied. It never blocks: it is called on the tunnel's
// driver goroutine.
func (f *Far) Deliver(p []byte) {
	var b []byte
	select {
	case b = <-f.free:
	default:
		b = make([]byte, 0, readBufBytes)
	}
	b = append(b[:0], p...)
	select {
	case f.in <- b:
	default:
		f.ctr.queueFull.Add(1)
		f.recycle(b)
	}
}

func (f *Far) recycle(b []byte) {
	select {
	case f.free <- b[:0]:
	default:
	}
}

// Close stops the worker, closes every flow's socket and waits for the
// readers. Idempotent.
func (f *Far) Close() {
	f.once.Do(func() { close(f.stop) })
	<-f.done
	f.wg.Wait()
}

// clock is the time since start, as flows record it.
func (f *Far) clock() int64 { return int64(f.cfg.now().Sub(f.start)) }

// run is the worker goroutine.
func (f *Far) run() {
	defer close(f.done)
	tick := time.NewTicker(f.cfg.IdleTimeout / 4)
	defer tick.Stop()
	for {
		select {
		case b := <-f.in:
			f.handle(b)
			f.recycle(b)
		case <-tick.C:
			f.expire()
			f.pass.sweep()
			f.tr.sweep()
		case <-f.stop:
			for k, fl := range f.udp {
				f.closeFlow(fl)
				delete(f.udp, k)
			}
			for k, fl := range f.icmp {
				f.closeFlow(fl)
				delete(f.icmp, k)
			}
			return
		}
	}
}

// handle sends one client packet on (worker).
func (f *Far) handle(b []byte) {
	if proto, ok := Protocol(b); ok && proto == ProtoTCP {
		f.handleTCP(b)
		return
	}
	p, err := Parse(b)
	if err != nil {
		f.ctr.parseError(err)
		return
	}
	if f.cfg.WritePacket != nil {
		f.handleTransparent(b, &p)
		return
	}
	now := f.clock()
	switch {
	case p.IsUDP():
		k := udpKey{p.SrcAddrPort(), p.DstAddrPort()}
		fl := f.udp[k]
		if fl == nil {
			if fl = f.open(&p); fl == nil {
				return
			}
			f.udp[k] = fl
		}
		if _, err := fl.udp.Write(p.Payload); err != nil {
			f.ctr.socketErrors.Add(1)
			f.log.Debug("UDP send failed", "client", fl.client, "server", fl.server, "err", err)
			return
		}
		fl.last.Store(now)
	case p.IsEchoRequest():
		k := icmpKey{p.Src, p.Dst, p.ID}
		fl := f.icmp[k]
		if fl == nil {
			if fl = f.open(&p); fl == nil {
				return
			}
			f.icmp[k] = fl
		}
		// The kernel sets the identifier (the socket's) and the checksum.
		if _, err := fl.ping.WriteTo(p.L4, fl.pingDst); err != nil {
			f.ctr.socketErrors.Add(1)
			f.log.Debug("ICMP echo send failed", "client", p.Src, "server", p.Dst, "err", err)
			return
		}
		fl.last.Store(now)
	default:
		f.ctr.unsupported.Add(1)
		return
	}
	f.ctr.up(p.Proto, p.Len)
}

// open makes a flow for p's client and server if the policy allows the
// server and the table has room, and starts its reader; nil if not (the
// drop is counted).
func (f *Far) open(p *Packet) *farFlow {
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
	hl := HeaderLen(fl.server.Addr())
	off := 1 + hl // the payload's place: after the kind byte and headers
	buf[0] = KindDown
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
			n, _, err = fl.ping.ReadFrom(buf[off-l4HeaderLen:])
			n -= l4HeaderLen
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
			err = PutUDP(pkt, fl.server, fl.client)
		} else {
			icmpHdr := buf[off-l4HeaderLen : off]
			typ := icmpHdr[0]
			if typ != ICMPEchoReply && typ != ICMPv6EchoReply {
				continue // not an answer to the echo (none is expected)
			}
			seq := binary.BigEndian.Uint16(icmpHdr[6:])
			err = PutEcho(pkt, fl.server.Addr(), fl.client.Addr(), typ, fl.id, seq)
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

// handleTCP writes a passed TCP packet out of the TUN (worker). A flow
// is learnt from its first packet (any but a RST, so that a flow outlives
// a restart of this edge), if the policy allows its server.
func (f *Far) handleTCP(b []byte) {
	if f.cfg.WritePacket == nil {
		f.ctr.unsupported.Add(1)
		if f.warnedTCP.CompareAndSwap(false, true) {
			f.log.Warn("the near edge passes TCP unterminated (--near-rule pass:tcp:...), which this edge can only send on with --egress transparent (its own TUN); dropping those packets, further ones only counted")
		}
		return
	}
	p, err := parseTCP(b)
	if err != nil {
		f.ctr.parseError(err)
		return
	}
	k := tcpKey{p.src, p.dst}
	e := f.pass.get(k)
	if e == nil || (p.isSYN() && e.closing.Load()) {
		if p.flags&tcpRST != 0 {
			f.ctr.notAllowed.Add(1)
			return
		}
		if why := f.cfg.Check(netip.AddrPortFrom(p.dst.Addr().Unmap(), p.dst.Port())); why != "" {
			f.ctr.notAllowed.Add(1)
			f.log.Debug("passed TCP destination refused", "src", p.src, "dst", p.dst, "why", why)
			return
		}
		if e = f.pass.add(k); e == nil {
			f.ctr.flowLimit.Add(1)
			return
		}
	}
	f.pass.seen(e, p.flags, p.len, true)
	if err := f.cfg.WritePacket(b[:p.len]); err != nil {
		f.ctr.socketErrors.Add(1)
		return
	}
	f.ctr.up(ProtoTCP, p.len)
}

// DivertTCP is the far edge's stack's Config.DivertTCP: it takes the TCP
// packets from servers that answer a passed flow (learnt by the packets
// up), sending each whole to the near edge, a SYN-ACK's MSS clamped to
// what a datagram holds; it leaves the rest to the stack. It does not
// block, and returns at once while no flow is passed.
func (f *Far) DivertTCP(pkt []byte) bool {
	if f.pass.n.Load() == 0 {
		return false
	}
	p, err := parseTCP(pkt)
	if err != nil {
		return false
	}
	e := f.pass.get(tcpKey{p.dst, p.src})
	if e == nil {
		return false
	}
	f.pass.seen(e, p.flags, p.len, false)
	box := f.sender.Load()
	if box == nil {
		f.ctr.noTunnel.Add(1)
		return true
	}
	limit := box.s.MaxDatagramBytes()
	bp := f.bufs.Get().(*[]byte)
	if 1+p.len > limit {
		// An aggregate of the server's segments (the TUN's offload): sent
		// as the segments that fit.
		b, ok := segmentTCP((*bp)[:0], pkt, &p, KindDown, limit-1, func(d []byte) {
			if err := box.s.SendDatagram(d); err != nil {
				countSendError(&f.ctr, err)
				return
			}
			f.ctr.down(ProtoTCP, len(d)-1)
		})
		*bp = b
		f.bufs.Put(bp)
		if !ok {
			f.ctr.tooBig.Add(1)
		}
		return true
	}
	b := append(append((*bp)[:0], KindDown), pkt[:p.len]...)
	if p.flags&tcpSYN != 0 {
		if mss := mssFor(p.src.Addr(), limit); mss > 0 {
			clampMSS(b[1+p.hdrLen:], mss)
		}
	}
	err = box.s.SendDatagram(b)
	*bp = b
	f.bufs.Put(bp)
	if err != nil {
		countSendError(&f.ctr, err)
		return true
	}
	f.ctr.down(ProtoTCP, p.len)
	return true
}

// handleTransparent writes a client's UDP packet or echo request, parsed
// as p, out of the TUN as it came, source, TTL and checksums the client's
// (worker). A flow is learnt from its first packet if the policy allows
// its server and the table has room.
func (f *Far) handleTransparent(b []byte, p *Packet) {
	var k dgKey
	switch {
	case p.IsUDP():
		k = dgKey{ProtoUDP, p.SrcAddrPort(), p.DstAddrPort()}
	case p.IsEchoRequest():
		k = dgKey{p.Proto, netip.AddrPortFrom(p.Src, p.ID), netip.AddrPortFrom(p.Dst, 0)}
	default:
		f.ctr.unsupported.Add(1)
		return
	}
	e := f.tr.get(k)
	if e == nil {
		dst := netip.AddrPortFrom(p.Dst.Unmap(), p.DstPort)
		if why := f.cfg.Check(dst); why != "" {
			f.ctr.notAllowed.Add(1)
			f.log.Debug("datagram destination refused", "src", p.SrcAddrPort(), "dst", dst, "proto", p.Proto, "why", why)
			return
		}
		if e = f.tr.add(k); e == nil {
			f.ctr.flowLimit.Add(1)
			return
		}
		f.ctr.flowsOpened.Add(1)
		f.log.Debug("transparent datagram flow opened", "client", k.client, "server", k.server, "proto", p.Proto)
	}
	f.tr.seen(e, 0, p.Len, true)
	if err := f.cfg.WritePacket(b[:p.Len]); err != nil {
		f.ctr.socketErrors.Add(1)
		return
	}
	f.ctr.up(p.Proto, p.Len)
}

// Divert is the far edge's stack's Config.Divert with transparent egress
// (WritePacket): it takes the packets from the TUN that answer a
// transparent flow — UDP, echo replies, ICMP errors about a flow's
// packets, a passed TCP flow's too — and sends each, whole, to the near
// edge. An answer of those kinds to no known flow is dropped
// (Drops.Unmatched) rather than left to the stack, which would answer for
// the client; the rest is left to the stack. It does not block; without
// WritePacket it takes nothing.
func (f *Far) Divert(pkt []byte) bool {
	if f.cfg.WritePacket == nil {
		return false
	}
	return DivertAmong(pkt, f)
}

// DivertAmong is Divert for a hub's far sides, one a branch (all with
// WritePacket): the packet is read once and goes to the far side whose
// table holds the flow it answers. An answer of no flow in any is counted
// (Drops.Unmatched) by the first far side, the hub's first branch.
func DivertAmong(pkt []byte, fars ...*Far) bool {
	if len(fars) == 0 {
		return false
	}
	a, ok := readAnswer(pkt)
	if !ok {
		return false
	}
	for _, f := range fars {
		if f.take(pkt, &a) {
			return true
		}
	}
	if a.aboutTCP {
		return false // about the stack's own connection
	}
	fars[0].ctr.unmatched.Add(1)
	return true
}

// answer is what readAnswer read of a packet that may answer a flow.
type answer struct {
	// aboutTCP: an ICMP error about a TCP segment (tk); else the
	// datagram flow dk.
	aboutTCP bool
	tk       tcpKey
	dk       dgKey
	n        int   // the packet's length
	proto    uint8 // the protocol it is counted as
}

// readAnswer reads pkt, from the TUN, as an answer to a flow the far
// side may have sent on: UDP, an echo reply, or an ICMP error about UDP,
// an echo request or TCP; false for anything else (the stack's).
func readAnswer(pkt []byte) (answer, bool) {
	var a answer
	proto, ok := Protocol(pkt)
	if !ok {
		return a, false
	}
	switch {
	case maybeICMPError(pkt, proto):
		ie, err := parseICMPError(pkt)
		if err != nil {
			return a, false // the stack's to use or drop, as before
		}
		a.n, a.proto = ie.len, ProtoICMP // counted as ICMP, whatever it is about
		if ie.proto == ProtoTCP {
			a.aboutTCP, a.tk = true, tcpKey{ie.from, ie.to}
		} else {
			a.dk = dgKey{ie.proto, ie.from, ie.to}
		}
		return a, true
	case proto == ProtoUDP || proto == ProtoICMP || proto == ProtoICMPv6:
		p, err := Parse(pkt)
		if err != nil {
			return a, false // other ICMP, fragments, malformed: the stack's
		}
		switch {
		case p.IsUDP():
			a.dk = dgKey{ProtoUDP, p.DstAddrPort(), p.SrcAddrPort()}
		case p.IsEchoReply():
			a.dk = dgKey{p.Proto, netip.AddrPortFrom(p.Dst, p.ID), netip.AddrPortFrom(p.Src, 0)}
		default:
			return a, false // an echo request to a client's address: the stack's
		}
		a.n, a.proto = p.Len, p.Proto
		return a, true
	}
	return a, false
}

// take sends pkt, read as a, to the near edge if it answers a flow in
// f's tables, and reports whether it did (a drop on the way counted).
func (f *Far) take(pkt []byte, a *answer) bool {
	if a.aboutTCP {
		e := f.pass.get(a.tk)
		if e == nil {
			return false
		}
		f.pass.seen(e, 0, 0, false)
	} else {
		e := f.tr.get(a.dk)
		if e == nil {
			return false
		}
		f.tr.seen(e, 0, a.n, false)
	}
	box := f.sender.Load()
	if box == nil {
		f.ctr.noTunnel.Add(1)
		return true
	}
	if 1+a.n > box.s.MaxDatagramBytes() {
		f.ctr.tooBig.Add(1)
		return true
	}
	bp := f.bufs.Get().(*[]byte)
	b := append(append((*bp)[:0], KindDown), pkt[:a.n]...)
	err := box.s.SendDatagram(b)
	*bp = b
	f.bufs.Put(bp)
	if err != nil {
		countSendError(&f.ctr, err)
		return true
	}
	f.ctr.down(a.proto, a.n)
	return true
}
