package analyze

// seriesPoints is the most buckets a series holds. When a flow outlasts
// them, neighbouring buckets are merged and the bucket width doubles, so the
// memory per flow stays fixed however long the capture is.
const seriesPoints = 512

// initialBucket is the width of a bucket when a series starts: 1 ms.
const initialBucket = int64(1e6)

// bucket aggregates what happened in one direction during one time slice.
type bucket struct {
	used        bool
	sentBytes   int64 // payload bytes put on the wire, retransmissions included
	ackedBytes  int64 // new bytes acknowledged cumulatively
	retrans     int64 // retransmitted payload bytes
	maxInFlight int64
	endInFlight int64 // bytes in flight after the slice's last event
	lastWindow  int64 // last advertised window seen in the slice (-1: none)
	minWindow   int64
	// The least RTT samples in the slice (0: none). The minimum, not the
	// mean: delayed ACKs inflate single samples, queueing raises them all.
	rttMin  int64 // data segment to the ACK that covers it
	echoMin int64 // the receiver's timestamp to the sender's echo of it
}

// series is a fixed-size, self-coarsening time series for one direction.
type series struct {
	start   int64    // time of bucket 0, ns
	width   int64    // ns per bucket
	buckets []bucket // grows up to seriesPoints
}

func (s *series) init(start int64) {
	s.start = start
	s.width = initialBucket
}

// at returns the bucket for time t (ns), coarsening as needed. Times before
// the start (out-of-order timestamps) land in bucket 0.
func (s *series) at(t int64) *bucket {
	d := t - s.start
	if d < 0 {
		d = 0
	}
	i := d / s.width
	for i >= seriesPoints {
		s.coarsen()
		i = d / s.width
	}
	for int(i) >= len(s.buckets) {
		s.buckets = append(s.buckets, bucket{})
	}
	b := &s.buckets[i]
	if !b.used {
		*b = bucket{used: true, lastWindow: -1, minWindow: -1}
	}
	return b
}

func (s *series) coarsen() {
	n := len(s.buckets)
	half := (n + 1) / 2
	for i := 0; i < half; i++ {
		var b bucket
		if 2*i+1 < n {
			b = s.buckets[2*i+1]
		}
		s.buckets[i] = merge(s.buckets[2*i], b)
	}
	s.buckets = s.buckets[:half]
	s.width *= 2
}

func merge(a, b bucket) bucket {
	if !a.used {
		return b
	}
	if !b.used {
		return a
	}
	m := bucket{
		used:        true,
		sentBytes:   a.sentBytes + b.sentBytes,
		ackedBytes:  a.ackedBytes + b.ackedBytes,
		retrans:     a.retrans + b.retrans,
		maxInFlight: max(a.maxInFlight, b.maxInFlight),
		endInFlight: b.endInFlight,
		lastWindow:  a.lastWindow,
		minWindow:   a.minWindow,
	}
	if b.lastWindow >= 0 {
		m.lastWindow = b.lastWindow
	}
	if b.minWindow >= 0 && (m.minWindow < 0 || b.minWindow < m.minWindow) {
		m.minWindow = b.minWindow
	}
	m.rttMin = minSample(a.rttMin, b.rttMin)
	m.echoMin = minSample(a.echoMin, b.echoMin)
	return m
}

// minSample is the smaller of two RTT samples, 0 meaning none.
func minSample(a, b int64) int64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// Point is one time slice of a flow direction, for plots and JSON.
type Point struct {
	T          float64 `json:"t"`          // seconds since the flow's first packet
	Mbps       float64 `json:"mbps"`       // goodput: new bytes acknowledged in the slice
	SentMbps   float64 `json:"sent_mbps"`  // bytes put on the wire in the slice
	InFlight   int64   `json:"in_flight"`  // most bytes in flight during the slice
	Window     int64   `json:"window"`     // advertised receive window at the end of the slice (-1: unknown)
	MinWindow  int64   `json:"min_window"` // smallest advertised window in the slice (-1: unknown)
	Retransmit int64   `json:"retransmit"` // retransmitted bytes in the slice
	// RTTms is the least data-to-ACK RTT sampled in the slice, EchoMs the
	// least time from the receiver's timestamp to the sender's echo (the
	// half of the path behind a capture near the receiver); 0: no sample.
	RTTms  float64 `json:"rtt_ms,omitempty"`
	EchoMs float64 `json:"echo_ms,omitempty"`
}

// points renders the used buckets; empty slices carry the window forward.
func (s *series) points() []Point {
	last := -1
	for i := range s.buckets {
		if s.buckets[i].used {
			last = i
		}
	}
	out := make([]Point, 0, last+1)
	win, infl := int64(-1), int64(0)
	sec := float64(s.width) / 1e9
	for i := 0; i <= last; i++ {
		b := s.buckets[i]
		if !b.used { // nothing happened: the state carries over
			b = bucket{lastWindow: -1, minWindow: -1, maxInFlight: infl, endInFlight: infl}
		}
		infl = b.endInFlight
		if b.lastWindow >= 0 {
			win = b.lastWindow
		}
		minW := b.minWindow
		if minW < 0 {
			minW = win
		}
		out = append(out, Point{
			T:          float64(int64(i)*s.width) / 1e9,
			Mbps:       float64(b.ackedBytes) * 8 / sec / 1e6,
			SentMbps:   float64(b.sentBytes) * 8 / sec / 1e6,
			InFlight:   b.maxInFlight,
			Window:     win,
			MinWindow:  minW,
			Retransmit: b.retrans,
			RTTms:      ms(b.rttMin),
			EchoMs:     ms(b.echoMin),
		})
	}
	return out
}
