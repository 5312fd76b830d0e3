// Package cpuplace keeps a bench's own processes and the processes it
// measures on separate CPUs, with CPU affinity.
//
// In the lab, the link emulator runs at real-time priority and wakes
// thousands of times a second, and the end hosts' programs wake at every
// delivery; on a machine of two cores they preempt whatever runs, the
// wanopt edges included, and each preemption costs the edge a context
// switch and its cache. An edge deployed on an appliance of its own pays
// none of that. Split and StartOn let a bench measure the edges' own cost:
// the lab on every CPU but the last, the edges on the last.
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
// the measured processes) and the others (for the rest). It fails on a
// machine, or under an affinity, of one CPU.
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

// PinProcess sets the affinity of every thread of this process to set, and
// returns the affinity it had (the calling thread's), for a later
// PinProcess to put back. Threads the process starts later inherit set
// from the thread that starts them.
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

// StartOn starts cmd with its affinity set to set from its first
// instruction: the child of a fork inherits the forking thread's affinity,
// so cmd starts from a thread locked and pinned for the moment, whose
// affinity is then put back. Every thread and child of cmd inherits it.
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
