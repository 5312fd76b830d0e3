package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/wanopt/wanopt/cc"
	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/crypt"
	"github.com/wanopt/wanopt/tunnel/recovery"
	"github.com/wanopt/wanopt/tunnel/stream"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// connState is the life-cycle stage of a Conn.
type connState uint8

const (
	stateHandshake   connState = iota // client: awaiting message 2; server: awaiting key confirmation
	stateEstablished                  // data flows
	stateClosing                      // we sent (and repeat) CLOSE; nothing else
	stateClosed                       // nothing is sent or processed
)

// Conn is one end of a tunnel connection: a sans-IO state machine. It owns
// no socket, goroutine or clock; a driver feeds it datagrams and the time,
// and asks it for datagrams to send and for its next timer:
//
//	on a datagram from the peer:  c.HandleDatagram(now, b)
//	when the timer fires:         c.HandleTimeout(now)
//	after either, and after any API call (StreamWrite, OpenStream, ...):
//	    for { n := c.PollTransmit(now, buf); if n == 0 { break }; send(buf[:n]) }
//	    for { ev, ok := c.PollEvent(); if !ok { break }; handle(ev) }
//	    reset the timer to c.NextTimeout() (0: no timer)
//
// now must be nonzero and never decrease between calls. A Conn is not safe
// for concurrent use: one driver goroutine serialises every call.
type Conn struct {
	cfg    Config
	client bool
	state  connState
	rng    *rand.Rand

	// Handshake.
	initiator   *crypt.Initiator       // client
	cookies     *crypt.CookieGenerator // client: the MACs of its initiations
	responder   *crypt.Responder       // server
	sess        *crypt.Session
	localIndex  uint32
	created     monotime.Time // HandshakeTimestamp's moment
	hsNext      monotime.Time // client: when message 1 goes (again)
	hsInterval  time.Duration
	hsDeadline  monotime.Time // handshake fails (ErrHandshakeTimeout)
	hsResp      []byte        // server: handshake response waiting to be sent
	hsBuild     []byte        // server: spare buffer for the next response
	hsRespReady bool
	heldSession bool // server successor: the Conn it may replace is established

	// Rekeying (rekey.go).
	prevSess   *crypt.Session // the session before the last rekey: it still opens late packets
	nextSess   *crypt.Session // server: the rekeyed session, until the client's first packet under it
	rekeying   bool           // client: a rekey initiation is out
	rekeyIndex uint32         // client: the index that initiation offers
	rekeyAt    monotime.Time  // client: when the session is due for a rekey
	sessSent   uint64         // packets sealed under the current session

	// Loss recovery and congestion control (created with the session).
	rtt      *cc.RTTStats
	ctrl     cc.Controller
	sender   *recovery.Sender
	receiver *recovery.Receiver
	ackFrame wire.AckFrame
	// rateCapBps is SetRateCap's cap, kept for a sender made later.
	rateCapBps uint64
	parser     wire.Parser
	rxBuf      []byte
	records    recordRing
	ackedFn    func(uint64)
	lostFn     func(uint64)
	now        monotime.Time // time of the call being processed, for callbacks

	// Streams.
	flow           *stream.ConnFlow
	streams        map[uint64]*streamState
	readyScratch   []*streamState // scheduleAll's, reused
	nextLocalID    uint64
	peerSeen       idWindow
	localOpen      int
	peerOpen       int
	sched          streamQueue // streams with data to send
	ctrlQ          streamQueue // streams with control frames to send
	openResults    []wire.OpenResultFrame
	maxDataPending bool
	maxDataValue   uint64
	maxDataCheck   bool
	rxRate         recvRate // the peer's delivery rate, for new streams' windows

	// Datagrams.
	dgOut     byteQueue
	dgPending int    // EventDatagram events not yet polled
	dgLent    []byte // buffer of the last EventDatagram, recycled on PollEvent
	dgFree    [][]byte

	events eventQueue

	// Timers.
	idleStart           monotime.Time // the idle timeout runs from here
	sentElicitingSince  bool          // an ack-eliciting packet went out since the last receipt
	lastElicitingSent   monotime.Time
	pingPending         bool
	ackOnlyRun          int // ACK-only packets sent since the last ack-eliciting one
	pacingWake          monotime.Time
	closeDeadline       monotime.Time
	closePending        bool
	closeCode           wire.CloseCode
	closeReason         [wire.MaxReasonLen]byte
	closeReasonLen      int
	closeErr            error
	largestRecv         uint64
	establishedReported bool

	pmtu pmtud // path MTU discovery (pmtu.go)

	stats Stats
}

// NewClientConn returns the initiating end of a tunnel to the peer whose
// static key is cfg.PeerPublicKey. Its first PollTransmit returns the
// handshake initiation; it is retransmitted with exponential backoff until
// the peer answers, and the connection closes with ErrHandshakeTimeout
// after cfg.IdleTimeout without an answer. Errors wrap ErrConfig or come
// from the key (crypt.ErrBadKey).
func NewClientConn(cfg Config, now monotime.Time) (*Conn, error) {
	cfg, err := cfg.withDefaults(true)
	if err != nil {
		return nil, err
	}
	c, err := newConn(cfg, true, now)
	if err != nil {
		return nil, err
	}
	c.initiator, err = crypt.NewInitiator(cfg.PrivateKey, cfg.PeerPublicKey, cfg.Rand)
	if err != nil {
		return nil, fmt.Errorf("tunnel: new client: %w", err)
	}
	c.initiator.SetResume(cfg.Resume)
	c.cookies = crypt.NewCookieGenerator(cfg.PeerPublicKey)
	c.hsNext = now
	c.hsInterval = DefaultHandshakeRetransmit
	return c, nil
}

// NewServerConn returns the responding end of a tunnel. It answers the
// first handshake initiation that authenticates and comes from a key
// cfg.AllowPeer accepts (or cfg.PeerPublicKey); anything else is dropped
// unanswered. The response is never longer than the initiation, and
// nothing else is sent until the client's first data packet has
// authenticated (then EventEstablished is reported), so a spoofed or
// replayed initiation cannot amplify. A repeated initiation (its response
// was lost) gets a fresh session until the client confirms one; after
// that, initiations are dropped (see NewSuccessor). With no client for
// cfg.IdleTimeout it closes with ErrHandshakeTimeout.
func NewServerConn(cfg Config, now monotime.Time) (*Conn, error) {
	cfg, err := cfg.withDefaults(false)
	if err != nil {
		return nil, err
	}
	c, err := newConn(cfg, false, now)
	if err != nil {
		return nil, err
	}
	c.responder, err = crypt.NewResponder(cfg.PrivateKey, cfg.AllowPeer, cfg.Rand)
	if err != nil {
		return nil, fmt.Errorf("tunnel: new server: %w", err)
	}
	if cfg.Timestamps != nil {
		c.responder.ShareTimestamps(cfg.Timestamps)
	}
	return c, nil
}

func newConn(cfg Config, client bool, now monotime.Time) (*Conn, error) {
	var seed [16]byte
	if _, err := io.ReadFull(cfg.Rand, seed[:]); err != nil {
		return nil, fmt.Errorf("tunnel: reading randomness: %w", err)
	}
	rng := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))
	flow, err := stream.NewConnFlow(cfg.Stream, peerInitialConnWindow(cfg.Stream))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	c := &Conn{
		cfg:         cfg,
		client:      client,
		rng:         rng,
		localIndex:  rng.Uint32(),
		created:     now,
		hsDeadline:  now.Add(cfg.IdleTimeout),
		idleStart:   now,
		flow:        flow,
		streams:     make(map[uint64]*streamState),
		largestRecv: wire.NoPacketNumber,
		rxBuf:       make([]byte, 0, 65536),
		records:     newRecordRing(1024),
		rxRate:      newRecvRate(),
		pmtu:        newPMTUD(cfg.MaxUDPPayloadBytes),
		// Room for four times the open streams allowed to overtake a
		// late STREAM_OPEN.
		peerSeen: newIDWindow(max(64, 4*cfg.MaxStreams/64)),
	}
	if !client {
		c.nextLocalID = 1
	}
	c.ackedFn = c.onAcked
	c.lostFn = c.onLost
	return c, nil
}

// setupRecovery creates the controller and the loss-recovery state. It is
// called once, when the first session is made.
func (c *Conn) setupRecovery() {
	if c.sender != nil {
		return
	}
	// Made for the ceiling (the initial window is ten ceiling-sized
	// packets, as before path MTU discovery), then told the size in use.
	mss := c.cfg.MaxUDPPayloadBytes
	switch c.cfg.Congestion {
	case CCCubic:
		c.ctrl = cc.NewCubic(mss, 0)
	case CCFixed:
		c.ctrl = cc.NewFixed(c.cfg.FixedRateBps, mss)
	default:
		// The controller counts datagram payload; the link carries the
		// IPv4 and UDP headers too (IPv6 would take 20 bytes more).
		hint := uint64(float64(c.cfg.InitialBandwidthBps) * float64(mss) / float64(mss+ipv4UDPHeaderBytes))
		c.ctrl = cc.NewBBR(cc.BBRConfig{MSS: mss, Rand: rand.New(rand.NewPCG(c.rng.Uint64(), c.rng.Uint64())),
			InitialBwBps: hint})
	}
	c.rtt = cc.NewRTTStats(0)
	c.sender = recovery.NewSender(c.ctrl, c.rtt, recovery.SenderConfig{
		PeerMaxAckDelay: recovery.DefaultMaxAckDelay,
		MSS:             mss,
	})
	c.sender.SetMSS(c.pmtu.size)
	c.updateSendCap()
	if c.rateCapBps != 0 {
		c.sender.SetRateCap(c.now, c.rateCapBps)
	}
	c.receiver = recovery.NewReceiver(recovery.ReceiverConfig{})
	c.ackFrame.Ranges = make([]wire.AckRange, 0, wire.MaxAckRanges)
}

// IsClient reports whether this end initiated the handshake.
func (c *Conn) IsClient() bool { return c.client }

// Established reports whether the handshake completed and the connection
// is not closed.
func (c *Conn) Established() bool { return c.state == stateEstablished }

// Closed reports whether the connection is closed or closing; the reason is
// in the EventClosed already queued, and in Err.
func (c *Conn) Closed() bool { return c.state >= stateClosing }

// SetRateCap holds the connection's sending rate (datagram payload, bits
// per second) to at most capBps from now on; 0 lifts the cap. Below the
// controller's own rate, the cap paces the packets and the controller
// takes them as application-limited, so its model of the path survives
// (see recovery.Sender.SetRateCap). A hub dividing a link sets it.
func (c *Conn) SetRateCap(now monotime.Time, capBps uint64) {
	c.rateCapBps = capBps
	if c.sender != nil {
		c.sender.SetRateCap(now, capBps)
	}
}

// Err returns why the connection closed, or nil while it is open.
func (c *Conn) Err() error { return c.closeErr }

// PeerPublicKey returns the peer's authenticated static key, or the zero
// key before the handshake.
func (c *Conn) PeerPublicKey() crypt.PublicKey {
	if c.sess == nil {
		return crypt.PublicKey{}
	}
	return c.sess.Peer()
}

// PollEvent returns the next event, if any. Call it until it returns false
// after every input (HandleDatagram, HandleTimeout, API calls). The Data of
// an EventDatagram is valid until the next call.
func (c *Conn) PollEvent() (Event, bool) {
	if c.dgLent != nil {
		c.dgFree = append(c.dgFree, c.dgLent[:0])
		c.dgLent = nil
	}
	ev, ok := c.events.pop()
	if ok && ev.Kind == EventDatagram {
		c.dgLent = ev.Data
		c.dgPending--
	}
	return ev, ok
}

// DatagramsWaiting returns how many received datagrams (EventDatagram)
// wait to be polled; beyond Config.MaxDatagramQueue the next are dropped.
func (c *Conn) DatagramsWaiting() int { return c.dgPending }

// HandleDatagram processes one datagram received from the peer at now. b
// is only read during the call. A datagram that is malformed, does not
// authenticate, is a replay or belongs to no session is counted in Stats
// and dropped: it changes no other state and gets no answer.
func (c *Conn) HandleDatagram(now monotime.Time, b []byte) {
	c.now = now
	if c.state == stateClosed {
		c.stats.DroppedPackets++
		return
	}
	hdr, off, err := wire.ParseHeader(b)
	if err != nil {
		c.stats.DroppedMalformed++
		c.stats.DroppedPackets++
		return
	}
	switch hdr.Type {
	case wire.PacketData:
		c.handleData(now, b, &hdr, off)
	case wire.PacketHandshakeInit:
		c.handleInit(now, b[off:])
	case wire.PacketHandshakeResp:
		c.handleResp(now, b[off:])
	case wire.PacketCookie:
		c.handleCookie(now, &hdr, b[off:])
	default: // Reject: an unauthenticated hint; only reported.
		c.stats.DroppedPackets++
		if c.client && c.state == stateEstablished && c.sess != nil && hdr.SenderIndex == c.sess.RemoteIndex() {
			c.stats.RejectsReceived++
			c.events.push(Event{Kind: EventRejected})
		}
	}
}

// AppendReject appends to buf the REJECT answering b, a datagram given to
// HandleDatagram, when b is a data packet for a session this Conn does
// not hold (a restarted server gets those from its former clients);
// otherwise it returns buf unchanged. The REJECT names b's receiver index
// and is never larger than b. It is an unauthenticated hint, sent by the
// caller to b's source; the caller rate-limits it.
func (c *Conn) AppendReject(buf, b []byte) []byte {
	hdr, off, err := wire.ParseHeader(b)
	if err != nil || hdr.Type != wire.PacketData || len(b) < off+wire.RejectHeaderLen {
		return buf
	}
	if c.sess != nil && hdr.ReceiverIndex == c.sess.LocalIndex() {
		return buf
	}
	return wire.AppendHeader(buf, &wire.Header{Type: wire.PacketReject, SenderIndex: hdr.ReceiverIndex})
}

// IsHandshakeResponse reports whether b is a handshake response or a
// cookie reply addressed to this Conn's initiation (client): the datagrams
// a Conn still in its handshake needs, when another Conn shares its socket.
func (c *Conn) IsHandshakeResponse(b []byte) bool {
	hdr, _, err := wire.ParseHeader(b)
	return err == nil && (hdr.Type == wire.PacketHandshakeResp || hdr.Type == wire.PacketCookie) && hdr.ReceiverIndex == c.localIndex
}

// IsHandshakeInitiation reports whether b is a handshake initiation: the
// datagram a restarted client sends to a server that still holds its old
// session (see NewSuccessor). It looks at the type byte and the length
// only, since a server's driver asks it of every datagram; the Conn that
// gets b authenticates it.
func IsHandshakeInitiation(b []byte) bool {
	return len(b) == InitiationSize && b[0] == byte(wire.PacketHandshakeInit)
}

// InitiationSize is the length of a handshake initiation datagram: header,
// Noise message 1, mac1 and mac2.
const InitiationSize = wire.HandshakeInitHeaderLen + crypt.Message1Size + crypt.MACsSize

// OwnsDatagram reports whether b is a data packet for this Conn's session
// (by its receiver index; nothing is authenticated): how a driver that runs
// two Conns on one socket routes the packets of the newer one.
func (c *Conn) OwnsDatagram(b []byte) bool {
	hdr, _, err := wire.ParseHeader(b)
	return err == nil && hdr.Type == wire.PacketData && c.sess != nil && hdr.ReceiverIndex == c.sess.LocalIndex()
}

// PeerResuming (server) reports whether the client whose initiation this
// Conn answered said it still holds an established session with this
// server (Config.Resume): a live server's driver declines such a handshake
// instead of replacing the session (see NewSuccessor).
func (c *Conn) PeerResuming() bool { return !c.client && c.sess != nil && c.sess.Resume() }

// NewSuccessor (server) returns a fresh server Conn with c's configuration
// that shares c's handshake replay memory: it answers only an initiation
// newer than every one c accepted. An established Conn drops
// initiations, so a restarted client would otherwise wait for the long
// idle timeout. The driver feeds such an initiation to the successor and
// replaces c with it once the client confirms the new keys; a replayed
// old initiation is refused and changes nothing.
func (c *Conn) NewSuccessor(now monotime.Time) (*Conn, error) {
	if c.client {
		return nil, fmt.Errorf("%w: NewSuccessor is for a server Conn", ErrConfig)
	}
	n, err := newConn(c.cfg, false, now)
	if err != nil {
		return nil, err
	}
	n.responder = c.responder
	n.heldSession = c.state == stateEstablished
	return n, nil
}

// handleInit answers a handshake initiation (server only).
func (c *Conn) handleInit(now monotime.Time, msg []byte) {
	if c.client || c.state != stateHandshake {
		c.stats.DroppedPackets++
		return
	}
	if len(msg) != crypt.Message1Size+crypt.MACsSize {
		c.stats.DroppedMalformed++
		c.stats.DroppedPackets++
		return
	}
	// The MACs were checked before (HandshakeGate), with the source.
	msg = msg[:crypt.Message1Size]
	idx := c.rng.Uint32()
	// Build in a spare buffer: a response still waiting to be sent must
	// survive a bad initiation arriving before it goes out.
	buf := c.hsBuild[:0]
	buf = wire.AppendHeader(buf, &wire.Header{Type: wire.PacketHandshakeResp, SenderIndex: idx})
	out, sess, err := c.responder.RespondHeld(buf, msg, idx, now, c.heldSession)
	if err != nil {
		c.stats.DroppedPackets++
		switch {
		case errors.Is(err, crypt.ErrUnknownPeer):
			c.stats.HandshakesRejected++
		case errors.Is(err, crypt.ErrReplay):
			c.stats.HandshakeReplays++
		default:
			c.stats.DroppedUnauthenticated++
		}
		ev := Event{Kind: EventHandshakeRefused, Err: err}
		if pe, ok := errors.AsType[*crypt.PeerError](err); ok {
			ev.PeerKey = pe.Key
		}
		c.events.push(ev)
		return
	}
	// Fill in the cleartext receiver index of the header from the session.
	binary.BigEndian.PutUint32(out[5:9], sess.RemoteIndex())
	c.hsResp, c.hsBuild = out, c.hsResp[:0]
	c.hsRespReady = true
	c.sess = sess
	c.localIndex = idx
	c.largestRecv = wire.NoPacketNumber
	c.setupRecovery()
	c.stats.PacketsReceived++
	c.stats.BytesReceived += uint64(InitiationSize)
}

// handleCookie takes a cookie reply to the client's pending initiation and
// sends the next initiation at once, with mac2. A reply that does not
// decrypt against the last initiation sent changes nothing.
func (c *Conn) handleCookie(now monotime.Time, hdr *wire.Header, body []byte) {
	pending := c.state == stateHandshake && hdr.ReceiverIndex == c.localIndex ||
		c.rekeying && hdr.ReceiverIndex == c.rekeyIndex
	if !c.client || !pending {
		c.stats.DroppedPackets++
		return
	}
	if err := c.cookies.ConsumeReply(body, now); err != nil {
		c.stats.DroppedPackets++
		c.stats.DroppedUnauthenticated++
		return
	}
	c.stats.CookiesReceived++
	c.hsNext = now
}

// handleResp completes the client's handshake.
func (c *Conn) handleResp(now monotime.Time, msg []byte) {
	if c.client && c.rekeying && c.state == stateEstablished {
		c.handleRekeyResp(now, msg)
		return
	}
	if !c.client || c.state != stateHandshake {
		c.stats.DroppedPackets++
		return
	}
	sess, err := c.initiator.Consume(msg, now)
	if err != nil {
		c.stats.DroppedPackets++
		c.stats.DroppedUnauthenticated++
		if errors.Is(err, crypt.ErrExpired) {
			c.hsNext = now // start over at once
		}
		return
	}
	c.stats.PacketsReceived++
	c.stats.BytesReceived += uint64(len(msg) + wire.HandshakeRespHeaderLen)
	c.sess = sess
	c.setupRecovery()
	c.establish(now)
	// Confirm the keys to the server at once, even with nothing to send.
	c.pingPending = true
}

// establish enters stateEstablished and reports it.
func (c *Conn) establish(now monotime.Time) {
	c.state = stateEstablished
	c.scheduleRekey(now)
	c.pmtu.start()
	c.idleStart = now
	c.lastElicitingSent = now
	if !c.establishedReported {
		c.establishedReported = true
		c.events.push(Event{Kind: EventEstablished})
		c.cfg.Logger.Info("tunnel established", "peer", c.sess.Peer().String(), "client", c.client, "cipher", c.sess.Suite().String())
	}
}

// handleData opens and processes a data packet.
func (c *Conn) handleData(now monotime.Time, b []byte, hdr *wire.Header, off int) {
	sess := c.sessionFor(hdr.ReceiverIndex)
	if sess == nil {
		c.stats.DroppedUnknownIndex++
		c.stats.DroppedPackets++
		return
	}
	pn := wire.DecodePacketNumber(c.largestRecv, hdr.PacketNumber, 8*hdr.PNLen)
	pt, err := sess.Open(c.rxBuf[:0], b[:off], b[off:], pn)
	if err != nil {
		c.stats.DroppedPackets++
		if errors.Is(err, crypt.ErrReplay) {
			c.stats.DroppedDuplicates++
		} else {
			c.stats.DroppedUnauthenticated++
		}
		return
	}
	if sess == c.nextSess {
		c.promote(now) // the client confirmed the rekeyed session
	}
	if c.largestRecv == wire.NoPacketNumber || pn > c.largestRecv {
		c.largestRecv = pn
	}
	c.stats.PacketsReceived++
	c.stats.BytesReceived += uint64(len(b))
	c.idleStart = now
	c.sentElicitingSince = false
	switch c.state {
	case stateClosing:
		c.closePending = true
		return
	case stateHandshake: // server: the client confirmed the keys
		c.hsRespReady = false
		c.establish(now)
	}
	eliciting := false
	c.parser.Reset(pt)
	for c.parser.Next() {
		t := c.parser.Type()
		if t.AckEliciting() {
			eliciting = true
		}
		c.handleFrame(now, t)
		if c.state != stateEstablished {
			return
		}
	}
	if err := c.parser.Err(); err != nil {
		c.closeWithError(now, wire.CloseFrameEncoding, "malformed frame", fmt.Errorf("%w: %w", ErrProtocol, err))
		return
	}
	c.receiver.OnPacketReceived(now, pn, eliciting)
}

// Close closes the connection with code and reason (at most
// wire.MaxReasonLen bytes are sent). An established connection sends a
// CLOSE frame, repeats it when the peer keeps sending, and goes quiet after
// three probe timeouts. EventClosed with an error wrapping ErrLocalClose is
// queued at once. Closing a closed connection does nothing.
func (c *Conn) Close(now monotime.Time, code wire.CloseCode, reason string) {
	c.closeWithError(now, code, reason, fmt.Errorf("%w: %v: %s", ErrLocalClose, code, reason))
}

// closeWithError starts closing with a CLOSE frame and reports err.
func (c *Conn) closeWithError(now monotime.Time, code wire.CloseCode, reason string, err error) {
	if c.state >= stateClosing {
		return
	}
	if c.state != stateEstablished {
		c.terminate(err)
		return
	}
	c.state = stateClosing
	c.closeCode = code
	c.closeReasonLen = copy(c.closeReason[:], reason)
	c.closePending = true
	c.closeDeadline = now.Add(3 * c.rtt.PTO(true))
	c.closeErr = err
	c.events.push(Event{Kind: EventClosed, Err: err})
	c.cfg.Logger.Info("tunnel closing", "err", err)
}

// terminate closes at once, sending nothing more, and reports err.
func (c *Conn) terminate(err error) {
	if c.state == stateClosed {
		return
	}
	if c.state != stateClosing {
		c.closeErr = err
		c.events.push(Event{Kind: EventClosed, Err: err})
		c.cfg.Logger.Info("tunnel closed", "err", err)
	}
	c.state = stateClosed
	c.pacingWake = 0
}

// idleDeadline returns when the idle timer fires.
func (c *Conn) idleDeadline() monotime.Time { return c.idleStart.Add(c.cfg.IdleTimeout) }

// HandleTimeout runs the timers due at now: handshake retransmission and
// timeout, idle timeout, keepalive, loss detection and probe timeout, the
// delayed ACK and pacing (the last two only make PollTransmit send).
// Spurious or early calls are harmless.
func (c *Conn) HandleTimeout(now monotime.Time) {
	c.now = now
	switch c.state {
	case stateClosed:
		return
	case stateClosing:
		if !now.Before(c.closeDeadline) {
			c.terminate(c.closeErr)
		}
		return
	case stateHandshake:
		if !now.Before(c.hsDeadline) {
			c.terminate(fmt.Errorf("%w after %v", ErrHandshakeTimeout, c.cfg.IdleTimeout))
		}
		return
	}
	if !now.Before(c.idleDeadline()) {
		c.terminate(fmt.Errorf("%w for %v", ErrIdleTimeout, c.cfg.IdleTimeout))
		return
	}
	if t := c.sender.NextTimeout(); t != 0 && !now.Before(t) {
		c.sender.OnTimeout(now, c.lostFn)
	}
	c.pmtu.onTimeout(now)
	if c.keepAliveDeadline() != 0 && !now.Before(c.keepAliveDeadline()) {
		c.pingPending = true
	}
}

// keepAliveDeadline returns when a keepalive PING is due, or 0.
func (c *Conn) keepAliveDeadline() monotime.Time {
	if c.cfg.KeepAliveInterval < 0 || c.pingPending || c.state != stateEstablished {
		return 0
	}
	return c.lastElicitingSent.Add(c.cfg.KeepAliveInterval)
}

// NextTimeout returns when HandleTimeout should be called next (0: no
// timer). Read it after every call that may have changed state.
func (c *Conn) NextTimeout() monotime.Time {
	var t monotime.Time
	earliest := func(u monotime.Time) {
		if u != 0 && (t == 0 || u < t) {
			t = u
		}
	}
	switch c.state {
	case stateClosed:
		return 0
	case stateClosing:
		return c.closeDeadline
	case stateHandshake:
		earliest(c.hsDeadline)
		if c.client {
			earliest(c.hsNext)
		}
		return t
	}
	earliest(c.idleDeadline())
	earliest(c.sender.NextTimeout())
	earliest(c.receiver.NextTimeout())
	earliest(c.keepAliveDeadline())
	earliest(c.pacingWake)
	earliest(c.rekeyDeadline())
	earliest(c.pmtu.nextTimeout())
	return t
}

// onPathMTUChanged tells the controller the new packet size.
func (c *Conn) onPathMTUChanged() {
	c.sender.SetMSS(c.pmtu.size)
	c.cfg.Logger.Debug("path MTU", "bytes", c.pmtu.size, "searching", c.pmtu.searching)
}
