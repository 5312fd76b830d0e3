package tunnel

import (
	"crypto/sha256"
	"hash"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/internal/netsim"
	"github.com/wanopt/wanopt/internal/seed"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// testKeys returns a deterministic key pair for the client and server.
func testKeys(t testing.TB, sd uint64) (client, server crypt.PrivateKey) {
	t.Helper()
	r := seed.ChaCha8(sd ^ 0x6b657973)
	var err error
	if client, err = crypt.GenerateKey(r); err != nil {
		t.Fatal(err)
	}
	if server, err = crypt.GenerateKey(r); err != nil {
		t.Fatal(err)
	}
	return client, server
}

// pairConfigs returns matching client and server configs.
func pairConfigs(t testing.TB, sd uint64) (Config, Config) {
	ck, sk := testKeys(t, sd)
	cc := Config{
		PrivateKey:         ck,
		PeerPublicKey:      sk.PublicKey(),
		HandshakeTimestamp: 1_700_000_000_000_000_000,
		Rand:               seed.ChaCha8(sd ^ 0xc11e),
	}
	sc := Config{
		PrivateKey:    sk,
		PeerPublicKey: ck.PublicKey(),
		Rand:          seed.ChaCha8(sd ^ 0x5e7e),
	}
	return cc, sc
}

// simEnd adapts a Conn to netsim.Endpoint and runs the application's event
// handler after every input.
type simEnd struct {
	c       *Conn
	onEvent func(now monotime.Time, ev Event)
	events  []Event // every event, for assertions (datagram data not kept)
	noKeep  bool    // do not record events
	// dropNext makes the next dropNext datagrams this end sends vanish, as
	// if lost on the path (for tests that need one particular loss).
	dropNext int
	// mtu, if positive, makes every datagram this end sends that is
	// longer vanish (a path MTU black hole, in UDP payload bytes);
	// mtuDrops counts them and maxSent is the longest datagram let through.
	mtu      int
	mtuDrops int
	maxSent  int
}

var _ netsim.Endpoint = (*simEnd)(nil)

func (e *simEnd) HandleDatagram(now monotime.Time, b []byte) {
	if !e.c.IsClient() && e.c.Established() && IsHandshakeInitiation(b) {
		// What the driver does: an initiation while established goes to
		// a successor; a rekey's answer goes back to the Conn.
		if next, err := e.c.NewSuccessor(now); err == nil {
			next.HandleDatagram(now, b)
			if next.PeerRekeying() {
				e.c.AcceptRekey(next)
			}
		}
		e.drain(now)
		return
	}
	e.c.HandleDatagram(now, b)
	e.drain(now)
}

func (e *simEnd) PollTransmit(now monotime.Time, buf []byte) int {
	for {
		n := e.c.PollTransmit(now, buf)
		if n > 0 && e.mtu > 0 && n > e.mtu {
			e.mtuDrops++
			continue
		}
		if n == 0 || e.dropNext == 0 {
			e.maxSent = max(e.maxSent, n)
			return n
		}
		e.dropNext--
	}
}

func (e *simEnd) NextTimeout() monotime.Time { return e.c.NextTimeout() }

func (e *simEnd) HandleTimeout(now monotime.Time) {
	e.c.HandleTimeout(now)
	e.drain(now)
}

func (e *simEnd) drain(now monotime.Time) {
	for {
		ev, ok := e.c.PollEvent()
		if !ok {
			return
		}
		if !e.noKeep {
			kept := ev
			kept.Data = nil
			e.events = append(e.events, kept)
		}
		if e.onEvent != nil {
			e.onEvent(now, ev)
		}
	}
}

// closedErr returns the Err of the EventClosed seen, or nil.
func (e *simEnd) closedErr() error {
	for _, ev := range e.events {
		if ev.Kind == EventClosed {
			return ev.Err
		}
	}
	return nil
}

func (e *simEnd) saw(k EventKind) bool {
	for _, ev := range e.events {
		if ev.Kind == k {
			return true
		}
	}
	return false
}

// pathConfig describes a symmetric test path.
type pathConfig struct {
	rateBps    int64
	rtt        time.Duration
	queueBDPs  float64 // queue size in bandwidth-delay products (0: 2)
	lossPct    float64
	reorderPct float64
	dupPct     float64
	burst      netsim.GilbertElliott
	outages    []netsim.Outage
}

func (p pathConfig) link(sim *netsim.Sim) *netsim.Link {
	bdp := float64(p.rateBps) / 8 * p.rtt.Seconds()
	q := p.queueBDPs
	if q == 0 {
		q = 2
	}
	cfg := netsim.LinkConfig{
		RateBps:          p.rateBps,
		Delay:            p.rtt / 2,
		QueueBytes:       int(q * bdp),
		OverheadBytes:    28,
		LossPercent:      p.lossPct,
		DuplicatePercent: p.dupPct,
		Burst:            p.burst,
		Outages:          p.outages,
	}
	if p.reorderPct > 0 {
		cfg.ReorderPercent = p.reorderPct
		cfg.ReorderDelay = p.rtt / 10
	}
	return sim.NewLink(cfg)
}

// testNet is a client and a server Conn joined by a simulated path.
type testNet struct {
	sim            *netsim.Sim
	fwd, rev       *netsim.Link
	client, server *simEnd
	flow           netsim.FlowID
	cliCfg, srvCfg Config
}

// newTestNet builds the simulator, the two Conns and the flow. mod may
// adjust the configs before the Conns are made.
func newTestNet(t testing.TB, seed uint64, path pathConfig, mod func(cli, srv *Config)) *testNet {
	t.Helper()
	sim := netsim.New(seed)
	cc, sc := pairConfigs(t, seed)
	if mod != nil {
		mod(&cc, &sc)
	}
	cli, err := NewClientConn(cc, sim.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServerConn(sc, sim.Now())
	if err != nil {
		t.Fatal(err)
	}
	n := &testNet{sim: sim, client: &simEnd{c: cli}, server: &simEnd{c: srv}, cliCfg: cc, srvCfg: sc}
	n.fwd, n.rev = path.link(sim), path.link(sim)
	n.flow = sim.AddFlow(n.client, n.server, n.fwd, n.rev, netsim.FlowOptions{})
	return n
}

// runUntil runs the simulation until done or the virtual deadline.
func (n *testNet) runUntil(t testing.TB, d time.Duration, done func() bool) {
	t.Helper()
	if err := n.sim.RunUntil(done, n.sim.Now().Add(d)); err != nil {
		t.Fatalf("seed %d: at %v: %v\nclient %+v\nserver %+v", n.sim.Seed(), n.sim.Elapsed(), err,
			n.client.c.Stats(), n.server.c.Stats())
	}
}

// --- application drivers ---

// payload generates a stream's deterministic bytes and hashes them.
type payload struct {
	gen   *rand.ChaCha8
	total int
	done  int
	buf   []byte
	pend  []byte
	sum   hash.Hash
	hash  bool
}

func newPayload(sd uint64, total int, hashIt bool) *payload {
	p := &payload{gen: seed.ChaCha8(sd), total: total, buf: make([]byte, 64<<10), hash: hashIt}
	if hashIt {
		p.sum = sha256.New()
	}
	return p
}

// writer pumps a payload into a stream and closes it at the end. With
// lend it fills room lent by StreamLend (64 KiB, once 32 KiB are free)
// instead of calling StreamWrite, and counts the lends and the
// EventStreamWritable that found no room (idleWakes).
type writer struct {
	c      *Conn
	id     uint64
	p      *payload
	closed bool

	lend                      bool
	room                      [][]byte
	lends, minLent, idleWakes int
}

// pumpLent is pump with lend: it returns how many bytes it committed.
func (w *writer) pumpLent() int {
	total := 0
	for !w.closed {
		if w.p.done == w.p.total {
			if err := w.c.StreamCloseWrite(w.id); err == nil {
				w.closed = true
			}
			return total
		}
		room, err := w.c.StreamLend(w.id, w.room, 64<<10, 32<<10)
		w.room = room
		if err != nil || len(room) == 0 {
			return total
		}
		n := 0
		for _, b := range room {
			b = b[:min(len(b), w.p.total-w.p.done-n)]
			w.p.gen.Read(b)
			if w.p.hash {
				w.p.sum.Write(b)
			}
			n += len(b)
		}
		if _, err := w.c.StreamCommit(w.id, n); err != nil {
			panic(err)
		}
		w.p.done += n
		total += n
		w.lends++
		if w.p.done < w.p.total && (w.minLent == 0 || n < w.minLent) {
			w.minLent = n // the last lend may take less than it was lent
		}
	}
	return total
}

func (w *writer) pump() {
	if w.lend {
		w.pumpLent()
		return
	}
	for !w.closed {
		if len(w.p.pend) == 0 {
			if w.p.done == w.p.total {
				if err := w.c.StreamCloseWrite(w.id); err == nil {
					w.closed = true
				}
				return
			}
			n := min(len(w.p.buf), w.p.total-w.p.done)
			b := w.p.buf[:n]
			w.p.gen.Read(b)
			if w.p.hash {
				w.p.sum.Write(b)
			}
			w.p.pend = b
		}
		n, err := w.c.StreamWrite(w.id, w.p.pend)
		if err != nil || n == 0 {
			return
		}
		w.p.pend = w.p.pend[n:]
		w.p.done += n
	}
}

// reader drains a stream, hashing what it reads. With into it lends its
// buffer between reads (StreamReadInto), as the driver's parked reads do,
// and counts in taken the bytes that came that way.
type reader struct {
	c      *Conn
	id     uint64
	n      int
	fin    bool
	finAt  monotime.Time
	sum    hash.Hash
	buf    []byte
	doHash bool
	into   bool
	taken  int
	// stopAt, if positive, is where the application stops reading (a
	// client that asked for more than it reads): the bytes after it wait
	// in the stream. Not with into.
	stopAt int
}

func newReader(c *Conn, id uint64, hashIt, into bool) *reader {
	r := &reader{c: c, id: id, buf: make([]byte, 64<<10), doHash: hashIt, into: into}
	if hashIt {
		r.sum = sha256.New()
	}
	if into {
		c.StreamReadInto(id, r.buf)
	}
	return r
}

func (r *reader) read(now monotime.Time) {
	if r.stopAt > 0 && r.n >= r.stopAt {
		return
	}
	filled := 0
	if r.into {
		filled = r.c.StreamReadInto(r.id, nil)
		r.taken += filled
	}
	for !r.fin {
		buf := r.buf[filled:]
		if r.stopAt > 0 {
			buf = buf[:min(len(buf), r.stopAt-r.n-filled)]
		}
		n, fin, err := r.c.StreamRead(r.id, buf)
		short := filled+n < len(r.buf)
		filled += n
		r.deliver(filled)
		filled = 0
		if err != nil {
			return
		}
		if fin {
			r.fin, r.finAt = true, now
		}
		if short {
			break
		}
	}
	if r.into && !r.fin {
		r.c.StreamReadInto(r.id, r.buf) // took nothing: all delivered
	}
}

func (r *reader) deliver(n int) {
	if r.doHash {
		r.sum.Write(r.buf[:n])
	}
	r.n += n
}

// bulkApp drives bidirectional bulk streams on one Conn: streams it opens
// and streams the peer opens all get a writer of perStream bytes (if
// perStream > 0 for that side) and a reader.
type bulkApp struct {
	c         *Conn
	perStream int
	hash      bool
	seedBase  uint64
	writers   map[uint64]*writer
	readers   map[uint64]*reader
	openOnEst int // streams to open when established
	refused   int
	lend      bool // writers fill lent room (StreamLend) instead of writing
	into      bool // readers lend their buffers (StreamReadInto)
}

func newBulkApp(c *Conn, perStream int, hashIt bool, seedBase uint64) *bulkApp {
	return &bulkApp{c: c, perStream: perStream, hash: hashIt, seedBase: seedBase,
		writers: map[uint64]*writer{}, readers: map[uint64]*reader{}}
}

var testSrc = netip.MustParseAddrPort("198.18.0.10:40000")
var testDst = netip.MustParseAddrPort("198.19.0.20:5001")

// open opens n streams now.
func (a *bulkApp) open(now monotime.Time, n int) []uint64 {
	var ids []uint64
	for range n {
		id, err := a.c.OpenStream(now, testSrc, testDst)
		if err != nil {
			panic(err)
		}
		a.readers[id] = newReader(a.c, id, a.hash, a.into)
		ids = append(ids, id)
	}
	return ids
}

func (a *bulkApp) startWriter(id uint64) {
	if a.perStream <= 0 {
		return
	}
	w := &writer{c: a.c, id: id, p: newPayload(a.seedBase^id*0x9e3779b97f4a7c15, a.perStream, a.hash), lend: a.lend}
	a.writers[id] = w
	w.pump()
}

func (a *bulkApp) onEvent(now monotime.Time, ev Event) {
	switch ev.Kind {
	case EventEstablished:
		if a.openOnEst > 0 {
			a.open(now, a.openOnEst)
		}
	case EventStreamOpened:
		if err := a.c.AcceptStream(ev.StreamID); err != nil {
			panic(err)
		}
		a.readers[ev.StreamID] = newReader(a.c, ev.StreamID, a.hash, a.into)
		a.startWriter(ev.StreamID)
	case EventOpenResult:
		if ev.OpenCode == wire.OpenOK {
			a.startWriter(ev.StreamID)
		} else {
			a.refused++
		}
	case EventStreamWritable:
		if w := a.writers[ev.StreamID]; w != nil {
			if !w.lend {
				w.pump()
			} else if w.pumpLent() == 0 && !w.closed {
				w.idleWakes++
			}
		}
	case EventStreamReadable:
		if r := a.readers[ev.StreamID]; r != nil {
			r.read(now)
		}
	}
}

// received returns the bytes read and whether every reader saw its FIN.
func (a *bulkApp) received() (n int, allFin bool) {
	allFin = len(a.readers) > 0
	for _, r := range a.readers {
		n += r.n
		allFin = allFin && r.fin
	}
	return n, allFin
}
