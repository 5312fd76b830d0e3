package simtcp

import (
	"math"
	"time"

	"github.com/wanopt/wanopt/internal/monotime"
)

// CUBIC constants of RFC 9438.
const (
	cubicBeta = 0.7
	cubicC    = 0.4 // segments per second cubed
)

// HyStart++ constants of RFC 9406.
const (
	hsMinRTTThresh   = 4 * time.Millisecond
	hsMaxRTTThresh   = 16 * time.Millisecond
	hsMinRTTDivisor  = 8
	hsNRTTSample     = 8
	hsCSSGrowthDiv   = 4
	hsCSSRounds      = 5
	hsNoRTT          = time.Duration(math.MaxInt64)
	hsSlowStart      = 0
	hsConservativeSS = 1
	hsDone           = 2
)

// Cubic is the CUBIC window controller of RFC 9438: W_cubic(t) = C(t-K)^3 +
// W_max, decrease by beta = 0.7, fast convergence and the Reno-friendly
// W_est; with HyStart set, slow start uses HyStart++ (RFC 9406), as Linux
// does. Windows are in bytes as float64.
type Cubic struct {
	// HyStart enables HyStart++ in the first slow start; NewCubic sets it.
	HyStart bool

	mss       float64
	cwnd      float64
	ssthresh  float64
	wMax      float64       // window before the last reduction
	cwndPrior float64       // cwnd at the last reduction
	k         float64       // seconds from the epoch start to W_max
	wEst      float64       // Reno-friendly window estimate
	epoch     monotime.Time // start of the congestion-avoidance epoch; 0 = none

	hs hyStart
}

// hyStart is the state of RFC 9406's algorithm.
type hyStart struct {
	state                 int
	round                 int64 // Ack.Round of the current round
	lastMinRTT, curMinRTT time.Duration
	samples               int
	cssBaseline           time.Duration
	cssRounds             int
	exitedAtBytes         int // window when slow start was left for CSS, 0 if never
}

var _ WindowController = (*Cubic)(nil)

// NewCubic returns a CUBIC controller with HyStart++ for segments of mss bytes.
func NewCubic(mss int) *Cubic {
	m := float64(mss)
	return &Cubic{
		HyStart: true, mss: m, cwnd: initialWindowSegs * m, ssthresh: math.Inf(1),
		hs: hyStart{lastMinRTT: hsNoRTT, curMinRTT: hsNoRTT},
	}
}

// wCubic returns W_cubic(t) in bytes, t in seconds since the epoch.
func (c *Cubic) wCubic(t float64) float64 {
	d := t - c.k
	return cubicC*d*d*d*c.mss + c.wMax
}

// OnAck implements WindowController.
func (c *Cubic) OnAck(now monotime.Time, a Ack) {
	acked := float64(a.Bytes)
	if c.cwnd < c.ssthresh {
		if c.HyStart && c.hs.state != hsDone && c.hyStartAck(a) {
			return
		}
		inc := min(acked, c.ssthresh-c.cwnd)
		c.cwnd += inc
		acked -= inc
		if acked <= 0 {
			return
		}
	}
	if c.epoch.IsZero() {
		c.epoch = now
		c.wEst = c.cwnd
		if c.cwnd < c.wMax {
			c.k = math.Cbrt((c.wMax - c.cwnd) / c.mss / cubicC)
		} else {
			c.k, c.wMax = 0, c.cwnd
		}
	}
	t := now.Sub(c.epoch).Seconds()
	// Reno-friendly estimate (RFC 9438 §4.3): alpha makes CUBIC's average
	// rate equal Reno's; once past the previous window it grows like Reno.
	alpha := 3 * (1 - cubicBeta) / (1 + cubicBeta)
	if c.wEst >= c.cwndPrior {
		alpha = 1
	}
	c.wEst += alpha * c.mss * acked / c.cwnd
	if c.wCubic(t) < c.wEst {
		c.cwnd = c.wEst
		return
	}
	// Concave and convex regions (§4.4, §4.5): approach the window the cubic
	// function reaches one RTT from now.
	target := c.wCubic(t + a.SRTT.Seconds())
	target = min(max(target, c.cwnd), 1.5*c.cwnd)
	c.cwnd += (target - c.cwnd) / c.cwnd * acked
}

// hyStartAck runs RFC 9406 for an ACK in slow start. It reports whether it
// grew the window itself (conservative slow start).
func (c *Cubic) hyStartAck(a Ack) bool {
	h := &c.hs
	if a.Round != h.round { // a new round begins
		h.round = a.Round
		h.lastMinRTT, h.curMinRTT, h.samples = h.curMinRTT, hsNoRTT, 0
		if h.state == hsConservativeSS {
			h.cssRounds++
			if h.cssRounds >= hsCSSRounds { // leave for congestion avoidance
				h.state = hsDone
				c.ssthresh = c.cwnd
				return false
			}
		}
	}
	if a.RTT > 0 {
		h.curMinRTT = min(h.curMinRTT, a.RTT)
		h.samples++
	}
	switch h.state {
	case hsSlowStart:
		if h.samples >= hsNRTTSample && h.curMinRTT != hsNoRTT && h.lastMinRTT != hsNoRTT {
			thresh := min(max(h.lastMinRTT/hsMinRTTDivisor, hsMinRTTThresh), hsMaxRTTThresh)
			if h.curMinRTT >= h.lastMinRTT+thresh {
				h.state, h.cssBaseline, h.cssRounds = hsConservativeSS, h.curMinRTT, 0
				h.exitedAtBytes = int(c.cwnd)
			}
		}
		return false
	default: // conservative slow start
		c.cwnd += float64(a.Bytes) / hsCSSGrowthDiv
		if h.samples >= hsNRTTSample && h.curMinRTT < h.cssBaseline {
			h.state = hsSlowStart // the RTT rise was spurious
		}
		return true
	}
}

func (c *Cubic) reduce() {
	c.epoch = 0
	c.hs.state = hsDone // HyStart++ only runs in the first slow start
	c.cwndPrior = c.cwnd
	if c.cwnd < c.wMax { // fast convergence (§4.7)
		c.wMax = c.cwnd * (1 + cubicBeta) / 2
	} else {
		c.wMax = c.cwnd
	}
	c.ssthresh = max(c.cwnd*cubicBeta, 2*c.mss)
}

// OnLoss implements WindowController.
func (c *Cubic) OnLoss(monotime.Time) {
	c.reduce()
	c.cwnd = c.ssthresh
}

// OnRTO implements WindowController: the reduction of a loss, then one
// segment (RFC 9438 §4.8, RFC 5681).
func (c *Cubic) OnRTO(monotime.Time) {
	c.reduce()
	c.cwnd = c.mss
}

// Cwnd implements WindowController.
func (c *Cubic) Cwnd() int { return int(c.cwnd) }
