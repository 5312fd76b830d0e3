package recovery

import (
	"fmt"
	"time"

	"github.com/wanopt/wanopt/cc"
	"github.com/wanopt/wanopt/internal/monotime"
	"github.com/wanopt/wanopt/tunnel/wire"
)

// Defaults of SenderConfig (RFC 9002 §6.1 and §18.2 where it names them).
const (
	DefaultPeerMaxAckDelay  = 25 * time.Millisecond  // RFC 9000 max_ack_delay default
	DefaultPacketThreshold  = 3                      // kPacketThreshold
	DefaultTimeThresholdNum = 9                      // kTimeThreshold = 9/8
	DefaultTimeThresholdDen = 8                      //
	DefaultGranularity      = time.Millisecond       // kGranularity
	DefaultProbePackets     = 2                      // packets sent per PTO expiry
	DefaultInitialCapacity  = 1024                   // sent-packet records preallocated
	DefaultLostHistory      = 1024                   // lost packets remembered for spurious-loss detection
	DefaultMaxProbeInterval = 500 * time.Millisecond // longest backed-off probe timeout (see SenderConfig)
)

// maxPacketThreshold bounds the adapted packet threshold; beyond it the
// time threshold decides alone.
const maxPacketThreshold = 1 << 16

// persistentCongestionThreshold is kPersistentCongestionThreshold.
const persistentCongestionThreshold = 3

// maxPTOPeriod bounds a backed-off probe timeout so that the deadline
// arithmetic cannot overflow; an idle timeout ends a dead connection long
// before.
const maxPTOPeriod = 10 * time.Minute

// SenderConfig configures NewSender. The zero value gives the RFC 9002
// defaults.
type SenderConfig struct {
	// PeerMaxAckDelay is the longest the peer delays an ACK (its
	// ReceiverConfig.MaxAckDelay); DefaultPeerMaxAckDelay if <= 0. It is
	// added to the PTO and caps the ack delay the peer reports. Between
	// wanopt ends pass the peer's value (DefaultMaxAckDelay, 5 ms), which
	// keeps PTOs short on short paths.
	PeerMaxAckDelay time.Duration
	// PacketThreshold is kPacketThreshold: a packet is lost when a packet
	// sent this many packet numbers later is acknowledged.
	// DefaultPacketThreshold if 0.
	PacketThreshold uint64
	// TimeThresholdNum/TimeThresholdDen is kTimeThreshold, the multiple of
	// max(smoothed RTT, latest RTT) after which an unacknowledged packet
	// sent before an acknowledged one is lost. 9/8 if either is <= 0.
	TimeThresholdNum, TimeThresholdDen int
	// Granularity is kGranularity, the minimum loss delay and RTT variation
	// term of the PTO. DefaultGranularity if <= 0.
	Granularity time.Duration
	// MSS is the largest packet in bytes, for the pacer's burst
	// (cc.DefaultMSS if <= 0).
	MSS int
	// ProbePackets is how many probe packets OnTimeout asks for when the
	// PTO expires: 1 or 2 (DefaultProbePackets if out of range).
	ProbePackets int
	// InitialCapacity is the number of sent-packet records preallocated;
	// the ring doubles when more packets are outstanding.
	// DefaultInitialCapacity if <= 0.
	InitialCapacity int
	// LostHistory is how many recently lost packets are remembered to
	// count spurious losses. DefaultLostHistory if <= 0.
	LostHistory int
	// MaxProbeInterval caps the exponential backoff of the probe timeout:
	// a backed-off PTO never exceeds max(MaxProbeInterval, twice the PTO
	// without backoff). RFC 9002 backs off without bound, so after a long
	// outage the next probe could come long after the path returned; a
	// tunnel that must outlive outages probes at least this often, for one
	// or two packets per interval. DefaultMaxProbeInterval if <= 0.
	MaxProbeInterval time.Duration
}

func (c *SenderConfig) setDefaults() {
	if c.PeerMaxAckDelay <= 0 {
		c.PeerMaxAckDelay = DefaultPeerMaxAckDelay
	}
	if c.PacketThreshold == 0 {
		c.PacketThreshold = DefaultPacketThreshold
	}
	if c.TimeThresholdNum <= 0 || c.TimeThresholdDen <= 0 {
		c.TimeThresholdNum, c.TimeThresholdDen = DefaultTimeThresholdNum, DefaultTimeThresholdDen
	}
	if c.Granularity <= 0 {
		c.Granularity = DefaultGranularity
	}
	if c.MSS <= 0 {
		c.MSS = cc.DefaultMSS
	}
	if c.ProbePackets < 1 || c.ProbePackets > 2 {
		c.ProbePackets = DefaultProbePackets
	}
	if c.InitialCapacity <= 0 {
		c.InitialCapacity = DefaultInitialCapacity
	}
	if c.LostHistory <= 0 {
		c.LostHistory = DefaultLostHistory
	}
	if c.MaxProbeInterval <= 0 {
		c.MaxProbeInterval = DefaultMaxProbeInterval
	}
}

// SenderStats is a snapshot of a Sender's counters and state.
type SenderStats struct {
	PacketsSent           uint64 // all packets, ACK-only included
	AckElicitingSent      uint64 // packets counted in bytes in flight
	PacketsAcked          uint64 // packets newly acknowledged, ACK-only included
	PacketsLost           uint64 // packets declared lost, ACK-only included
	SpuriousLosses        uint64 // packets declared lost and acknowledged later
	PTOs                  uint64 // PTO expiries
	PersistentCongestions uint64 // persistent congestion events (RFC 9002 §7.6)
	BadAcks               uint64 // ACK frames rejected with an error
	AckDelayCapped        uint64 // ACK frames whose ack delay exceeded PeerMaxAckDelay
	PTOBackoff            int    // consecutive PTOs without an ACK (the backoff exponent)
	PacketThreshold       uint64 // the packet threshold now: the configured one, raised when the path reordered
	BytesInFlight         int
	CongestionWindow      int
	TrackedPackets        int    // sent-packet records held
	PacingRateBps         uint64 // the pacer's: the controller's, held to RateCapBps
	RateCapBps            uint64 // SetRateCap's cap, 0 if none
	SmoothedRTT           time.Duration
	RTTVar                time.Duration
	MinRTT                time.Duration
	LatestRTT             time.Duration
}

// Sender tracks the connection's sent packets, detects their loss (RFC
// 9002 §6), runs the probe timeout and drives the congestion controller
// and the pacer. See the package documentation for the calling sequence.
// It is not safe for concurrent use.
type Sender struct {
	cfg   SenderConfig
	ctrl  cc.Controller
	rtt   *cc.RTTStats
	pacer *cc.Pacer

	ring sentRing
	lost lostRing
	ev   cc.AckEvent // reused for every controller call

	bytesInFlight        int
	ackElicitingInFlight int
	largestAcked         uint64 // wire.NoPacketNumber until the first ACK
	lastAckElicitingSent monotime.Time
	firstRTTSampleAt     monotime.Time // 0 until the first RTT sample
	lossTime             monotime.Time // time-threshold deadline, 0 if none
	ptoCount             int
	probesPending        int
	packetThreshold      uint64 // cfg.PacketThreshold, raised by reordering (adaptPacketThreshold)
	peerCE               uint64
	pacerStarted         bool
	lastLossAt           monotime.Time // when a packet was last declared lost; 0: never
	rateCapBps           uint64        // SetRateCap; 0: none

	stats SenderStats
}

// NewSender returns a Sender that drives ctrl and keeps the path's RTT
// estimates in rtt (which must not be nil; it sets rtt's max ack delay to
// cfg.PeerMaxAckDelay: the tunnel's data packets exist only after the
// handshake, so the cap always applies).
func NewSender(ctrl cc.Controller, rtt *cc.RTTStats, cfg SenderConfig) *Sender {
	cfg.setDefaults()
	rtt.SetMaxAckDelay(cfg.PeerMaxAckDelay)
	return &Sender{
		cfg:             cfg,
		ctrl:            ctrl,
		rtt:             rtt,
		pacer:           cc.NewPacer(cfg.MSS),
		ring:            newSentRing(cfg.InitialCapacity),
		lost:            newLostRing(cfg.LostHistory),
		ev:              cc.AckEvent{RTT: rtt},
		largestAcked:    wire.NoPacketNumber,
		packetThreshold: cfg.PacketThreshold,
		stats:           SenderStats{PacketThreshold: cfg.PacketThreshold},
	}
}

// NextPacketNumber returns the packet number OnPacketSent expects next.
func (s *Sender) NextPacketNumber() uint64 { return s.ring.next }

// LargestAcked returns the largest packet number the peer acknowledged,
// or wire.NoPacketNumber; it is what wire.PacketNumberLen wants.
func (s *Sender) LargestAcked() uint64 { return s.largestAcked }

// BytesInFlight returns the bytes of ack-eliciting packets neither acked
// nor declared lost.
func (s *Sender) BytesInFlight() int { return s.bytesInFlight }

// CongestionWindow returns the controller's window in bytes.
func (s *Sender) CongestionWindow() int { return s.ctrl.CongestionWindow() }

// OnPacketSent records packet pn of bytes bytes, sent at now, with the
// connection's token. pn must be NextPacketNumber(): packet numbers are
// sent in order without gaps, and a violation is a bug in the caller, so it
// panics. Ack-eliciting packets count in bytes in flight, are reported to
// the controller, spend pacer credit and use up a pending probe; ACK-only
// packets are only recorded, so that their acknowledgment reaches the
// connection's ackedFn.
func (s *Sender) OnPacketSent(now monotime.Time, pn uint64, bytes int, ackEliciting bool, token uint64) {
	if pn != s.ring.next {
		panic(fmt.Sprintf("recovery: packet number %d sent, want %d", pn, s.ring.next))
	}
	p := s.ring.push()
	p.sentTime = now
	p.token = token
	p.bytes = bytes
	p.ackEliciting = ackEliciting
	s.stats.PacketsSent++
	if !ackEliciting {
		return
	}
	s.stats.AckElicitingSent++
	if s.capBinds() {
		// The cap, not the path, sets this packet's pace: its rate
		// sample must not lower the controller's bandwidth model (see
		// SetRateCap).
		s.ctrl.OnAppLimited(now, s.bytesInFlight)
	}
	p.cc = s.ctrl.OnPacketSent(now, bytes, s.bytesInFlight)
	s.bytesInFlight += bytes
	s.ackElicitingInFlight++
	s.lastAckElicitingSent = now
	if s.probesPending > 0 {
		s.probesPending--
	}
	s.startPacer(now)
	s.pacer.OnSent(now, bytes)
}

// startPacer gives the pacer the controller's rate on first use.
func (s *Sender) startPacer(now monotime.Time) {
	if !s.pacerStarted {
		s.pacerStarted = true
		s.pacer.SetRate(now, s.pacingRate())
	}
}

// pacingRate is the controller's pacing rate, held to the rate cap.
func (s *Sender) pacingRate() uint64 {
	r := s.ctrl.PacingRateBps()
	if s.capBinds() {
		r = s.rateCapBps
	}
	return r
}

// capBinds reports whether the rate cap is below the controller's pace
// (an unpaced controller, rate 0, counts as faster than any cap).
func (s *Sender) capBinds() bool {
	if s.rateCapBps == 0 {
		return false
	}
	r := s.ctrl.PacingRateBps()
	return r == 0 || r > s.rateCapBps
}

// SetRateCap holds the pace to at most capBps (0 lifts the cap) from now
// on. While the cap is below the controller's own pacing rate, sent
// packets are marked application-limited for the controller, so their
// delivery rate does not pull its bandwidth estimate down to the cap and
// a lifted cap finds the path's estimate intact.
func (s *Sender) SetRateCap(now monotime.Time, capBps uint64) {
	s.rateCapBps = capBps
	if s.pacerStarted {
		s.pacer.SetRate(now, s.pacingRate())
	}
}

// SetMSS tells the controller, if it implements cc.MSSSetter, that
// packets are mss bytes at most from now on (the tunnel's path MTU
// discovery changed the packet size). The pacer's burst stays sized for
// the packet size given at NewSender, the ceiling.
func (s *Sender) SetMSS(mss int) {
	if m, ok := s.ctrl.(cc.MSSSetter); ok {
		m.SetMSS(mss)
	}
}

// TimeToSend says when the next ack-eliciting packet may be sent: now if
// it may go now (always while PTO probes are pending), a later instant if
// the pacer holds it back, or 0 if the congestion window is full (wait
// for an ACK or a timeout; the packet that fills the window may overshoot
// it by less than one packet). ACK-only packets need no permission.
func (s *Sender) TimeToSend(now monotime.Time) monotime.Time {
	if s.probesPending > 0 {
		return now
	}
	if s.bytesInFlight >= s.ctrl.CongestionWindow() {
		return 0
	}
	s.startPacer(now)
	return s.pacer.NextSendTime(now)
}

// CanSend reports whether an ack-eliciting packet may be sent at now
// (TimeToSend(now) == now).
func (s *Sender) CanSend(now monotime.Time) bool { return s.TimeToSend(now) == now }

// ProbesPending returns how many PTO probe packets are still to be sent.
func (s *Sender) ProbesPending() int { return s.probesPending }

// OnAppLimited tells the controller that the connection had nothing to
// send at now although TimeToSend allowed it.
func (s *Sender) OnAppLimited(now monotime.Time) {
	s.ctrl.OnAppLimited(now, s.bytesInFlight)
}

// MinRTT returns the least RTT sampled over the connection's life (0
// before the first sample).
func (s *Sender) MinRTT() time.Duration { return s.rtt.MinRTT() }

// Stats returns a snapshot of the counters and current state.
func (s *Sender) Stats() SenderStats {
	st := s.stats
	st.PTOBackoff = s.ptoCount
	st.BytesInFlight = s.bytesInFlight
	st.CongestionWindow = s.ctrl.CongestionWindow()
	st.TrackedPackets = s.ring.len()
	st.PacingRateBps = s.pacer.RateBps()
	st.RateCapBps = s.rateCapBps
	st.SmoothedRTT = s.rtt.SmoothedRTT()
	st.RTTVar = s.rtt.RTTVar()
	st.MinRTT = s.rtt.MinRTT()
	st.LatestRTT = s.rtt.LatestRTT()
	return st
}
