// The driver goroutine's state (driverState) and counters.

package driver

import (
	"crypto/rand"
	"net/netip"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel"
)

// driverState is the part of a Tunnel only the driver goroutine touches.
type driverState struct {
	t     *Tunnel
	conn  *tunnel.Conn
	peer  netip.AddrPort
	timer *time.Timer
	armed monotime.Time // deadline the timer is set for; 0: stopped

	// The sleeper (nil channels when not used): sleepReq carries the
	// next wake time (capacity 1), sleepWake the wakeup (capacity 1).
	sleepReq  chan monotime.Time
	sleepWake chan struct{}
	sleeping  monotime.Time // wake time handed to the sleeper; 0: none
	streams   map[uint64]*Stream

	// parked holds the streams with a parked read (for shutdown);
	// gatherq the armed waits of ReadGather, gathering the most armed
	// at once lately (parked.go).
	parked    map[*Stream]struct{}
	gatherq   []gatherWait
	gathering gatherPeak
	// waitHook: the socket tells the reader's waits (bind.WaitNotifier),
	// so the gathers' deadlines may be left to the coming batches
	// (readwait.go).
	waitHook bool

	txBufs [][]byte // BatchSize buffers of MaxUDPPayloadBytes
	txOut  [][]byte // the filled prefixes handed to WriteBatch

	lastMaxDatagram int64 // the Conn's MaxDatagramBytes last published

	// next is a new handshake beside conn, which goes on meanwhile; nil
	// when none runs. A client starts one when the server rejected our
	// session; a server when an established session's client sends a new
	// initiation (tunnel.Conn.NewSuccessor), answered at nextPeer.
	// nextTried is when the last one started.
	next      *tunnel.Conn
	nextPeer  netip.AddrPort
	nextTried monotime.Time
	// initTokens and initRefill rate-limit the initiations a server
	// examines while established (each costs two X25519).
	initTokens float64
	initRefill monotime.Time
	// lastReject is when the server last sent a REJECT (rate limit).
	lastReject monotime.Time
	rejectBuf  []byte
	// gate (server) checks every handshake initiation's MACs and rate
	// before a Conn spends a Diffie-Hellman on it; cookieBuf holds the
	// cookie reply being sent.
	gate      *tunnel.HandshakeGate
	cookieBuf [1][]byte

	// refusedFrom is the source of the initiation the Conn is handling
	// (EventHandshakeRefused names it to Config.Refusals); hsReported the
	// initiations last told to Config.OnHandshakeSent.
	refusedFrom netip.AddrPort
	hsReported  uint64

	estDone   bool
	closeErr  error // the Conn's EventClosed reason
	sockErr   error // closing the socket failed
	lastTxErr string

	ctr counters
}

// counters are the driver's own Stats fields.
type counters struct {
	datagramsIn, datagramsOut uint64
	rxBatches, txBatches      uint64
	timerWakeups, loops       uint64
	sleepWakeups              uint64
	readWaitWakeups           uint64
	txErrors, acceptOverflow  uint64
	rejectsSent, rehandshakes uint64
	clientRestarts            uint64
	resumesDeclined           uint64
	initiationsRefused        uint64
}

func (d *driverState) init(t *Tunnel, conn *tunnel.Conn, cfg Config) {
	d.t = t
	d.conn = conn
	d.peer = cfg.RemoteAddr
	d.timer = time.NewTimer(time.Hour)
	d.timer.Stop()
	d.streams = make(map[uint64]*Stream)
	d.parked = make(map[*Stream]struct{})
	if !t.client && !cfg.NoGate {
		rnd := cfg.Tunnel.Rand
		if rnd == nil {
			rnd = rand.Reader
		}
		d.gate = tunnel.NewHandshakeGate(cfg.Tunnel.PrivateKey, rnd)
	}
	if havePreciseSleep && !cfg.TimerOnly {
		d.sleepReq = make(chan monotime.Time, 1)
		d.sleepWake = make(chan struct{}, 1)
	}
	batch := t.bc.BatchSize()
	d.txBufs = make([][]byte, batch)
	d.txOut = make([][]byte, batch)
	n := cfg.Tunnel.MaxUDPPayloadBytes
	mem := make([]byte, batch*n)
	for i := range d.txBufs {
		d.txBufs[i] = mem[i*n : (i+1)*n : (i+1)*n]
	}
}
