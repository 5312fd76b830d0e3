package cc

import (
	"testing"
	"time"
)

func TestRTTStats(t *testing.T) {
	ms := time.Millisecond
	type sample struct{ rtt, ackDelay time.Duration }
	tests := []struct {
		name                          string
		maxAckDelay                   time.Duration
		samples                       []sample
		wantLatest, wantMin, wantSRTT time.Duration
		wantVar                       time.Duration
	}{
		{"first sample", 0, []sample{{100 * ms, 10 * ms}}, 100 * ms, 100 * ms, 100 * ms, 50 * ms},
		// 2nd: adjusted = 120-10 = 110 (>= min), var = (3*50+|100-110|)/4 = 40, srtt = (700+110)/8.
		{"ack delay subtracted", 0, []sample{{100 * ms, 0}, {120 * ms, 10 * ms}}, 120 * ms, 100 * ms, 101250 * time.Microsecond, 40 * ms},
		// 105-10 would go below min 100: not subtracted.
		{"ack delay not below min", 0, []sample{{100 * ms, 0}, {105 * ms, 10 * ms}}, 105 * ms, 100 * ms, 100625 * time.Microsecond, 38750 * time.Microsecond},
		// delay capped at max_ack_delay 5 ms: adjusted 115.
		{"ack delay capped", 5 * ms, []sample{{100 * ms, 0}, {120 * ms, 50 * ms}}, 120 * ms, 100 * ms, 101875 * time.Microsecond, 41250 * time.Microsecond},
		{"min from raw samples", 0, []sample{{100 * ms, 0}, {80 * ms, 30 * ms}}, 80 * ms, 80 * ms, 97500 * time.Microsecond, 42500 * time.Microsecond},
		{"non-positive ignored", 0, []sample{{100 * ms, 0}, {0, 0}, {-time.Second, 0}}, 100 * ms, 100 * ms, 100 * ms, 50 * ms},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRTTStats(0)
			r.SetMaxAckDelay(tc.maxAckDelay)
			for _, s := range tc.samples {
				r.UpdateRTT(s.rtt, s.ackDelay)
			}
			if r.LatestRTT() != tc.wantLatest || r.MinRTT() != tc.wantMin || r.SmoothedRTT() != tc.wantSRTT || r.RTTVar() != tc.wantVar {
				t.Fatalf("latest %v min %v srtt %v var %v; want %v %v %v %v", r.LatestRTT(), r.MinRTT(), r.SmoothedRTT(), r.RTTVar(),
					tc.wantLatest, tc.wantMin, tc.wantSRTT, tc.wantVar)
			}
		})
	}
}

func TestRTTStatsPTO(t *testing.T) {
	r := NewRTTStats(0)
	// Before any sample: 333 ms + 4×166.5 ms (+ max ack delay).
	if got, want := r.PTO(false), InitialRTT+4*(InitialRTT/2); got != want {
		t.Fatalf("initial PTO %v, want %v", got, want)
	}
	r.SetMaxAckDelay(25 * time.Millisecond)
	r.UpdateRTT(100*time.Millisecond, 0)
	if got, want := r.PTO(true), 100*time.Millisecond+200*time.Millisecond+25*time.Millisecond; got != want {
		t.Fatalf("PTO %v, want %v", got, want)
	}
	// Many identical samples drive rttvar toward 0: granularity floors it.
	for range 200 {
		r.UpdateRTT(100*time.Millisecond, 0)
	}
	if got, want := r.PTO(false), 100*time.Millisecond+TimerGranularity; got != want {
		t.Fatalf("PTO with tiny rttvar %v, want %v", got, want)
	}
	r.UpdateRTT(300*time.Millisecond, 0)
	r.OnPersistentCongestion()
	if r.MinRTT() != 300*time.Millisecond {
		t.Fatalf("min RTT after persistent congestion %v, want the latest sample", r.MinRTT())
	}
}
