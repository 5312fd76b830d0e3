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

// Go's monitor thread (sysmon) in the link helper. Under 'chrt -f 10' every
// thread of the helper is real-time, this one too, and it wakes on a timer
// of its own every 20 µs to 10 ms to take back processors from threads in
// system calls, which the releasers and readers are in all the time; a
// real-time thread's wake-up takes the CPU it lands on at once. In a
// scheduler trace at 250 Mbit/s and 0 ms it preempted the far edge 575
// times a second and the near edge 531, half of the helper's preemptions
// of each. It has no timing of the link's to keep, so the helper moves it
// to SCHED_BATCH, which never preempts on waking
// (docs/efficiency/lab-monitor-ab.txt).
//
// Go has no API for it. The runtime starts the monitor first, before any
// other thread (runtime.main), and it sleeps in nanosleep, which nothing
// else in the helper calls (the releasers use clock_nanosleep): the
// helper takes the lowest thread ID after its main thread, once that
// thread is seen in nanosleep.

// monitorSearch bounds the helper's search for the monitor thread: it
// sleeps in nanosleep as soon as packets flow, which in the lab is within
// seconds of the link's start.
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
// process runs at a real-time policy (every thread inherits it from the
// one chrt started), looking for it every 10 ms until ctx is done (it
// sleeps elsewhere while the process is idle). It returns the thread's
// ID, or 0 and why not (errNotRealtime, ctx's error, or a failure).
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
