package stack

import (
	"runtime"
	"testing"
	"time"
)

// checkGoroutines waits for the goroutine count to return to base.
func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines: %d, baseline %d: leaked\n%s", n, base, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
