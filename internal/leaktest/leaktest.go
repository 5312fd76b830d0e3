// Package leaktest fails a test whose goroutines outlive it.
package leaktest

import (
	"runtime"
	"testing"
	"time"
)

// Check records the goroutine count now and, when the test ends, fails it
// if more goroutines remain after a 5 s grace period, printing them all.
// Call it first, so that its check runs after the test's other cleanups.
func Check(t testing.TB) {
	t.Helper()
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > base {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("%d goroutines leaked:\n%s", n-base, buf)
		}
	})
}
