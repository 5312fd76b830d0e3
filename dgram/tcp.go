package dgram

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// Passed TCP (a near edge's pass rule, NearRule): the near edge sends a
// flow's packets whole, as datagrams, instead of terminating it; the far
// edge writes them out of its TUN (transparent egress) and sends the
// server's answers back. Both keep a table of those flows.

// TCP flags this package reads.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10

	tcpHeaderLen = 20
	tcpOptMSS    = 2
)

// Defaults of the passed TCP flows' tables.
const (
	// DefaultPassIdleTimeout forgets a passed TCP flow after an hour
	// without a packet either way, as home and branch routers' NAT tables
	// commonly do for established TCP; a flow that saw a FIN or RST is
	// forgotten after PassClosingTimeout.
	DefaultPassIdleTimeout = time.Hour
	PassClosingTimeout     = 30 * time.Second
	// DefaultMaxPassFlows bounds each table; a SYN that would add a flow
	// beyond it is dropped (Drops.FlowLimit). An entry is about 150 bytes.
	DefaultMaxPassFlows = 4096
)

// tcpPacket is a parsed IPv4 or IPv6 TCP packet; slices point into the
// parsed bytes.
type tcpPacket struct {
	src, dst netip.AddrPort
	flags    uint8
	l4       []byte // the TCP segment (header and payload)
	hdrLen   int    // the IP header's length
	len      int    // the IP packet's length
}

// parseTCP reads an IPv4 or IPv6 packet carrying TCP, with no fragment
// and no IPv6 extension header. It never panics, whatever b holds. The
// TCP checksum is not verified (the receiving end does).
func parseTCP(b []byte) (tcpPacket, error) {
	var p tcpPacket
	h, err := parseIP(b)
	if err != nil {
		return p, err
	}
	if h.proto != ProtoTCP {
		return p, h.unsupportedProto()
	}
	p.src, p.dst = netip.AddrPortFrom(h.src, 0), netip.AddrPortFrom(h.dst, 0)
	p.hdrLen, p.len = h.hdrLen, h.len
	l4 := b[p.hdrLen:p.len]
	if len(l4) < tcpHeaderLen {
		return p, fmt.Errorf("%w: %d bytes of TCP header", ErrMalformed, len(l4))
	}
	if off := int(l4[12]>>4) * 4; off < tcpHeaderLen || off > len(l4) {
		return p, fmt.Errorf("%w: TCP data offset %d in %d bytes", ErrMalformed, off, len(l4))
	}
	p.src = netip.AddrPortFrom(p.src.Addr(), binary.BigEndian.Uint16(l4[0:]))
	p.dst = netip.AddrPortFrom(p.dst.Addr(), binary.BigEndian.Uint16(l4[2:]))
	p.flags = l4[13]
	p.l4 = l4
	return p, nil
}

// isSYN reports a connection request (SYN without ACK).
func (p *tcpPacket) isSYN() bool { return p.flags&(tcpSYN|tcpACK) == tcpSYN }

// clampMSS lowers the MSS option of a SYN or SYN-ACK segment (a TCP
// header and payload, as parseTCP checked it) to mss, as a router does
// for a tunnel (iptables TCPMSS --clamp-mss-to-pmtu), and updates the
// checksum; other options stay as they are. It reports whether it
// changed the segment. Malformed options end the walk untouched.
func clampMSS(seg []byte, mss uint16) bool {
	if len(seg) < tcpHeaderLen || seg[13]&tcpSYN == 0 {
		return false
	}
	off := int(seg[12]>>4) * 4
	if off > len(seg) {
		return false
	}
	opts := seg[tcpHeaderLen:off]
	for i := 0; i < len(opts); {
		switch kind := opts[i]; kind {
		case 0: // end of options
			return false
		case 1: // no-op
			i++
			continue
		}
		if i+1 >= len(opts) {
			return false
		}
		l := int(opts[i+1])
		if l < 2 || i+l > len(opts) {
			return false
		}
		if opts[i] == tcpOptMSS && l == 4 {
			old := binary.BigEndian.Uint16(opts[i+2:])
			if old <= mss {
				return false
			}
			binary.BigEndian.PutUint16(opts[i+2:], mss)
			// RFC 1624: HC' = ~(~HC + ~m + m'). A value at an odd offset
			// adds byte-swapped to the ones' complement sum (RFC 1071).
			if (tcpHeaderLen+i+2)%2 == 1 {
				old, mss = old<<8|old>>8, mss<<8|mss>>8
			}
			s := uint32(^binary.BigEndian.Uint16(seg[16:])) + uint32(^old) + uint32(mss)
			for s > 0xffff {
				s = s&0xffff + s>>16
			}
			binary.BigEndian.PutUint16(seg[16:], ^uint16(s))
			return true
		}
		i += l
	}
	return false
}

// mssFor is the largest MSS whose segments, in an IP packet of dst's
// family with a TCP header without options, fit one datagram of limit
// bytes (the kind byte included); 0 if none does.
func mssFor(dst netip.Addr, limit int) uint16 {
	ip := ipv4HeaderLen
	if dst.Is6() && !dst.Is4In6() {
		ip = ipv6HeaderLen
	}
	m := limit - 1 - ip - tcpHeaderLen
	if m <= 0 {
		return 0
	}
	return uint16(min(m, 0xffff))
}

// tcpKey names a passed flow by its client's and server's endpoints.
type tcpKey struct{ client, server netip.AddrPort }

func (k tcpKey) endpoints() (client, server netip.AddrPort) { return k.client, k.server }

// flowKey is the key of a flowTable: a flow's client and server.
type flowKey interface {
	comparable
	endpoints() (client, server netip.AddrPort)
}

// flowEntry is one flow of a flowTable.
type flowEntry struct {
	start                          time.Time
	last                           atomic.Int64 // flowTable.clock of the last packet either way
	closing                        atomic.Bool  // TCP: a FIN or RST was seen
	pktUp, bytesUp, pktDn, bytesDn atomic.Uint64
}

// flowTable is a table of flows with idle expiry and a bound: the passed
// TCP flows (tcpTable), and the far edge's transparent datagram flows.
// Lookups (every packet) take a read lock; adds and sweeps the write lock.
type flowTable[K flowKey] struct {
	now     func() time.Time
	epoch   time.Time
	idle    time.Duration
	max     int
	mu      sync.RWMutex
	m       map[K]*flowEntry
	n       atomic.Int64  // len(m), for lock-free "empty?"
	expired atomic.Uint64 // entries forgotten idle, since the start
	swept   int64         // clock of the last sweep (mu)
}

// tcpTable is a table of passed TCP flows.
type tcpTable = flowTable[tcpKey]

func newTCPTable(now func() time.Time, idle time.Duration, max int) *tcpTable {
	if idle <= 0 {
		idle = DefaultPassIdleTimeout
	}
	if max <= 0 {
		max = DefaultMaxPassFlows
	}
	return newFlowTable[tcpKey](now, idle, max)
}

func newFlowTable[K flowKey](now func() time.Time, idle time.Duration, max int) *flowTable[K] {
	return &flowTable[K]{now: now, epoch: now(), idle: idle, max: max, m: make(map[K]*flowEntry)}
}

func (t *flowTable[K]) clock() int64 { return int64(t.now().Sub(t.epoch)) }

func (t *flowTable[K]) get(k K) *flowEntry {
	if t.n.Load() == 0 {
		return nil
	}
	t.mu.RLock()
	e := t.m[k]
	t.mu.RUnlock()
	if e != nil && t.isExpired(e, t.clock()) {
		t.mu.Lock()
		if t.m[k] == e {
			delete(t.m, k)
			t.n.Store(int64(len(t.m)))
			t.expired.Add(1)
		}
		t.mu.Unlock()
		return nil
	}
	return e
}

// isExpired reports whether e has been idle past its timeout at now.
func (t *flowTable[K]) isExpired(e *flowEntry, now int64) bool {
	idle := t.idle
	if e.closing.Load() {
		idle = PassClosingTimeout
	}
	return now-e.last.Load() > int64(idle)
}

// add returns k's entry, made afresh if k had none or had one closing (a
// new connection on the tuple), or nil if the table is full of live
// flows. Expired entries are swept first when a second has passed since
// the last sweep, or when the table is full.
func (t *flowTable[K]) add(k K) *flowEntry {
	now := t.clock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.m[k]; e != nil && !e.closing.Load() {
		e.last.Store(now)
		return e
	}
	if now-t.swept > int64(time.Second) || len(t.m) >= t.max {
		t.sweepLocked(now)
	}
	if _, ok := t.m[k]; !ok && len(t.m) >= t.max {
		return nil
	}
	e := &flowEntry{start: t.now()}
	e.last.Store(now)
	t.m[k] = e
	t.n.Store(int64(len(t.m)))
	return e
}

func (t *flowTable[K]) remove(k K) {
	if t.n.Load() == 0 {
		return
	}
	t.mu.Lock()
	delete(t.m, k)
	t.n.Store(int64(len(t.m)))
	t.mu.Unlock()
}

// sweep forgets the flows idle past their timeout.
func (t *flowTable[K]) sweep() {
	now := t.clock()
	t.mu.Lock()
	t.sweepLocked(now)
	t.mu.Unlock()
}

func (t *flowTable[K]) sweepLocked(now int64) {
	t.swept = now
	for k, e := range t.m {
		if t.isExpired(e, now) {
			delete(t.m, k)
			t.expired.Add(1)
		}
	}
	t.n.Store(int64(len(t.m)))
}

// seen records a packet of n bytes of e, up (client to server) or down,
// with its TCP flags (0 for other protocols).
func (t *flowTable[K]) seen(e *flowEntry, flags uint8, n int, up bool) {
	e.last.Store(t.clock())
	if flags&(tcpFIN|tcpRST) != 0 {
		e.closing.Store(true)
	}
	if up {
		e.pktUp.Add(1)
		e.bytesUp.Add(uint64(n))
	} else {
		e.pktDn.Add(1)
		e.bytesDn.Add(uint64(n))
	}
}

// PassedFlow is one passed TCP flow of a table (Near.PassedFlows).
type PassedFlow struct {
	Client, Server         netip.AddrPort
	Age, Idle              time.Duration
	Closing                bool
	PacketsUp, PacketsDown uint64
	BytesUp, BytesDown     uint64
}

// snapshot lists the flows not yet expired, in no particular order.
func (t *flowTable[K]) snapshot() []PassedFlow {
	now := t.clock()
	wall := t.now()
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]PassedFlow, 0, len(t.m))
	for k, e := range t.m {
		if t.isExpired(e, now) {
			continue
		}
		client, server := k.endpoints()
		out = append(out, PassedFlow{Client: client, Server: server, Age: wall.Sub(e.start), Idle: time.Duration(now - e.last.Load()), Closing: e.closing.Load(),
			PacketsUp: e.pktUp.Load(), PacketsDown: e.pktDn.Load(), BytesUp: e.bytesUp.Load(), BytesDown: e.bytesDn.Load()})
	}
	return out
}

// segmentTCP cuts the TCP packet pkt (parsed as p), too long for one
// datagram, into packets of at most maxLen bytes, as the kernel's GSO
// would: the TUN hands the stack aggregated segments of up to 64 KiB
// (GRO, TSO), which a passed flow must cross as the segments they were
// made of. Each piece gets the headers with its sequence number, lengths
// and checksums; FIN and PSH go with the last piece, CWR with the first.
// emit is called with each, built in buf (grown as needed, returned for
// reuse) behind a kind byte; it returns false, sending nothing, if the
// headers leave no room for data or pkt is a SYN (one with data, as TCP
// Fast Open sends, is not cut).
func segmentTCP(buf, pkt []byte, p *tcpPacket, kind byte, maxLen int, emit func([]byte)) ([]byte, bool) {
	thl := int(p.l4[12]>>4) * 4
	hl := p.hdrLen + thl
	step := maxLen - hl
	data := p.l4[thl:]
	if step <= 0 || len(data) == 0 || p.flags&tcpSYN != 0 {
		return buf, false
	}
	seq := binary.BigEndian.Uint32(p.l4[4:])
	var id uint16
	v4 := pkt[0]>>4 == 4
	if v4 {
		id = binary.BigEndian.Uint16(pkt[4:])
	}
	src, dst := p.src.Addr(), p.dst.Addr()
	for off := 0; off < len(data); off += step {
		chunk := data[off:min(off+step, len(data))]
		n := hl + len(chunk)
		buf = append(append(append(buf[:0], kind), pkt[:hl]...), chunk...)
		b := buf[1:]
		if v4 {
			binary.BigEndian.PutUint16(b[2:], uint16(n))
			binary.BigEndian.PutUint16(b[4:], id)
			id++
			binary.BigEndian.PutUint16(b[10:], 0)
			binary.BigEndian.PutUint16(b[10:], ^checksum.Checksum(b[:p.hdrLen], 0))
		} else {
			binary.BigEndian.PutUint16(b[4:], uint16(n-ipv6HeaderLen))
		}
		seg := b[p.hdrLen:]
		binary.BigEndian.PutUint32(seg[4:], seq+uint32(off))
		if off+len(chunk) < len(data) {
			seg[13] &^= tcpFIN | 0x08 // FIN, PSH: the last piece's
		}
		if off > 0 {
			seg[13] &^= 0x80 // CWR: the first piece's
		}
		binary.BigEndian.PutUint16(seg[16:], 0)
		binary.BigEndian.PutUint16(seg[16:], ^checksum.Checksum(seg, pseudoHeaderSum(src, dst, ProtoTCP, len(seg))))
		emit(buf)
	}
	return buf, true
}
