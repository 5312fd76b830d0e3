package driver

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel"
	"github.com/wanopt/wanopt/tunnel/bind"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// Hub serves the tunnels of several peers on one UDP socket, as a far
// edge with many branches does: each peer's tunnel is an ordinary server
// Tunnel (Listen) whose socket is the hub's Bind for that peer. The hub's
// reader hands each datagram to the peer it belongs to:
//
//   - a handshake initiation goes through the hub's handshake gate (mac1,
//     cookies and rate limits, before any Diffie-Hellman; the peers'
//     tunnels run with Config.NoGate), then to the peer whose static key it
//     carries; one from a key no Bind was made for is dropped and counted;
//   - a data packet goes to the peer whose session index it names. The hub
//     learns each peer's indices from the handshake responses its tunnel
//     sends. Data for an index nobody holds (a client of the hub's former
//     life, before a restart) gets a REJECT, so that client handshakes
//     again at once.
//
// Identifying an initiation's key costs the two Diffie-Hellman operations
// its handshake costs, which the peer's tunnel then repeats: only
// initiations the gate admitted pay it.
type Hub struct {
	bc       bind.Conn
	local    crypt.PrivateKey
	localPub crypt.PublicKey
	log      *slog.Logger
	refusals *Refusals // nil: counted in stats only

	writeMu sync.Mutex // the socket's writers: every peer's tunnel and the reader

	mu    sync.Mutex
	peers map[crypt.PublicKey]*hubConn
	index map[uint32]*hubConn // the peers' session indices, as their tunnels answered handshakes

	gate      *tunnel.HandshakeGate // reader only
	gateStats tunnel.GateStats      // a copy of gate's, under mu
	lastRej   monotime.Time         // reader only
	reply     [1][]byte             // reader only: the cookie or REJECT it sends
	done      chan struct{}
	closeOnce sync.Once

	stats hubCounters
}

type hubCounters struct {
	unknownKey, unknownIndex, rejects, queueDrops, malformed atomic.Uint64
}

// HubStats counts what a Hub did with datagrams it could not deliver.
type HubStats struct {
	// UnknownKey counts admitted initiations from keys with no Bind;
	// UnknownIndex data packets for no peer's session (answered with a
	// REJECT at most once per rejectInterval: Rejects); QueueDrops
	// datagrams dropped because a peer's tunnel was behind; Malformed
	// datagrams of no known type.
	UnknownKey, UnknownIndex, Rejects, QueueDrops, Malformed uint64
	// Gate counts the handshake gate's verdicts.
	Gate tunnel.GateStats
}

// hubQueueLen is how many datagrams wait for one peer's tunnel; beyond it
// they are dropped, as a full socket buffer would drop them.
const hubQueueLen = 1024

// indicesPerPeer bounds the session indices remembered per peer: the
// current session, the one a rekey or restart replaces, and a pending one.
const indicesPerPeer = 4

// HubOptions configure a Hub.
type HubOptions struct {
	// Logger receives the hub's events; nil discards them.
	Logger *slog.Logger
	// Refusals, if set, records the initiations the hub refuses (its
	// gate's, and those from keys with no Bind); give the peers' Listens
	// the same one (Config.Refusals).
	Refusals *Refusals
}

// NewHub serves bc, a UDP socket, for the server whose static key is
// local. The hub owns bc and closes it on Close. It starts its reader at
// once; datagrams for peers without a Bind are dropped.
func NewHub(bc bind.Conn, local crypt.PrivateKey, opts HubOptions) *Hub {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Hub{bc: bc, local: local, localPub: local.PublicKey(), log: log, refusals: opts.Refusals,
		peers: make(map[crypt.PublicKey]*hubConn), index: make(map[uint32]*hubConn),
		gate: tunnel.NewHandshakeGate(local, rand.Reader), done: make(chan struct{})}
	go h.readLoop()
	return h
}

// Bind returns the socket of peer's tunnel: pass it as Config.Bind to
// Listen, with Config.NoGate set. The tunnel closes it when it ends; call
// Bind again for the next Listen. There is at most one open Bind per peer.
func (h *Hub) Bind(peer crypt.PublicKey) (bind.Conn, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.done:
		return nil, fmt.Errorf("driver: hub: %w", net.ErrClosed)
	default:
	}
	if _, ok := h.peers[peer]; ok {
		return nil, fmt.Errorf("driver: hub: peer %v already has an open socket (close its tunnel first)", peer)
	}
	c := &hubConn{h: h, peer: peer, q: make(chan hubDatagram, hubQueueLen), closed: make(chan struct{})}
	h.peers[peer] = c
	return c, nil
}

// Close closes the socket and every peer's Bind.
func (h *Hub) Close() error {
	var err error
	h.closeOnce.Do(func() {
		close(h.done)
		err = h.bc.Close()
		h.mu.Lock()
		for _, c := range h.peers {
			c.shut()
		}
		h.mu.Unlock()
	})
	return err
}

// LocalAddr is the socket's address.
func (h *Hub) LocalAddr() bind.Endpoint { return h.bc.LocalAddr() }

// Stats returns the hub's counters.
func (h *Hub) Stats() HubStats {
	h.mu.Lock()
	g := h.gateStats
	h.mu.Unlock()
	return HubStats{UnknownKey: h.stats.unknownKey.Load(), UnknownIndex: h.stats.unknownIndex.Load(),
		Rejects: h.stats.rejects.Load(), QueueDrops: h.stats.queueDrops.Load(), Malformed: h.stats.malformed.Load(), Gate: g}
}

// readLoop reads the socket and hands each datagram to its peer until the
// socket closes.
func (h *Hub) readLoop() {
	n := h.bc.BatchSize()
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, hubBufLen)
	}
	sizes, eps := make([]int, n), make([]bind.Endpoint, n)
	for {
		k, err := h.bc.ReadBatch(bufs, sizes, eps)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a kernel error leaves the socket usable
		}
		now := monotime.Now()
		for i := range k {
			h.route(now, bufs[i][:sizes[i]], eps[i])
		}
	}
}

// hubBufLen holds the largest datagram the tunnels behind a hub send
// (the edge's use tunnel.Config's default); the socket drops a longer one
// and counts it, as a tunnel's own socket does.
const hubBufLen = tunnel.DefaultMaxUDPPayloadBytes

// HubMaxDatagramBytes is the largest datagram a hub receives: its tunnels'
// MaxUDPPayloadBytes, the ceiling of their path MTU search, should not
// exceed it.
const HubMaxDatagramBytes = hubBufLen

// route hands p, from ep, to its peer, or answers it (a cookie, a REJECT)
// or drops it.
func (h *Hub) route(now monotime.Time, p []byte, ep bind.Endpoint) {
	switch {
	case tunnel.IsHandshakeInitiation(p):
		before := h.gate.Stats()
		v, out := h.gate.Admit(now, p, ep, h.reply[0][:0])
		h.reply[0] = out
		h.mu.Lock()
		h.gateStats = h.gate.Stats()
		h.mu.Unlock()
		if v == tunnel.GateCookie {
			h.write(h.reply[:], ep)
		}
		if v == tunnel.GateDrop && h.refusals != nil {
			h.refusals.addGate(time.Now(), ep, before, h.gateStats)
		}
		if v != tunnel.GateAdmit {
			return
		}
		key, err := crypt.InitiatorKey(h.local, h.localPub, p[wire.HandshakeInitHeaderLen:wire.HandshakeInitHeaderLen+crypt.Message1Size])
		if err != nil {
			h.stats.unknownKey.Add(1)
			h.refusals.add(time.Now(), ep, RefusedUnauthenticated, crypt.PublicKey{})
			return
		}
		h.mu.Lock()
		c := h.peers[key]
		h.mu.Unlock()
		if c == nil {
			h.stats.unknownKey.Add(1)
			h.refusals.add(time.Now(), ep, RefusedUnknownKey, key)
			return
		}
		c.deliver(p, ep)
	case len(p) >= wire.MinDataHeaderLen && wire.PacketType(p[0]&0xf0) == wire.PacketData:
		idx := binary.BigEndian.Uint32(p[1:5])
		h.mu.Lock()
		c := h.index[idx]
		h.mu.Unlock()
		if c != nil {
			c.deliver(p, ep)
			return
		}
		h.stats.unknownIndex.Add(1)
		if h.lastRej != 0 && now.Sub(h.lastRej) < rejectInterval {
			return
		}
		h.lastRej = now
		h.reply[0] = wire.AppendHeader(h.reply[0][:0], &wire.Header{Type: wire.PacketReject, SenderIndex: idx})
		h.write(h.reply[:], ep)
		h.stats.rejects.Add(1)
	default:
		h.stats.malformed.Add(1) // a server receives no other type
	}
}

// write sends bufs to ep on the shared socket.
func (h *Hub) write(bufs [][]byte, ep bind.Endpoint) error {
	h.writeMu.Lock()
	defer h.writeMu.Unlock()
	return h.bc.WriteBatch(bufs, ep)
}

// learn records the session index a peer's tunnel chose, from the
// handshake response it sends.
func (h *Hub) learn(c *hubConn, p []byte) {
	if len(p) < wire.HandshakeRespHeaderLen || wire.PacketType(p[0]) != wire.PacketHandshakeResp {
		return
	}
	idx := binary.BigEndian.Uint32(p[1:5])
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.peers[c.peer] != c || h.index[idx] == c {
		return
	}
	h.index[idx] = c
	c.indices = append(c.indices, idx)
	if len(c.indices) > indicesPerPeer {
		if old := c.indices[0]; h.index[old] == c {
			delete(h.index, old)
		}
		c.indices = c.indices[1:]
	}
}

// hubDatagram is one datagram waiting for a peer's tunnel, in a buffer
// from hubPool.
type hubDatagram struct {
	buf *[]byte
	n   int
	ep  bind.Endpoint
}

var hubPool = sync.Pool{New: func() any { b := make([]byte, hubBufLen); return &b }}

// hubConn is one peer's socket: a bind.Conn over the hub's.
type hubConn struct {
	h       *Hub
	peer    crypt.PublicKey
	q       chan hubDatagram
	closed  chan struct{}
	once    sync.Once
	indices []uint32 // under h.mu
	onWait  func()   // bind.WaitNotifier; set before the branch's reader starts
}

// deliver queues a copy of p for the peer's tunnel (reader goroutine).
func (c *hubConn) deliver(p []byte, ep bind.Endpoint) {
	bp := hubPool.Get().(*[]byte)
	n := copy(*bp, p) // p fits: both are hubBufLen long at most
	select {
	case c.q <- hubDatagram{buf: bp, n: n, ep: ep}:
	default:
		hubPool.Put(bp)
		c.h.stats.queueDrops.Add(1)
	}
}

func (c *hubConn) ReadBatch(bufs [][]byte, sizes []int, eps []bind.Endpoint) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	var d hubDatagram
	select {
	case d = <-c.q:
	default:
		if c.onWait != nil {
			c.onWait()
		}
		select {
		case d = <-c.q:
		case <-c.closed:
			return 0, net.ErrClosed
		}
	}
	n := 0
	for {
		if d.n <= len(bufs[n]) {
			sizes[n] = copy(bufs[n], (*d.buf)[:d.n])
			eps[n] = d.ep
			n++
		} else {
			c.h.stats.queueDrops.Add(1)
		}
		hubPool.Put(d.buf)
		if n == len(bufs) {
			return n, nil
		}
		select {
		case d = <-c.q:
		default:
			return n, nil
		}
	}
}

var (
	_ bind.Conn         = (*hubConn)(nil)
	_ bind.WaitNotifier = (*hubConn)(nil)
)

// OnReadWait implements bind.WaitNotifier: f runs before ReadBatch waits
// for the hub's reader to deliver a datagram.
func (c *hubConn) OnReadWait(f func()) { c.onWait = f }

func (c *hubConn) WriteBatch(bufs [][]byte, ep bind.Endpoint) error {
	select {
	case <-c.closed:
		return net.ErrClosed
	default:
	}
	for _, b := range bufs {
		c.h.learn(c, b)
	}
	return c.h.write(bufs, ep)
}

func (c *hubConn) BatchSize() int           { return c.h.bc.BatchSize() }
func (c *hubConn) LocalAddr() bind.Endpoint { return c.h.bc.LocalAddr() }
func (c *hubConn) Stats() bind.Stats        { return c.h.bc.Stats() }

// Close detaches the peer from the hub (its indices are forgotten, so
// its client's data gets a REJECT) and wakes a blocked ReadBatch. The
// hub's socket stays open.
func (c *hubConn) Close() error {
	c.h.mu.Lock()
	if c.h.peers[c.peer] == c {
		delete(c.h.peers, c.peer)
	}
	for _, idx := range c.indices {
		if c.h.index[idx] == c {
			delete(c.h.index, idx)
		}
	}
	c.h.mu.Unlock()
	c.shut()
	return nil
}

func (c *hubConn) shut() { c.once.Do(func() { close(c.closed) }) }
