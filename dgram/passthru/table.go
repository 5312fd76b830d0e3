package passthru

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
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
