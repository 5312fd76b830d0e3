package cc

import (
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// fixedMinCwndPkts is the smallest window Fixed allows, in packets.
const fixedMinCwndPkts = 16

// Fixed is a controller for dedicated links of known capacity: it paces at
// a set rate and ignores loss. Its window is 2 × rate × smoothed RTT (the
// initial RTT before a sample), at least 16 packets, so a full pipe never
// stalls on cwnd while a dead peer cannot be flooded without bound. It
// implements Controller. Not safe for concurrent use.
type Fixed struct {
	mss     int
	rateBps uint64
	srtt    time.Duration
}

var _ Controller = (*Fixed)(nil)

// NewFixed returns a controller pacing at rateBps bits per second with
// packets of mss bytes (DefaultMSS if <= 0). rateBps must be positive.
func NewFixed(rateBps uint64, mss int) *Fixed {
	if mss <= 0 {
		mss = DefaultMSS
	}
	return &Fixed{mss: mss, rateBps: max(rateBps, 1), srtt: InitialRTT}
}

// Name returns "fixed".
func (f *Fixed) Name() string { return "fixed" }

// PacingRateBps returns the configured rate.
func (f *Fixed) PacingRateBps() uint64 { return f.rateBps }

// CongestionWindow returns max(2 × rate × srtt, 16 packets).
func (f *Fixed) CongestionWindow() int {
	w := bytesAtRate(f.rateBps, 2*f.srtt)
	return int(max(w, uint64(fixedMinCwndPkts*f.mss)))
}

// OnPacketSent implements Controller.
func (f *Fixed) OnPacketSent(now monotime.Time, bytes, bytesInFlight int) PacketState {
	return PacketState{SentTime: now, Bytes: bytes, TxInFlight: bytesInFlight + bytes}
}

// OnAck implements Controller: it only follows the smoothed RTT.
func (f *Fixed) OnAck(ev *AckEvent) {
	if ev.RTT != nil && ev.RTT.HasSample() {
		f.srtt = ev.RTT.SmoothedRTT()
	}
}

// OnAppLimited implements Controller; it has no effect.
func (f *Fixed) OnAppLimited(now monotime.Time, bytesInFlight int) {}

// OnPersistentCongestion implements Controller; it has no effect: the
// link's rate is known.
func (f *Fixed) OnPersistentCongestion(now monotime.Time) {}

// SetMSS sets the packet size minimums and increments are counted in
// (cc.MSSSetter); mss <= 0 is ignored.
func (f *Fixed) SetMSS(mss int) {
	if mss > 0 {
		f.mss = mss
	}
}
