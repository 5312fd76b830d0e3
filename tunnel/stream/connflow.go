package stream

import (
	"fmt"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// Budget is the memory of one connection's stream buffers: every byte of
// receive credit granted to a peer and not yet read, and every byte held in
// a send buffer, is reserved from it. Only each stream's floor (the initial
// receive window, Config.MinSendBufferBytes) is granted when the budget is
// exhausted, so Used may exceed Limit by at most the floors of the open
// streams.
type Budget struct {
	limitBytes uint64
	usedBytes  uint64
}

// Limit returns the budget in bytes.
func (b *Budget) Limit() uint64 { return b.limitBytes }

// Used returns the bytes reserved.
func (b *Budget) Used() uint64 { return b.usedBytes }

// Available returns the bytes that may still be reserved beyond the floors.
func (b *Budget) Available() uint64 {
	if b.usedBytes >= b.limitBytes {
		return 0
	}
	return b.limitBytes - b.usedBytes
}

// reserve reserves up to want bytes within the limit, but at least forced
// bytes (capped at want) regardless of it, and returns the bytes granted.
func (b *Budget) reserve(want, forced uint64) uint64 {
	g := max(min(forced, want), min(want, b.Available()))
	b.usedBytes += g
	return g
}

// release returns n reserved bytes.
func (b *Budget) release(n uint64) { b.usedBytes -= n }

// ConnFlow is the connection-level state shared by all streams of one
// connection: send credit from the peer's MAX_DATA, the auto-tuned receive
// window we advertise with MAX_DATA, the memory Budget and the chunk Pool.
// It is not safe for concurrent use; the connection serialises calls on it
// and on its streams.
type ConnFlow struct {
	cfg    Config
	pool   *Pool
	budget Budget

	// Send side: the peer lets us send sendLimit bytes in total.
	sendLimit     uint64
	sent          uint64 // new stream bytes sent, over all streams
	sendWanted    bool   // a stream had new data but no connection credit at sendLimit
	reported      bool   // Blocked reported reportedLimit
	reportedLimit uint64 // last limit reported by Blocked

	// sendCap bounds the bytes the send streams hold together (0: none;
	// see SetSendCap); holding counts the streams sharing it.
	sendCap uint64
	holding int

	// Receive side: received is the sum of the highest offsets received
	// per stream (what counts against our MAX_DATA), read the bytes read
	// by applications or discarded, and recv.consumed the bytes whose
	// credit was handed back (see release).
	recv     recvWindow
	received uint64
	read     uint64
}

// NewConnFlow returns the connection state for cfg (zero fields take their
// defaults). peerInitialMaxData is the connection credit the peer grants
// before its first MAX_DATA (its InitialConnWindow). It returns an error if
// cfg is inconsistent.
func NewConnFlow(cfg Config, peerInitialMaxData uint64) (*ConnFlow, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	maxFree := int(cfg.BudgetBytes / uint64(cfg.ChunkBytes))
	return &ConnFlow{
		cfg:       cfg,
		pool:      newPool(cfg.ChunkBytes, maxFree),
		budget:    Budget{limitBytes: cfg.BudgetBytes},
		sendLimit: peerInitialMaxData,
		recv:      newRecvWindow(cfg.InitialConnWindow, cfg.MaxConnWindow),
	}, nil
}

// Config returns the configuration in use, with defaults filled in.
func (c *ConnFlow) Config() Config { return c.cfg }

// Budget returns the connection's memory budget (read-only view).
func (c *ConnFlow) Budget() *Budget { return &c.budget }

// Pool returns the connection's chunk pool (read-only view).
func (c *ConnFlow) Pool() *Pool { return c.pool }

// SendCredit returns how many new stream bytes the connection may still
// send under the peer's MAX_DATA.
func (c *ConnFlow) SendCredit() uint64 {
	if c.sent >= c.sendLimit {
		return 0
	}
	return c.sendLimit - c.sent
}

// OnMaxData applies a MAX_DATA frame from the peer. A smaller value than
// the current limit is ignored (frames may be reordered). It returns whether
// credit increased, in which case streams that were blocked on it can be
// scheduled again.
func (c *ConnFlow) OnMaxData(maxBytes uint64) bool {
	if maxBytes <= c.sendLimit {
		return false
	}
	c.sendLimit = maxBytes
	c.sendWanted = false
	return true
}

// SetSendCap bounds the bytes the send streams hold together (written,
// not yet acknowledged) to about n: a stream may hold an equal share of n
// among the streams holding bytes that the peer's credit lets them send
// (SendStream.syncSharing), and always Config.MinSendBufferBytes; under a
// cap no stream holds more than that floor beyond its peer's credit. 0
// lifts the bound (the default). The connection sets it from its
// congestion window, so a sender faster than the path queues a few
// windows, not the whole budget. A lower bound takes effect as
// acknowledgments free bytes.
func (c *ConnFlow) SetSendCap(n uint64) { c.sendCap = n }

// sendShare is what one stream may hold under the send cap (0: no cap);
// holding tells whether the stream already counts among the holders.
func (c *ConnFlow) sendShare(holding bool) uint64 {
	if c.sendCap == 0 {
		return 0
	}
	n := c.holding
	if !holding || n == 0 {
		n++
	}
	return max(uint64(c.cfg.MinSendBufferBytes), c.sendCap/uint64(n))
}

// consumeSend records n new bytes sent.
func (c *ConnFlow) consumeSend(n uint64) { c.sent += n }

// markSendBlocked records that a stream had new data and no connection
// credit.
func (c *ConnFlow) markSendBlocked() { c.sendWanted = true }

// Blocked reports, once per limit, that a stream had new data to send but
// the connection credit was used up: the connection sends DATA_BLOCKED with
// the returned limit.
func (c *ConnFlow) Blocked() (limit uint64, ok bool) {
	if !c.sendWanted || c.SendCredit() > 0 || (c.reported && c.reportedLimit == c.sendLimit) {
		return 0, false
	}
	c.reported, c.reportedLimit = true, c.sendLimit
	return c.sendLimit, true
}

// onReceived accounts delta new bytes at the top of a stream (its highest
// received offset grew by delta). It returns an error wrapping
// ErrFlowControl if that exceeds our MAX_DATA; nothing changes then.
func (c *ConnFlow) onReceived(streamID, delta uint64) error {
	if delta > c.recv.limit-c.received {
		return fmt.Errorf("stream %d: %d new bytes with %d of connection credit left: %w",
			streamID, delta, c.recv.limit-c.received, ErrFlowControl)
	}
	c.received += delta
	c.release()
	return nil
}

// RecvUnread returns the stream bytes counted against our MAX_DATA and
// not yet read or discarded (gaps below a stream's highest offset
// included).
func (c *ConnFlow) RecvUnread() uint64 { return c.received - c.read }

// onConsumed records n bytes read by an application or discarded.
func (c *ConnFlow) onConsumed(n uint64) {
	c.read += n
	c.release()
}

// release hands back the connection credit of the bytes that have
// arrived, read or not, so that the connection window bounds the bytes in
// flight rather than those waiting to be read: bytes waiting in a stream
// whose reader stopped keep only their stream's credit, not the other
// streams'. What waits unread is bounded per stream by its window,
// together by the Budget (beyond the floors), and for the connection by
// unreadCap: credit is handed back only while the unread bytes and a
// window in flight stay within it.
func (c *ConnFlow) release() {
	ceiling := c.read + c.unreadCap() - c.recv.windowBytes
	c.recv.consumed = max(c.recv.consumed, min(c.received, ceiling))
}

// unreadCap bounds the bytes received and not yet read plus those the
// connection's credit lets the peer have in flight: the Budget and the
// largest connection window. It exceeds every window the connection can
// have, so the credit of the bytes read is always handed back.
func (c *ConnFlow) unreadCap() uint64 { return c.cfg.BudgetBytes + c.cfg.MaxConnWindow }

// RecvWindow returns the connection's current receive window and the limit
// last advertised (MAX_DATA).
func (c *ConnFlow) RecvWindow() (windowBytes, limit uint64) { return c.recv.windowBytes, c.recv.limit }

// ShouldSendMaxData reports whether the connection should send MAX_DATA,
// and with which value: when the credit of more than a quarter of the
// window was handed back since the last update (see release). It
// auto-tunes the window first (rtt is the smoothed RTT; zero means
// unknown). When ok, the new limit is in force as if sent: the connection
// must send it (and resend the latest value if lost).
func (c *ConnFlow) ShouldSendMaxData(now monotime.Time, rtt time.Duration) (maxBytes uint64, ok bool) {
	if !c.recv.wantsUpdate() {
		return 0, false
	}
	c.recv.autoTune(now, rtt)
	c.recv.limit = c.recv.consumed + c.recv.windowBytes
	return c.recv.limit, true
}
