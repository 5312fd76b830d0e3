// Package cgroup holds processes to a share of the CPU with a CPU-bandwidth
// cgroup: under cgroup v2 (cpu.max) or cgroup v1's cpu controller
// (cpu.cfs_quota_us), whichever the machine has.
package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Root is where Linux mounts the cgroup hierarchies.
const Root = "/sys/fs/cgroup"

const (
	// periodUs is the CFS bandwidth period the quota is a share of: the
	// kernel's default, 100 ms.
	periodUs = 100_000
	// minQuotaUs is the smallest quota the kernel accepts (1 ms).
	minQuotaUs = 1000
	// prefix starts every group's name, "wanbench-<pid>-<label>": the pid
	// tells the groups of a bench that died (left behind) from those of one
	// that runs.
	prefix = "wanbench-"
)

var leftoverRE = regexp.MustCompile(`^` + prefix + `([0-9]+)-`)

// ErrNoController is NewCPUCap's error (wrapped) when neither cgroup
// hierarchy offers CPU-bandwidth control.
var ErrNoController = errors.New("no CPU-bandwidth controller")

// rmdir removes an empty group. A variable so that the tests' fake
// hierarchy, whose directories hold plain files where the kernel's hold
// its control files, can remove them.
var rmdir = os.Remove

// CPUCap is a cgroup that holds its processes to a number of CPUs. Close
// removes it.
type CPUCap struct {
	dir    string // the group
	parent string // the hierarchy's root, where Close moves remaining processes
	closed bool
}

// NewCPUCap creates the group "wanbench-<pid>-<label>" (pid: this process)
// under the CPU controller mounted at root (normally Root) and limits it
// to cores CPUs per 100 ms period. It uses cgroup v2 if root/cgroup.controllers
// lists cpu (and enables cpu for root's children if needed), else cgroup
// v1's root/cpu; neither is an error that says what is missing. It first
// removes the empty groups of benches that have died.
func NewCPUCap(root, label string, cores float64) (*CPUCap, error) {
	if math.IsNaN(cores) || math.IsInf(cores, 0) || cores <= 0 {
		return nil, fmt.Errorf("CPU cap of %v cores: want a positive number", cores)
	}
	if label == "" || strings.ContainsAny(label, "/\x00") {
		return nil, fmt.Errorf("CPU cap label %q: want a plain name", label)
	}
	quota := int64(math.Round(cores * periodUs))
	if quota < minQuotaUs {
		return nil, fmt.Errorf("CPU cap of %v cores: the kernel's smallest quota is %d µs per %d µs period (%.2f cores)",
			cores, minQuotaUs, periodUs, float64(minQuotaUs)/periodUs)
	}
	parent, v2, err := findController(root)
	if err != nil {
		return nil, err
	}
	removeLeftovers(parent)
	if v2 {
		if err := enableCPU(parent); err != nil {
			return nil, err
		}
	}
	c := &CPUCap{dir: filepath.Join(parent, fmt.Sprintf("%s%d-%s", prefix, os.Getpid(), label)), parent: parent}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("create cgroup %s: it already exists (left by an earlier cap of this process?): remove it with rmdir", c.dir)
		}
		return nil, fmt.Errorf("create cgroup %s: %w%s", c.dir, err, rootHint(err))
	}
	if v2 {
		err = write(c.dir, "cpu.max", fmt.Sprintf("%d %d", quota, periodUs))
	} else {
		// The period first: the quota is checked against it.
		err = write(c.dir, "cpu.cfs_period_us", strconv.Itoa(periodUs))
		if err == nil {
			err = write(c.dir, "cpu.cfs_quota_us", strconv.FormatInt(quota, 10))
		}
	}
	if err != nil {
		_ = rmdir(c.dir)
		return nil, err
	}
	return c, nil
}

// findController returns the directory of the hierarchy that has the cpu
// controller under root, and whether it is cgroup v2.
func findController(root string) (dir string, v2 bool, err error) {
	ctl, v2err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if v2err == nil && slices.Contains(strings.Fields(string(ctl)), "cpu") {
		return root, true, nil
	}
	v1 := filepath.Join(root, "cpu")
	_, v1err := os.Stat(filepath.Join(v1, "cpu.cfs_quota_us"))
	if v1err == nil {
		return v1, false, nil
	}
	v2state := "absent"
	if v2err == nil {
		v2state = fmt.Sprintf("lists %q, no cpu", strings.TrimSpace(string(ctl)))
	}
	return "", false, fmt.Errorf("%w under %s: cgroup v2 needs the cpu controller in %s (%s); cgroup v1 needs the cpu controller with CFS bandwidth control at %s (%v). Mount one (e.g. 'mkdir -p %s && mount -t cgroup -o cpu cgroup %s'), or run without the CPU cap",
		ErrNoController, root, filepath.Join(root, "cgroup.controllers"), v2state, filepath.Join(v1, "cpu.cfs_quota_us"), v1err, v1, v1)
}

// enableCPU makes cgroup v2's cpu controller available to root's children
// (cpu.max exists only where the parent's subtree_control lists cpu).
func enableCPU(root string) error {
	b, err := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Join(root, "cgroup.subtree_control"), err)
	}
	if slices.Contains(strings.Fields(string(b)), "cpu") {
		return nil
	}
	if err := write(root, "cgroup.subtree_control", "+cpu"); err != nil {
		return fmt.Errorf("enable the cpu controller for %s's children: %w (a cgroup with processes of its own cannot enable it: run from the hierarchy's root)", root, err)
	}
	return nil
}

// Dir is the group's directory.
func (c *CPUCap) Dir() string { return c.dir }

// Add moves process pid, with all its threads, into the group. Threads and
// children it starts later are born in it.
func (c *CPUCap) Add(pid int) error {
	if err := write(c.dir, "cgroup.procs", strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("move process %d into the CPU cap: %w", pid, err)
	}
	return nil
}

// Close moves processes still in the group back to the hierarchy's root
// and removes the group. It is safe to call more than once; after an error
// it can be called again.
func (c *CPUCap) Close() error {
	if c == nil || c.closed {
		return nil
	}
	if err := emptyGroup(c.dir, c.parent); err != nil {
		return err
	}
	// A process that has just been reaped can keep the group busy for a
	// moment (cgroup v2 updates "populated" asynchronously).
	deadline := time.Now().Add(time.Second)
	for {
		err := rmdir(c.dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			c.closed = true
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w (its processes: %s)", c.dir, err, readProcs(c.dir))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// emptyGroup moves the processes listed in dir back to parent.
func emptyGroup(dir, parent string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list the processes of cgroup %s: %w", dir, err)
	}
	for _, pid := range strings.Fields(string(b)) {
		// ESRCH: it exited meanwhile, which empties the group just as well.
		if err := write(parent, "cgroup.procs", pid); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("move process %s out of cgroup %s before removing it: %w", pid, dir, err)
		}
	}
	return nil
}

// removeLeftovers removes the groups of benches that have died (a killed
// bench cannot remove its own). Groups of live processes are left alone;
// failures only leave an empty group behind.
func removeLeftovers(parent string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		m := leftoverRE.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		if emptyGroup(dir, parent) == nil {
			_ = rmdir(dir)
		}
	}
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func readProcs(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return err.Error()
	}
	if s := strings.Join(strings.Fields(string(b)), " "); s != "" {
		return s
	}
	return "none"
}

// write writes one value to a control file. Each write(2) to a cgroup file
// is one command, so the value goes in one call.
func write(dir, file, value string) error {
	p := filepath.Join(dir, file)
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("write %q to %s: %w%s", value, p, err, rootHint(err))
	}
	return nil
}

func rootHint(err error) string {
	if errors.Is(err, fs.ErrPermission) && os.Geteuid() != 0 {
		return " (cgroups need root)"
	}
	return ""
}
