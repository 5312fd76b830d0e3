package monotime

import (
	"testing"
	"time"
)

func TestArithmetic(t *testing.T) {
	var t0 Time = 1000
	t1 := t0.Add(5 * time.Millisecond)
	if got := t1.Sub(t0); got != 5*time.Millisecond {
		t.Fatalf("Sub = %v, want 5ms", got)
	}
	if !t0.Before(t1) || !t1.After(t0) || t0.IsZero() {
		t.Fatal("ordering is wrong")
	}
	if a, b := Now(), Now(); b < a || a.IsZero() {
		t.Fatalf("Now not monotonic or zero: %d then %d", a, b)
	}
}
