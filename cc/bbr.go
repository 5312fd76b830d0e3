package cc

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// BBR constants from the IETF CCWG BBR draft (draft-ietf-ccwg-bbr, BBRv3).
const (
	bbrStartupPacingGain = 2.77 // 4*ln(2)
	bbrStartupCwndGain   = 2.0
	bbrDrainPacingGain   = 0.35
	bbrDefaultCwndGain   = 2.0
	bbrUpCwndGain        = 2.25
	bbrDownPacingGain    = 0.9
	bbrUpPacingGain      = 1.25
	bbrProbeRTTCwndGain  = 0.5
	bbrPacingMargin      = 0.01 // pace 1 % below the model's bandwidth
	bbrLossThresh        = 0.02 // loss rate above the path's random loss that marks inflight as too high
	bbrECNThresh         = 0.5  // CE-marked fraction that marks it too high
	bbrBeta              = 0.7  // multiplicative decrease of the bounds
	bbrHeadroom          = 0.15 // share of inflight_hi left to other flows
	bbrFullBwThresh      = 1.25 // growth that counts as "still growing"
	bbrFullBwCount       = 3    // rounds without growth that fill the pipe
	bbrStartupFullLoss   = 6    // loss events in a round that end Startup
	bbrMinPipeCwndPkts   = 4
	bbrExtraAckedRounds  = 10
	bbrMaxProbeUpRounds  = 30
	bbrMaxRenoRounds     = 63

	bbrProbeRTTInterval = 5 * time.Second
	bbrProbeRTTDuration = 200 * time.Millisecond
	bbrMinRTTFilterLen  = 10 * time.Second
	bbrProbeWaitBase    = 2 * time.Second // plus uniform [0, 1 s)
	bbrMaxSendQuantum   = 64 << 10
)

// BBRMode is BBR's state, with ProbeBW split into its four phases.
type BBRMode uint8

// BBR states and ProbeBW phases.
const (
	BBRStartup BBRMode = iota
	BBRDrain
	BBRProbeBWDown
	BBRProbeBWCruise
	BBRProbeBWRefill
	BBRProbeBWUp
	BBRProbeRTT
)

var bbrModeNames = [...]string{"startup", "drain", "probe_bw_down", "probe_bw_cruise", "probe_bw_refill", "probe_bw_up", "probe_rtt"}

// String returns the mode's lower-case name, e.g. "probe_bw_up".
func (m BBRMode) String() string {
	if int(m) < len(bbrModeNames) {
		return bbrModeNames[m]
	}
	return "unknown"
}

// IsProbeBW reports whether m is one of the four ProbeBW phases.
func (m BBRMode) IsProbeBW() bool { return m >= BBRProbeBWDown && m <= BBRProbeBWUp }

// ackPhase tracks which ACKs carry the feedback of a bandwidth probe.
type ackPhase uint8

const (
	acksInit ackPhase = iota
	acksRefilling
	acksProbeStarting
	acksProbeFeedback
	acksProbeStopping
)

// BBRConfig configures NewBBR. The zero value is usable.
type BBRConfig struct {
	// MSS is the largest packet payload in bytes (DefaultMSS if <= 0).
	MSS int
	// InitialCwndPackets is the initial window in packets (10 if <= 0).
	InitialCwndPackets int
	// Rand drives the randomised ProbeBW cycle length. Pass a seeded
	// source for reproducible runs; nil uses a fixed seed.
	Rand *rand.Rand
	// InitialBwBps, if set, is the path's bottleneck rate in bits per
	// second as the operator knows it. With the first RTT sample BBR takes
	// it as its bandwidth estimate and goes straight to ProbeBW with a
	// window of two BDPs, skipping Startup (about 8 round trips). It is
	// then kept or replaced by measurements; a hint above the real rate
	// costs losses until the bounds and the max filter correct it.
	InitialBwBps uint64
}

// BBR is the BBR congestion controller of draft-ietf-ccwg-bbr (BBRv3):
// it models the path's bottleneck bandwidth and round-trip propagation
// time, paces at the bandwidth and bounds inflight to a multiple of the
// bandwidth-delay product, with loss- and ECN-driven bounds. It
// implements Controller. Not safe for concurrent use.
type BBR struct {
	mss       int
	initCwnd  int
	initialBw uint64 // BBRConfig.InitialBwBps; 0 once used
	rng       *rand.Rand
	rs        RateSampler

	mode          BBRMode
	pacingGain    float64
	cwndGain      float64
	cwnd          int
	pacingRateBps uint64
	pacingInit    bool
	sendQuantum   int
	inflight      int // bytes in flight after the latest event
	ceBytes       int // bytes reported CE-marked by the current ACK

	// Model of the path.
	bwSlots        [2]uint64 // max bw of the previous and current cycle
	cycleCount     int64
	maxBw          uint64
	bw             uint64 // min(maxBw, bwLo)
	bwLo           uint64 // math.MaxUint64 when unset
	bwLatest       uint64
	inflightHi     int // math.MaxInt when unset
	inflightLo     int // math.MaxInt when unset
	inflightLatest int
	minRTT         time.Duration // 0 until the first sample
	minRTTStamp    monotime.Time
	extraAcked     MaxFilter[int]
	extraAckedT0   monotime.Time
	extraAckedSum  int

	// Round and loss-round accounting.
	nextRoundDelivered int64
	roundStart         bool
	roundCount         int64
	roundsSinceProbe   int
	lossRoundDelivered int64
	lossRoundStart     bool
	lossInRound        bool
	lossEventsInRound  int
	lostInRound        int
	ackedInRound       int
	prevLostInRound    int           // lostInRound of the previous loss round
	prevAckedInRound   int           // ackedInRound of the previous loss round
	appLimitedInRound  bool          // a rate sample of this loss round was app-limited
	minRTTInRound      time.Duration // least RTT sample of this loss round (0: none)

	// The path's random loss, learnt from quiet rounds (see
	// randomLossRate): decayed sums of their lost and total bytes.
	quietLost, quietTotal float64
	cwndLimited           bool // cwnd-limited in this or the previous round
	cwndLimitedNow        bool // cwnd-limited in this round

	// Startup.
	filledPipe  bool
	fullBw      uint64
	fullBwCount int
	fullBwNow   bool

	// ProbeBW.
	cycleStamp     monotime.Time
	probeWait      time.Duration
	ackPhase       ackPhase
	probeSamples   bool
	probeUpCnt     int
	probeUpAcks    int
	probeUpRounds  int
	lastProbeStart monotime.Time

	// ProbeRTT.
	probeRTTMinDelay  time.Duration
	probeRTTMinStamp  monotime.Time
	probeRTTExpired   bool
	probeRTTDoneStamp monotime.Time
	probeRTTRoundDone bool
	probeRTTCount     int
	priorCwnd         int
	idleRestart       bool

	// Loss recovery (packet conservation).
	inRecovery         bool
	recoveryStart      monotime.Time
	recoveryInRound    bool // recovery was active at some time in this round
	recoveryRounds     int  // consecutive completed rounds with recovery active
	packetConservation bool
}

var _ Controller = (*BBR)(nil)

// NewBBR returns a BBR controller in Startup.
func NewBBR(cfg BBRConfig) *BBR {
	mss := cfg.MSS
	if mss <= 0 {
		mss = DefaultMSS
	}
	initPkts := cfg.InitialCwndPackets
	if initPkts <= 0 {
		initPkts = 10
	}
	rng := cfg.Rand
	if rng == nil {
		rng = rand.New(rand.NewPCG(0x5eed, 0xbb1))
	}
	b := &BBR{
		mss:        mss,
		initCwnd:   initPkts * mss,
		initialBw:  cfg.InitialBwBps,
		rng:        rng,
		cwnd:       initPkts * mss,
		bwLo:       math.MaxUint64,
		inflightHi: math.MaxInt,
		inflightLo: math.MaxInt,
		extraAcked: NewMaxFilter[int](bbrExtraAckedRounds),
		priorCwnd:  initPkts * mss,
	}
	b.probeRTTMinDelay = time.Duration(math.MaxInt64)
	b.initPacingRate(time.Millisecond)
	b.enterStartup()
	b.setSendQuantum()
	return b
}

// Name returns "bbr".
func (b *BBR) Name() string { return "bbr" }

// CongestionWindow returns the bytes BBR allows in flight.
func (b *BBR) CongestionWindow() int { return b.cwnd }

// PacingRateBps returns BBR's pacing rate in bits per second.
func (b *BBR) PacingRateBps() uint64 { return b.pacingRateBps }

// SendQuantumBytes returns the draft's send quantum: the largest burst,
// in bytes, BBR expects the sender to emit at once (1 ms at the pacing
// rate, between 2 packets and 64 KiB).
func (b *BBR) SendQuantumBytes() int { return b.sendQuantum }

// OnPacketSent implements Controller.
func (b *BBR) OnPacketSent(now monotime.Time, bytes, bytesInFlight int) PacketState {
	if bytesInFlight == 0 && b.rs.AppLimited() {
		b.handleRestartFromIdle(now)
	}
	if bytesInFlight+bytes >= b.cwnd {
		b.cwndLimitedNow = true
		b.cwndLimited = true
	}
	b.inflight = bytesInFlight + bytes
	return b.rs.OnPacketSent(now, bytes, bytesInFlight)
}

// OnAppLimited implements Controller.
func (b *BBR) OnAppLimited(now monotime.Time, bytesInFlight int) {
	b.rs.OnAppLimited(bytesInFlight)
}

// OnPersistentCongestion implements Controller: the window collapses to
// the minimum and regrows from ACKs; the path model is kept.
func (b *BBR) OnPersistentCongestion(now monotime.Time) {
	b.saveCwnd()
	b.cwnd = b.minPipeCwnd()
}

// OnAck implements Controller: it processes the losses, takes the rate
// sample, updates the model and state machine, then pacing rate and cwnd.
func (b *BBR) OnAck(ev *AckEvent) {
	now := ev.Now
	b.inflight = ev.BytesInFlight
	if !b.pacingInit && ev.RTT != nil && ev.RTT.HasSample() {
		b.pacingInit = true
		if !b.filledPipe {
			b.initPacingRate(ev.RTT.SmoothedRTT())
		}
	}
	b.ceBytes = min(ev.ECNCE*b.mss, int(^uint(0)>>2))
	b.onLosses(now, ev)
	var minRTT time.Duration
	if ev.RTT != nil {
		minRTT = ev.RTT.MinRTT()
	}
	rs := b.rs.OnAck(now, ev.Acked, ev.Lost, minRTT)
	b.updateRecovery(ev, &rs)
	if len(ev.Acked) > 0 {
		b.updateModelAndState(now, &rs, ev)
	}
	if b.initialBw != 0 && b.minRTT > 0 {
		b.seedModel(now)
	}
	b.setPacingRate(b.pacingGain)
	b.setSendQuantum()
	b.setCwnd(&rs)
}

// seedModel takes InitialBwBps as the bandwidth estimate once the min RTT
// is known, and enters ProbeBW with the model's window at once (see
// BBRConfig.InitialBwBps).
func (b *BBR) seedModel(now monotime.Time) {
	bw := b.initialBw
	b.initialBw = 0
	if b.filledPipe {
		return
	}
	b.bwSlots[1] = max(b.bwSlots[1], bw)
	b.maxBw = max(b.bwSlots[0], b.bwSlots[1])
	b.boundBwForModel()
	b.filledPipe = true
	b.startProbeBWDown(now)
	b.startProbeBWCruise()
	b.cwnd = max(b.cwnd, b.bdpMultiple(b.bw, b.cwndGain))
}

// updateModelAndState is the draft's BBRUpdateModelAndState.
func (b *BBR) updateModelAndState(now monotime.Time, rs *RateSample, ev *AckEvent) {
	b.updateLatestDeliverySignals(rs)
	b.updateCongestionSignals(rs, ev)
	b.updateAckAggregation(now, rs)
	b.checkFullBwReached(rs)
	b.checkStartupDone()
	b.checkDrain(now)
	b.updateProbeBWCyclePhase(now, rs)
	b.updateMinRTT(now, rs)
	b.checkProbeRTT(now, rs)
	b.advanceLatestDeliverySignals(rs)
	b.boundBwForModel()
}

// BBRState is a snapshot of BBR's model and state for tests, metrics and
// logs. Unset bounds are reported as 0.
type BBRState struct {
	Mode            BBRMode
	BwBps           uint64 // bandwidth the model uses: min(MaxBwBps, BwLoBps)
	MaxBwBps        uint64 // windowed max delivery rate (bw_hi), 2 ProbeBW cycles
	BwLoBps         uint64 // short-term lower bound (bw_lo), 0 if unset
	MinRTT          time.Duration
	CwndBytes       int
	PacingRateBps   uint64
	InflightHiBytes int // long-term upper bound, 0 if unset
	InflightLoBytes int // short-term lower bound, 0 if unset
	BDPBytes        int
	ExtraAckedBytes int
	RoundCount      int64
	CycleCount      int64
	FilledPipe      bool
	InRecovery      bool
	ProbeRTTCount   int // ProbeRTT episodes so far
	DeliveredBytes  int64
	LostBytes       int64
	// RandomLoss is the loss rate BBR attributes to the path rather than
	// to congestion (see randomLossRate); its loss threshold is
	// bbrLossThresh above it.
	RandomLoss float64
}

// State returns a snapshot of the controller.
func (b *BBR) State() BBRState {
	s := BBRState{
		Mode:            b.mode,
		BwBps:           b.bw,
		MaxBwBps:        b.maxBw,
		MinRTT:          b.minRTT,
		CwndBytes:       b.cwnd,
		PacingRateBps:   b.pacingRateBps,
		BDPBytes:        b.bdp(b.bw),
		ExtraAckedBytes: b.extraAcked.Get(),
		RoundCount:      b.roundCount,
		CycleCount:      b.cycleCount,
		FilledPipe:      b.filledPipe,
		InRecovery:      b.inRecovery,
		ProbeRTTCount:   b.probeRTTCount,
		DeliveredBytes:  b.rs.Delivered(),
		LostBytes:       b.rs.LostBytes(),
		RandomLoss:      b.randomLossRate(),
	}
	if b.bwLo != math.MaxUint64 {
		s.BwLoBps = b.bwLo
	}
	if b.inflightHi != math.MaxInt {
		s.InflightHiBytes = b.inflightHi
	}
	if b.inflightLo != math.MaxInt {
		s.InflightLoBytes = b.inflightLo
	}
	return s
}

// SetMSS sets the packet size minimums and increments are counted in
// (cc.MSSSetter); mss <= 0 is ignored.
func (b *BBR) SetMSS(mss int) {
	if mss > 0 {
		b.mss = mss
	}
}
