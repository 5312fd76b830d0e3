package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Go's monitor thread (sysmon) in the link helper. Under 'chrt -f 10' it is
// real-time like every thread of the helper, and its wake-ups, every 20 µs
// to 10 ms, preempt whatever runs on its CPU, often an edge. It keeps none
// of the link's timing, so the helper moves it to SCHED_BATCH, which never
// preempts on waking. Go has no API for it: the runtime starts the monitor
// first, and only it sleeps in nanosleep (the releasers use
// clock_nanosleep), so the helper takes the lowest thread ID after its main
// thread once that thread is seen in nanosleep.

// monitorSearch bounds the helper's search for the monitor thread, which
// sleeps in nanosleep once packets flow.
const monitorSearch = 30 * time.Second

// errNotRealtime: the process is not real-time; its monitor thread is left alone.
var errNotRealtime = errors.New("not real-time; left alone")

// monitorThread returns the ID of this process's Go monitor thread, or 0
// if the thread that should be it is not (yet) seen sleeping in nanosleep.
func monitorThread() (int, error) {
	paths, err := filepath.Glob("/proc/self/task/*")
	if err != nil {
		return 0, err
	}
	pid, lowest := os.Getpid(), 0
	for _, p := range paths {
		tid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || tid == pid {
			continue
		}
		if lowest == 0 || tid < lowest {
			lowest = tid
		}
	}
	if lowest == 0 {
		return 0, nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/syscall", lowest))
	if err != nil {
		return 0, err
	}
	if f := strings.Fields(string(b)); len(f) == 0 || f[0] != strconv.Itoa(unix.SYS_NANOSLEEP) {
		return 0, nil
	}
	return lowest, nil
}

// batchMonitor moves this process's Go monitor thread to SCHED_BATCH if the
// process is real-time, looking every 10 ms until ctx is done. It returns
// the thread's ID, or 0 and why not (errNotRealtime, ctx's error, failure).
func batchMonitor(ctx context.Context) (int, error) {
	own, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return 0, fmt.Errorf("this thread's scheduling policy: %w", err)
	}
	if own.Policy != unix.SCHED_FIFO && own.Policy != unix.SCHED_RR {
		return 0, fmt.Errorf("policy %d: %w", own.Policy, errNotRealtime)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		tid, err := monitorThread()
		if err != nil {
			return 0, fmt.Errorf("find Go's monitor thread: %w", err)
		}
		if tid != 0 {
			batch := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_BATCH}
			if err := unix.SchedSetAttr(tid, &batch, 0); err != nil {
				return 0, fmt.Errorf("move Go's monitor thread %d to SCHED_BATCH: %w", tid, err)
			}
			return tid, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("Go's monitor thread not seen in nanosleep: %w", ctx.Err())
		case <-tick.C:
		}
	}
}
