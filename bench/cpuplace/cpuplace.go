// Package cpuplace keeps a bench's own processes and the processes it
// measures on separate CPUs, with CPU affinity. The real-time link emulator
// and the end hosts' programs preempt the wanopt edges, a cost an edge on an
// appliance of its own does not pay; with Split and StartOn the lab runs on
// every CPU but the last and the edges on the last.
package cpuplace

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Split divides the CPUs this process may run on into the last one (for
// the measured processes) and the others. It fails with one CPU.
func Split() (rest, last unix.CPUSet, err error) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return rest, last, fmt.Errorf("read this process's CPU affinity: %w", err)
	}
	return split(all)
}

func split(all unix.CPUSet) (rest, last unix.CPUSet, err error) {
	if all.Count() < 2 {
		return rest, last, fmt.Errorf("keeping the edges apart from the lab needs two CPUs or more; this process may use %s", Format(all))
	}
	rest = all
	for cpu := len(all)*64 - 1; cpu >= 0; cpu-- {
		if all.IsSet(cpu) {
			last.Set(cpu)
			rest.Clear(cpu)
			break
		}
	}
	return rest, last, nil
}

// PinProcess sets the affinity of every thread of this process (and threads
// started later) to set, and returns the calling thread's old one.
func PinProcess(set unix.CPUSet) (old unix.CPUSet, err error) {
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return old, fmt.Errorf("read this process's CPU affinity: %w", err)
	}
	done := map[int]bool{}
	// A thread started while the list is read may be missed by one pass
	// (it inherits its starter's old mask): pass again until none is new.
	for range 10 {
		tids, err := threads()
		if err != nil {
			return old, err
		}
		fresh := 0
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			fresh++
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return old, fmt.Errorf("set the CPU affinity of thread %d to %s: %w", tid, Format(set), err)
			}
			done[tid] = true
		}
		if fresh == 0 {
			return old, nil
		}
	}
	return old, errors.New("set this process's CPU affinity: it kept starting threads")
}

func threads() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("list this process's threads: %w", err)
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// StartOn starts cmd, and so its threads and children, with affinity set
// from its first instruction, forking from a thread pinned for the moment.
func StartOn(set unix.CPUSet, cmd *exec.Cmd) error {
	runtime.LockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("read the CPU affinity of the starting thread: %w", err)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("set the CPU affinity to %s to start %s: %w", Format(set), cmd.Path, err)
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &old); rerr != nil {
		// The thread stays locked to this goroutine, so that no other
		// runs on the wrong CPUs; it ends with the goroutine.
		return errors.Join(err, fmt.Errorf("put back the CPU affinity of the thread that started %s: %w", cmd.Path, rerr))
	}
	runtime.UnlockOSThread()
	return err
}

// Format writes set as a CPU list, e.g. "0-2,5".
func Format(set unix.CPUSet) string {
	var b strings.Builder
	n := len(set) * 64
	for cpu := 0; cpu < n; cpu++ {
		if !set.IsSet(cpu) {
			continue
		}
		end := cpu
		for end+1 < n && set.IsSet(end+1) {
			end++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpu))
		if end > cpu {
			b.WriteString("-" + strconv.Itoa(end))
		}
		cpu = end
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}
