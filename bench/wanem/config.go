package wanem

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Limits and defaults of a Config.
const (
	// MaxPacketBytes is the largest packet a Pipe accepts (the largest IP
	// packet). Larger and empty packets are counted in Counters.Invalid and
	// dropped.
	MaxPacketBytes = 65535

	// DefaultQueueBytes is the drop-tail queue when RateBps is set and
	// neither QueueBytes nor QueueDelay is: 2 MiB, about 67 ms at 250 Mbit/s.
	DefaultQueueBytes = 2 << 20

	// MinQueueBytes is the smallest queue limit accepted: one 1500-byte
	// packet.
	MinQueueBytes = 1500

	// DefaultReorderDelay is how long a reordered packet is held back when
	// ReorderPct is set and ReorderDelay is zero.
	DefaultReorderDelay = 2 * time.Millisecond

	// MinMTU is the smallest Config.MTU accepted: the IPv4 minimum
	// (RFC 791's 68 bytes).
	MinMTU = 68

	// maxRateBps bounds RateBps so that the exact transmit-time arithmetic
	// cannot overflow 64 bits.
	maxRateBps = 1 << 60
)

// ErrInvalidConfig is wrapped by every error NewPipe and NewLink return for a
// Config that cannot be emulated; the message names the field and what to do.
var ErrInvalidConfig = errors.New("wanem: invalid link config")

// Config is the impairment of one direction of a link. The zero Config is a
// perfect link: no delay, no loss, unlimited rate.
//
// A packet entering the direction at time now goes through, in order:
//  0. an IP fragment is counted in Fragments, whatever happens next;
//     while the direction is down (Pipe.SetDown, set at run time) the
//     packet is dropped and counted in OutageDrops; packets already in
//     the pipe are still released: the outage acts at the entrance;
//     a packet larger than MTU is dropped silently and counted in
//     MTUDrops (a black hole that sends no ICMP);
//  1. random loss with probability LossPct/100;
//  2. burst loss by the Gilbert–Elliott model in BurstLoss, if set;
//  3. the middlebox: ForgeSACK, WindowClamp and TamperUDPPct rewrite the
//     packet, so the queue and rate limiter see it rewritten; the counters
//     count rewritten packets the queue took;
//  4. the drop-tail queue: with RateBps set, the packet is dropped if the
//     bytes whose departure is after now plus its size exceed the limit;
//  5. the rate limiter: it departs at max(now, previous departure) +
//     size*8/RateBps, in exact integer nanoseconds with the fraction
//     carried, so no error accumulates;
//  6. release = departure + Delay + uniform jitter in [0, Jitter], raised
//     to the previous packet's release, so jitter never reorders;
//  7. with probability ReorderPct/100 it is held back another
//     ReorderDelay, and the packets after it overtake it;
//  8. with probability DupPct/100 a copy is released right after it,
//     using neither queue nor rate.
//
// Each random step has its own generator seeded from Seed, so the same
// Seed gives the same losses whether or not jitter or reordering is on.
type Config struct {
	// Delay is the one-way propagation delay, at least 0.
	Delay time.Duration `json:"delay,omitempty"`
	// Jitter is the largest random extra delay, at least 0.
	Jitter time.Duration `json:"jitter,omitempty"`
	// LossPct is the random loss in percent, in [0, 100].
	LossPct float64 `json:"loss_pct,omitempty"`
	// BurstLoss, if not nil, adds Gilbert–Elliott burst loss.
	BurstLoss *GilbertElliott `json:"burst_loss,omitempty"`
	// ReorderPct is the percentage of packets held back, in [0, 100].
	ReorderPct float64 `json:"reorder_pct,omitempty"`
	// ReorderDelay is how long a reordered packet is held back; zero means
	// DefaultReorderDelay.
	ReorderDelay time.Duration `json:"reorder_delay,omitempty"`
	// DupPct is the percentage of packets duplicated, in [0, 100].
	DupPct float64 `json:"dup_pct,omitempty"`
	// RateBps is the bottleneck rate in bits of IP packet per second;
	// 0 means unlimited (then there is no queue either).
	RateBps uint64 `json:"rate_bps,omitempty"`
	// QueueBytes is the drop-tail queue limit in bytes. At most one of
	// QueueBytes and QueueDelay may be set; with neither, the limit is
	// DefaultQueueBytes. Either needs RateBps.
	QueueBytes int `json:"queue_bytes,omitempty"`
	// QueueDelay is the queue limit as time at RateBps, converted to bytes
	// (rounded down).
	QueueDelay time.Duration `json:"queue_delay,omitempty"`
	// Seed seeds the random steps.
	Seed int64 `json:"seed,omitempty"`
	// MTU is the largest IP packet, in bytes, the link carries; larger
	// ones are dropped without an answer. 0: no limit but MaxPacketBytes.
	// At least MinMTU. Changed at run time by Pipe.SetMTU, Link.SetMTU.
	MTU int `json:"mtu,omitempty"`

	// The middlebox: a device on the path that rewrites what it
	// recognises (wanbench sack). Each rewrite handles IPv4 and IPv6
	// without extension headers, keeps checksums right, and leaves
	// fragments and packets that do not parse untouched.

	// ForgeSACK, if not nil, adds the SACK block [ack+Offset,
	// ack+Offset+Length) to every pure TCP ACK (no SYN, RST or payload),
	// whether or not SACK was negotiated; a segment with no room for the
	// option is left alone. Counted in Counters.SACKForged.
	ForgeSACK *ForgedSACK `json:"forge_sack,omitempty"`
	// WindowClamp, if positive, lowers TCP window fields so that none
	// advertises more than WindowClamp bytes after the window scale seen
	// on the connection's SYN; at most MaxWindowClamp. Counted in
	// Counters.WindowsClamped.
	WindowClamp int `json:"window_clamp,omitempty"`
	// TamperUDPPct is the percentage of UDP datagrams, in [0, 100], whose
	// last payload byte is inverted (checksum fixed). Counted in
	// Counters.UDPTampered.
	TamperUDPPct float64 `json:"tamper_udp_pct,omitempty"`
}

// GilbertElliott is the two-state burst-loss model. For each packet the
// chain first moves (good→bad with PGoodToBad, bad→good with PBadToGood),
// then the packet is lost with the new state's loss probability. All
// fields are probabilities in [0, 1]. With LossInBad 1 and LossInGood 0 the
// mean burst is 1/PBadToGood packets.
type GilbertElliott struct {
	PGoodToBad float64 `json:"p_good_to_bad"`
	PBadToGood float64 `json:"p_bad_to_good"`
	LossInGood float64 `json:"loss_in_good"`
	LossInBad  float64 `json:"loss_in_bad"`
}

// Validate reports whether c can be emulated. The error wraps
// ErrInvalidConfig and names the offending field.
func (c Config) Validate() error {
	_, err := c.queueLimitBytes()
	return err
}

// queueLimitBytes validates c and returns the drop-tail queue limit in bytes
// (0 when the rate is unlimited).
func (c Config) queueLimitBytes() (int64, error) {
	bad := func(format string, args ...any) (int64, error) {
		return 0, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.Delay < 0:
		return bad("Delay %v is negative; use 0 or more", c.Delay)
	case c.Jitter < 0:
		return bad("Jitter %v is negative; use 0 or more", c.Jitter)
	case c.ReorderDelay < 0:
		return bad("ReorderDelay %v is negative; use 0 (default %v) or more", c.ReorderDelay, DefaultReorderDelay)
	case c.QueueBytes < 0:
		return bad("QueueBytes %d is negative; use 0 (default) or more", c.QueueBytes)
	case c.QueueDelay < 0:
		return bad("QueueDelay %v is negative; use 0 (default) or more", c.QueueDelay)
	case c.RateBps > maxRateBps:
		return bad("RateBps %d is above the supported %d", c.RateBps, uint64(maxRateBps))
	case c.MTU != 0 && (c.MTU < MinMTU || c.MTU > MaxPacketBytes):
		return bad("MTU %d is outside [%d, %d]; use 0 for no limit", c.MTU, MinMTU, MaxPacketBytes)
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{"LossPct", c.LossPct}, {"ReorderPct", c.ReorderPct}, {"DupPct", c.DupPct}, {"TamperUDPPct", c.TamperUDPPct}} {
		if !(p.v >= 0 && p.v <= 100) { // also rejects NaN
			return bad("%s %v is outside [0, 100] (it is a percentage)", p.name, p.v)
		}
	}
	if ge := c.BurstLoss; ge != nil {
		for _, p := range []struct {
			name string
			v    float64
		}{{"PGoodToBad", ge.PGoodToBad}, {"PBadToGood", ge.PBadToGood}, {"LossInGood", ge.LossInGood}, {"LossInBad", ge.LossInBad}} {
			if !(p.v >= 0 && p.v <= 1) {
				return bad("BurstLoss.%s %v is outside [0, 1] (it is a probability, not a percentage)", p.name, p.v)
			}
		}
	}
	if f := c.ForgeSACK; f != nil {
		switch {
		case f.Offset == 0 || f.Length == 0:
			return bad("ForgeSACK offset %d and length %d: both must be at least 1 byte", f.Offset, f.Length)
		case uint64(f.Offset)+uint64(f.Length) >= 1<<31:
			// Beyond half the sequence space the block would read as
			// lying before the ACK.
			return bad("ForgeSACK offset %d + length %d reaches 2^31 bytes past the ACK; keep the sum below %d", f.Offset, f.Length, 1<<31)
		}
	}
	if c.WindowClamp < 0 || c.WindowClamp > MaxWindowClamp {
		return bad("WindowClamp %d is outside [0, %d] (0: no clamp; %d is the largest window TCP can advertise)", c.WindowClamp, MaxWindowClamp, MaxWindowClamp)
	}
	if c.RateBps == 0 {
		if c.QueueBytes != 0 || c.QueueDelay != 0 {
			return bad("QueueBytes/QueueDelay need RateBps: an unlimited link has no queue; set RateBps or clear the queue")
		}
		return 0, nil
	}
	if c.QueueBytes != 0 && c.QueueDelay != 0 {
		return bad("both QueueBytes (%d) and QueueDelay (%v) are set; set one", c.QueueBytes, c.QueueDelay)
	}
	limit := int64(DefaultQueueBytes)
	switch {
	case c.QueueBytes != 0:
		limit = int64(c.QueueBytes)
	case c.QueueDelay != 0:
		// bytes = delay[ns] * rate[bit/s] / 8e9, in 128 bits.
		hi, lo := bits.Mul64(uint64(c.QueueDelay), c.RateBps)
		if hi >= 8e9 {
			return bad("QueueDelay %v at %d bit/s is too large", c.QueueDelay, c.RateBps)
		}
		q, _ := bits.Div64(hi, lo, 8e9)
		if q > math.MaxInt64 {
			return bad("QueueDelay %v at %d bit/s is too large", c.QueueDelay, c.RateBps)
		}
		limit = int64(q)
	}
	if limit < MinQueueBytes {
		return bad("queue limit %d bytes (QueueBytes %d, QueueDelay %v at %d bit/s) is below %d bytes, one full-size packet; raise it",
			limit, c.QueueBytes, c.QueueDelay, c.RateBps, MinQueueBytes)
	}
	return limit, nil
}

// reorderDelay is ReorderDelay with its default applied.
func (c Config) reorderDelay() time.Duration {
	if c.ReorderDelay == 0 {
		return DefaultReorderDelay
	}
	return c.ReorderDelay
}
