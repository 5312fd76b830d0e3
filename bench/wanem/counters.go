package wanem

import (
	"math"
	"time"
)

// Counters is a snapshot of one direction's counters. Packet counts are
// packets, byte counts are IP bytes.
type Counters struct {
	// Packets and Bytes count packets released, duplicates included.
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// Lost counts packets dropped by random loss (LossPct).
	Lost uint64 `json:"lost"`
	// BurstLost counts packets dropped by the Gilbert–Elliott model.
	BurstLost uint64 `json:"burst_lost"`
	// QueueDrops and QueueDropBytes count drops at a full queue.
	QueueDrops     uint64 `json:"queue_drops"`
	QueueDropBytes uint64 `json:"queue_drop_bytes"`
	// OutageDrops counts packets that arrived while the direction was down.
	OutageDrops uint64 `json:"outage_drops"`
	// MTUDrops counts packets dropped as larger than the MTU.
	MTUDrops uint64 `json:"mtu_drops"`
	// Fragments counts IP fragments that arrived (see isFragment), whether
	// or not they were then dropped.
	Fragments uint64 `json:"fragments"`
	// Invalid counts empty packets and packets over MaxPacketBytes.
	Invalid uint64 `json:"invalid"`
	// Duplicated counts extra copies made (DupPct).
	Duplicated uint64 `json:"duplicated"`
	// Reordered counts packets held back (ReorderPct).
	Reordered uint64 `json:"reordered"`
	// QueueHighWaterBytes is the most bytes ever queued, arrival included.
	QueueHighWaterBytes int64 `json:"queue_high_water_bytes"`
	// WriteErrors counts packets the Link's output device rejected without
	// failing. Always zero for a bare Pipe.
	WriteErrors uint64 `json:"write_errors"`
	// SACKForged, WindowsClamped and UDPTampered count packets the
	// middlebox rewrote and the queue took; a duplicate counts once.
	SACKForged     uint64 `json:"sack_forged"`
	WindowsClamped uint64 `json:"windows_clamped"`
	UDPTampered    uint64 `json:"udp_tampered"`
	// Lateness is how late packets were released after their release time:
	// the emulator's own precision. A packet released early counts as on
	// time here and in EarlyMax.
	Lateness Lateness `json:"lateness"`
	// EarlyMax is the most any packet was released before its release
	// time: at most the bound passed to DequeueEarly.
	EarlyMax time.Duration `json:"early_max"`
}

// LatenessBuckets is the number of buckets of a Lateness histogram.
const LatenessBuckets = 22

// Lateness is a histogram of release lateness on a power-of-two scale of
// microseconds: Buckets[0] counts lateness below 1 µs, Buckets[i] for
// 1 ≤ i < LatenessBuckets-1 counts [2^(i-1), 2^i) µs, and the last bucket
// counts everything from 2^(LatenessBuckets-2) µs (about 1 s) up.
type Lateness struct {
	Max     time.Duration           `json:"max"`
	Buckets [LatenessBuckets]uint64 `json:"buckets"`
}

// record adds one lateness sample; a negative one counts as zero.
func (l *Lateness) record(late time.Duration) {
	if late < 0 {
		late = 0
	}
	if late > l.Max {
		l.Max = late
	}
	us := uint64(late / time.Microsecond)
	i := 0
	for us > 0 && i < LatenessBuckets-1 {
		us >>= 1
		i++
	}
	l.Buckets[i]++
}

// BucketUpper returns the exclusive upper bound of bucket i; the last
// bucket has none and reports the largest Duration.
func BucketUpper(i int) time.Duration {
	if i >= LatenessBuckets-1 {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(1<<i) * time.Microsecond
}

// Count returns the number of samples.
func (l *Lateness) Count() uint64 {
	var n uint64
	for _, b := range l.Buckets {
		n += b
	}
	return n
}

// Quantile returns an upper bound of the q-quantile (0 < q ≤ 1): the upper
// edge of the bucket holding it, capped by Max; 0 without samples.
func (l *Lateness) Quantile(q float64) time.Duration {
	n := l.Count()
	if n == 0 {
		return 0
	}
	// rank is the 1-based index of the sample at quantile q.
	// (The epsilon keeps float error in q*n from skipping a sample.)
	rank := max(uint64(math.Ceil(q*float64(n)-1e-9)), 1)
	var seen uint64
	for i, b := range l.Buckets {
		seen += b
		if seen >= rank {
			return min(BucketUpper(i), l.Max)
		}
	}
	return l.Max
}
