// Package cpulimit reads the CPU bandwidth limit of the cgroup a process
// runs in (cgroup v1 cpu.cfs_quota_us, v2 cpu.max) and keeps GOMAXPROCS
// at 1 while that limit is one CPU or less, or while the process uses
// well under one core.
//
// Go's own default follows the limit too, but never below 2 and only for
// the cgroup the process started in. An edge held to a fraction of a core
// does better on one thread: with two, the second spins looking for work
// and the scheduler hands goroutines between threads (`wanbench cisco
// --edge-cpu 0.25` against `--edge-procs 2`).
package cpulimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Files names where the cgroup files are: the process's cgroup list
// (/proc/self/cgroup) and the mount table (/proc/self/mountinfo). Tests
// point them at a fake tree.
type Files struct {
	Cgroup, MountInfo string
}

// Self is the running process's.
var Self = Files{Cgroup: "/proc/self/cgroup", MountInfo: "/proc/self/mountinfo"}

// Limit returns the CPU bandwidth limit, in CPUs, of the cgroup the
// process is in now; ok is false when it has none (or no CPU controller
// is mounted).
func (f Files) Limit() (cpus float64, ok bool, err error) {
	cg, err := os.ReadFile(f.Cgroup)
	if err != nil {
		return 0, false, fmt.Errorf("cpulimit: %w", err)
	}
	mounts, err := os.ReadFile(f.MountInfo)
	if err != nil {
		return 0, false, fmt.Errorf("cpulimit: %w", err)
	}
	v1path, v2path, haveV1, haveV2 := parseCgroup(string(cg))
	v1mount, v1root, v2mount, v2root := parseMounts(string(mounts))
	if haveV1 && v1mount != "" {
		dir := filepath.Join(v1mount, strings.TrimPrefix(v1path, v1root))
		quota, err1 := readInt(filepath.Join(dir, "cpu.cfs_quota_us"))
		period, err2 := readInt(filepath.Join(dir, "cpu.cfs_period_us"))
		if err := errors.Join(err1, err2); err != nil {
			return 0, false, err
		}
		if quota <= 0 || period <= 0 {
			return 0, false, nil
		}
		return float64(quota) / float64(period), true, nil
	}
	if haveV2 && v2mount != "" {
		dir := filepath.Join(v2mount, strings.TrimPrefix(v2path, v2root))
		b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
		if errors.Is(err, os.ErrNotExist) {
			return 0, false, nil // no cpu controller in this group
		}
		if err != nil {
			return 0, false, fmt.Errorf("cpulimit: %w", err)
		}
		fields := strings.Fields(string(b))
		if len(fields) == 2 && fields[0] == "max" {
			return 0, false, nil
		}
		if len(fields) != 2 {
			return 0, false, fmt.Errorf("cpulimit: cpu.max %q: not QUOTA PERIOD", strings.TrimSpace(string(b)))
		}
		quota, err1 := strconv.ParseInt(fields[0], 10, 64)
		period, err2 := strconv.ParseInt(fields[1], 10, 64)
		if err1 != nil || err2 != nil || quota <= 0 || period <= 0 {
			return 0, false, fmt.Errorf("cpulimit: cpu.max %q: not QUOTA PERIOD", strings.TrimSpace(string(b)))
		}
		return float64(quota) / float64(period), true, nil
	}
	return 0, false, nil
}

// parseCgroup finds the v1 cpu controller's path and the v2 path in
// /proc/self/cgroup.
func parseCgroup(s string) (v1, v2 string, haveV1, haveV2 bool) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2, haveV2 = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpu" {
				v1, haveV1 = parts[2], true
			}
		}
	}
	return
}

// parseMounts finds where the v1 cpu controller and the v2 hierarchy are
// mounted, and the cgroup path each mount's root is (not "/" inside a
// container's cgroup namespace).
func parseMounts(s string) (v1mount, v1root, v2mount, v2root string) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
		f := strings.Fields(sc.Text())
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || len(f) < sep+4 {
			continue
		}
		switch f[sep+1] {
		case "cgroup":
			for _, o := range strings.Split(f[sep+3], ",") {
				if o == "cpu" && v1mount == "" {
					v1mount, v1root = f[4], f[3]
				}
			}
		case "cgroup2":
			if v2mount == "" {
				v2mount, v2root = f[4], f[3]
			}
		}
	}
	return
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("cpulimit: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cpulimit: %s: %w", path, err)
	}
	return n, nil
}

// Procs is the GOMAXPROCS for a limit: 1 at one CPU or less, 0 (Go's
// default) otherwise.
func Procs(cpus float64, ok bool) int {
	if ok && cpus <= 1 {
		return 1
	}
	return 0
}

// Thresholds of AdaptiveProcs, in cores of CPU the process used over the
// last interval. One thread can give at most one core, so a process on one
// thread that uses more than moreAbove gets Go's default back; one on the
// default that uses less than oneBelow, well within a core, goes to one
// thread. The gap keeps it from switching back and forth.
const (
	moreAbove = 0.7
	oneBelow  = 0.35
)

// AdaptiveProcs is the GOMAXPROCS for a limit, the cores the process used
// over the last interval and what it runs on now (cur: 1, or 0 for Go's
// default): 1 at a limit of one CPU or less; otherwise one thread while
// it uses well under a core, Go's default once one thread is not enough.
//
// Why one thread when it suffices: an edge's goroutines hand work to each
// other at every packet batch, and with two threads the idle one spins
// looking for it and the scheduler moves goroutines between threads, which
// costs about a third more CPU per byte (`wanbench cisco --rate 50mbit
// --rtt 100ms --edge-procs 2` against the default).
func AdaptiveProcs(cpus float64, limited bool, usedCores float64, cur int) int {
	if Procs(cpus, limited) == 1 {
		return 1
	}
	if cur == 1 {
		if usedCores > moreAbove {
			return 0
		}
		return 1
	}
	if usedCores < oneBelow {
		return 1
	}
	return 0
}

// Follow checks the limit and the process's CPU use every interval until
// ctx ends, and keeps GOMAXPROCS at AdaptiveProcs of them. It checks again
// rather than once because a process can be moved into a cgroup after it
// starts (wanbench's --edge-cpu does that), and its load changes.
func (f Files) Follow(ctx context.Context, interval time.Duration, log *slog.Logger) {
	set := 0 // what Follow set: 0 is Go's default
	t := time.NewTicker(interval)
	defer t.Stop()
	warned := false
	lastCPU, lastAt := processCPU(), time.Now()
	used := 0.0 // a process starts idle
	for {
		cpus, ok, err := f.Limit()
		if err != nil {
			if !warned {
				log.Warn("cannot read the CPU limit; GOMAXPROCS follows the CPU use alone", "err", err)
				warned = true
			}
			ok = false
		}
		if want := AdaptiveProcs(cpus, ok, used, set); want != set {
			if want == 0 {
				runtime.SetDefaultGOMAXPROCS()
			} else {
				runtime.GOMAXPROCS(want)
			}
			set = want
			log.Info("GOMAXPROCS follows the CPU limit and use", "cpus", cpus, "limited", ok,
				"used_cores", fmt.Sprintf("%.2f", used), "gomaxprocs", runtime.GOMAXPROCS(0))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cpu, at := processCPU(), time.Now()
		used = (cpu - lastCPU).Seconds() / at.Sub(lastAt).Seconds()
		lastCPU, lastAt = cpu, at
	}
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
