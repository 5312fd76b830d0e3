package lab

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMonitorThread finds this process's Go monitor thread while a goroutine
// keeps it busy (that goroutine's thread, also in nanosleep, must not be
// taken for it), and checks batchMonitor leaves a non-real-time process alone.
func TestMonitorThread(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	busyTID := make(chan int, 1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		busyTID <- unix.Gettid()
		ts := unix.NsecToTimespec(200_000)
		for ctx.Err() == nil {
			_ = unix.Nanosleep(&ts, nil) // a blocking system call: the monitor takes its P
		}
	}()
	busy := <-busyTID
	var tid int
	for deadline := time.Now().Add(5 * time.Second); tid == 0; {
		var err error
		if tid, err = monitorThread(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no monitor thread seen in nanosleep within 5 s")
		}
		time.Sleep(time.Millisecond)
	}
	if tid == busy || tid == unix.Getpid() {
		t.Fatalf("monitorThread = %d: the busy goroutine's thread (%d) or the main thread", tid, busy)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if got, err := batchMonitor(wctx); got != 0 || !errors.Is(err, errNotRealtime) {
		t.Errorf("batchMonitor in a process that is not real-time = %d, %v; want 0, errNotRealtime", got, err)
	}
	cancel()
	<-stopped
}
