package harness

import "time"

// RecoveryBar is the share of GoodputLimitMbps a transfer must reach again
// after an outage to count as recovered.
const RecoveryBar = 0.8

// GoodputLimitMbps is the most payload a link of rateBps carries for TCP
// with 1500-byte packets and timestamps: 1448 bytes of every 1500.
func GoodputLimitMbps(rateBps float64) float64 { return rateBps / 1e6 * 1448 / 1500 }

// RateInterval is a transfer's throughput over one interval, all streams.
type RateInterval struct {
	StartS float64 `json:"start_s"`
	EndS   float64 `json:"end_s"`
	Mbps   float64 `json:"mbps"`
}

// NotRecovered is the RecoveryS of a transfer that never reached the bar again.
const NotRecovered = -1

// RecoveryTime returns the seconds from upS, the link's return, to the end of
// the first later interval at barMbps or more, or NotRecovered (time order).
func RecoveryTime(iv []RateInterval, upS, barMbps float64) float64 {
	for _, x := range iv {
		if x.EndS > upS && x.Mbps >= barMbps {
			return round(x.EndS-upS, 4)
		}
	}
	return NotRecovered
}

// ReportInterval is how often throughput is sampled for recovery: two RTTs,
// so per-round-trip windows do not make the rate swing, within 0.1-0.5 s.
func ReportInterval(rtt time.Duration) time.Duration {
	return min(max(2*rtt, 100*time.Millisecond), 500*time.Millisecond)
}
