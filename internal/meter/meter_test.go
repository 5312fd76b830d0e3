package meter

import (
	"testing"
	"time"
)

func TestRate(t *testing.T) {
	var r Rate
	if r.Bps() != 0 {
		t.Fatalf("new Rate: %d bit/s, want 0", r.Bps())
	}
	r.Sample(125_000, time.Second) // 1 Mbit in the first second
	if got := r.Bps(); got != 1_000_000 {
		t.Errorf("after 125 kB in 1 s: %d bit/s, want 1000000", got)
	}
	r.Sample(125_000+250_000, 500*time.Millisecond)
	if got := r.Bps(); got != 4_000_000 {
		t.Errorf("after 250 kB more in 0.5 s: %d bit/s, want 4000000", got)
	}
	r.Sample(375_000, time.Second) // idle
	if got := r.Bps(); got != 0 {
		t.Errorf("idle second: %d bit/s, want 0", got)
	}
	r.Sample(400_000, 0) // no interval: ignored
	if got := r.Bps(); got != 0 {
		t.Errorf("zero interval changed the rate to %d", got)
	}
	r.Sample(500_000, time.Second) // counts from the last sample taken
	if got := r.Bps(); got != 1_000_000 {
		t.Errorf("after the ignored sample: %d bit/s, want 1000000", got)
	}
}
