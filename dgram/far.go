package dgram

import (
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanopt/wanopt/dgram/packet"
	"github.com/wanopt/wanopt/dgram/passthru"
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
	// address (transparent egress): passed TCP (a near rule passes it), UDP and
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
	pt         *passthru.Far // passed TCP, and transparent UDP and echo flows

	// The worker's own.
	udp  map[udpKey]*farFlow
	icmp map[icmpKey]*farFlow
}

type senderBox struct{ s packet.Sender }

type udpKey struct{ client, server netip.AddrPort }

type icmpKey struct {
	client, server netip.Addr
	id             uint16
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
	f.pt = passthru.NewFar(passthru.FarConfig{Check: cfg.Check, WritePacket: cfg.WritePacket, Sender: f.tunnel, Count: (*counting)(&f.ctr),
		MaxFlows: cfg.MaxFlows, IdleTimeout: cfg.IdleTimeout, Logger: f.log, Now: cfg.now})
	go f.run()
	return f
}

// SetTunnel sets the tunnel answers go through; nil while none is up
// (answers are then dropped, counted as NoTunnel).
func (f *Far) SetTunnel(s packet.Sender) {
	if s == nil {
		f.sender.Store(nil)
		return
	}
	f.sender.Store(&senderBox{s})
}

// Stats returns the far side's counters and the size of its table.
func (f *Far) Stats() Stats {
	s := f.ctr.Stats()
	s.Flows = int(f.nflows.Load()) + f.pt.Flows()
	s.FlowsExpired += f.pt.Expired()
	s.TCPFlows = f.pt.TCPFlows()
	return s
}

// PassedFlows lists the passed TCP flows this far side sends on (learnt
// from their packets), not yet forgotten, in no particular order.
func (f *Far) PassedFlows() []passthru.PassedFlow { return f.pt.PassedFlows() }

// tunnel is the tunnel of the moment, nil while none is up.
func (f *Far) tunnel() packet.Sender {
	if box := f.sender.Load(); box != nil {
		return box.s
	}
	return nil
}

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
			f.pt.Sweep()
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
	if proto, ok := packet.Protocol(b); ok && proto == packet.ProtoTCP {
		f.pt.HandleTCP(b)
		return
	}
	p, err := packet.Parse(b)
	if err != nil {
		f.ctr.parseError(err)
		return
	}
	if f.cfg.WritePacket != nil {
		f.pt.HandleTransparent(b, &p)
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

// DivertTCP is the far edge's stack's Config.DivertTCP: it takes the
// servers' answers to passed TCP flows (passthru.Far.DivertTCP).
func (f *Far) DivertTCP(pkt []byte) bool { return f.pt.DivertTCP(pkt) }

// Divert is the far edge's stack's Config.Divert with transparent egress
// (WritePacket): it takes the answers to the flows this side sent out of
// the TUN (passthru.Far.Divert); without WritePacket it takes nothing.
func (f *Far) Divert(pkt []byte) bool { return f.pt.Divert(pkt) }

// DivertAmong is Divert for a hub's far sides, one a branch (all with
// WritePacket): the packet goes to the far side whose table holds the
// flow it answers; an answer of no flow in any is counted
// (Drops.Unmatched) by the first far side, the hub's first branch.
func DivertAmong(pkt []byte, fars ...*Far) bool {
	return passthru.DivertAmong(pkt, fars, (*Far).passthru)
}

func (f *Far) passthru() *passthru.Far { return f.pt }
